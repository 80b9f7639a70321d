import assert from "node:assert/strict";
import { chunkSize, fieldTokens, requestFramingError } from "./http_head.ts";

Deno.test("request framing: unambiguous heads pass, smuggling shapes are named", () => {
  const table: [string[], RegExp | null][] = [
    [[], null],
    [["Host: a", "Content-Length: 5"], null],
    [["Content-Length: 0"], null],
    [["Content-Length: 5", "content-length: 5"], null],
    [["Content-Length: 5, 5"], null],
    [["Transfer-Encoding: chunked"], null],
    [["Transfer-Encoding: gzip, chunked"], null],
    [
      ["Transfer-Encoding: chunked", "Content-Length: 5"],
      /both Transfer-Encoding and Content-Length/,
    ],
    [["Content-Length: 5", "transfer-encoding: chunked"], /both/],
    [["Transfer-Encoding: chunked, gzip"], /does not end in chunked/],
    [["Transfer-Encoding: identity"], /does not end in chunked/],
    [["Content-Length: -1"], /Content-Length -1/],
    [["Content-Length: 1e3"], /Content-Length 1e3/],
    [["Content-Length: "], /Content-Length/],
    [["Content-Length: 5", "Content-Length: 6"], /conflicting Content-Length values 5, 6/],
    [["Content-Length: 5, 6"], /conflicting/],
    [["Content-Length : 5"], /whitespace in the header name/],
    [[" folded continuation"], /without a name/],
    [["no colon"], /without a name/],
  ];
  for (const [lines, want] of table) {
    const got = requestFramingError(lines);
    if (want === null) assert.equal(got, null, JSON.stringify(lines));
    else assert.match(got ?? "(null)", want, JSON.stringify(lines));
  }
});

Deno.test("chunkSize() reads chunk-size lines and refuses malformed ones", () => {
  const table: [string, number | null][] = [
    ["1a", 26],
    ["0", 0],
    ["A;name=value", 10],
    ["ff \t;x", 255],
    ["ffffffffffff", 0xffffffffffff],
    ["", null],
    ["x", null],
    ["-1", null],
    [" 1", null],
    ["1234567890abc", null],
  ];
  for (const [line, want] of table) assert.equal(chunkSize(line), want, JSON.stringify(line));
});

Deno.test("fieldTokens() reads every line of a list field, lower-case and trimmed", () => {
  const headers: [string, string][] = [
    ["connection", "Keep-Alive, Upgrade"],
    ["host", "a"],
    ["connection", " X-Custom "],
  ];
  assert.deepEqual(fieldTokens(headers, "connection"), ["keep-alive", "upgrade", "x-custom"]);
  assert.deepEqual(fieldTokens(headers, "expect"), []);
});
