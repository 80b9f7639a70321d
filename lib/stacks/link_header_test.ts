import assert from "node:assert/strict";
import { nextLink, onApiOrigin } from "./link_header.ts";

Deno.test("nextLink() finds rel=next among the links, quoted or not, in any case", () => {
  const cases: [string, string | null][] = [
    ['<http://h/x?page=2>; rel="next", <http://h/x?page=9>; rel="last"', "http://h/x?page=2"],
    ['<http://h/x?page=9>; rel="last", <http://h/x?page=3>; rel="next"', "http://h/x?page=3"],
    ["<http://h/x?page=2>; rel=next", "http://h/x?page=2"],
    ['<http://h/x?page=2>; rel="Next"', "http://h/x?page=2"],
    ['<http://h/x?page=2>; title="a"; rel="prev next"', "http://h/x?page=2"],
    ['<http://h/x?page=1>; rel="prev", <http://h/x?page=1>; rel="first"', null],
    ['<http://h/x?a=1,2&page=2>; rel="next"', "http://h/x?a=1,2&page=2"],
    ['<http://h/x?page=2>; rel="nextish"', null],
    ["", null],
    ["garbage", null],
  ];
  for (const [link, want] of cases) assert.equal(nextLink(link), want, link);
});

Deno.test("onApiOrigin() keeps the path and query but sends them to the API base's origin", () => {
  const cases: [string, string, string | null][] = [
    [
      "http://127.0.0.1:9/repos/o/r/stacks?page=2",
      "http://127.0.0.1:8080",
      "http://127.0.0.1:8080/repos/o/r/stacks?page=2",
    ],
    [
      "https://api.github.com/repos/o/r/stacks?page=2&per_page=100",
      "https://api.github.com",
      "https://api.github.com/repos/o/r/stacks?page=2&per_page=100",
    ],
    [
      "http://internal/api/v3/repos/o/r/stacks?page=3",
      "https://ghe.example.com/api/v3",
      "https://ghe.example.com/api/v3/repos/o/r/stacks?page=3",
    ],
    [
      "/api/v3/repos/o/r/stacks?page=3",
      "https://ghe.example.com/api/v3",
      "https://ghe.example.com/api/v3/repos/o/r/stacks?page=3",
    ],
    ["https://ghe.example.com/other/repos?page=2", "https://ghe.example.com/api/v3", null],
    ["https://ghe.example.com/api/v3x/repos?page=2", "https://ghe.example.com/api/v3", null],
    ["http://[bad", "https://api.github.com", null],
  ];
  for (const [target, base, want] of cases) {
    if (want === null) assert.throws(() => onApiOrigin(target, base), TypeError, target);
    else assert.equal(onApiOrigin(target, base), want, target);
  }
});
