import assert from "node:assert/strict";
import { BodyEnd } from "./body_end.ts";
import { MAX_CHUNK_LINE } from "./http_head.ts";

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));

/** Feeds `pieces` in turn; the body bytes taken from each, and whether it ended. */
function feed(framing: number | "chunked", pieces: string[]): { taken: number[]; done: boolean } {
  const end = new BodyEnd(framing);
  return { taken: pieces.map((p) => end.take(bytes(p))), done: end.done };
}

Deno.test("BodyEnd: where a body ends, whole or in pieces", () => {
  const next = "GET http://evil.example/ HTTP/1.1\r\n\r\n";
  const cases: [string, number | "chunked", string[], number[], boolean][] = [
    ["no body", 0, [next], [0], true],
    ["a length, then a second request", 5, ["hello" + next], [5], true],
    ["a length in pieces", 5, ["he", "llo", next], [2, 3, 0], true],
    ["a length not reached", 5, ["hel"], [3], false],
    ["chunks, then a second request", "chunked", ["5\r\nhello\r\n0\r\n\r\n" + next], [15], true],
    [
      "a chunk extension and trailers",
      "chunked",
      ["5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" + next],
      [
        27,
      ],
      true,
    ],
    ["byte by byte", "chunked", [..."3\r\nabc\r\n0\r\n\r\n", "x"], [...Array(13).fill(1), 0], true],
    ["a chunk whose data holds a request", "chunked", [`${next.length.toString(16)}\r\n${next}`], [
      next.length + 4,
    ], false],
    ["the last chunk without its blank line", "chunked", ["0\r\n"], [3], false],
  ];
  for (const [name, framing, pieces, taken, done] of cases) {
    assert.deepEqual(feed(framing, pieces), { taken, done }, name);
  }
});

Deno.test("BodyEnd: malformed chunked coding is refused, naming what is wrong", () => {
  const cases: [string, string][] = [
    ["zz\r\n", 'invalid chunk size "zz"'],
    ["-1\r\n", 'invalid chunk size "-1"'],
    ["5\r\nhelloX\r\n", "a chunk not followed by CRLF"],
    ["5\nhello\r\n", "a control character in a chunk line"],
    [
      "5\r\nhello\r\n0\r\nX: a\n\nGET /secret HTTP/1.1\r\n\r\n",
      "a control character in a chunk line",
    ],
    ["5\r\rhello", "a control character in a chunk line"],
    ["5\0\r\n", "a control character in a chunk line"],
    [`5;${"x".repeat(MAX_CHUNK_LINE)}\r\n`, "a chunk line is too long"],
  ];
  for (const [body, why] of cases) {
    const end = new BodyEnd("chunked");
    assert.throws(() => end.take(bytes(body)), { name: "RequestBodyError", message: why }, body);
  }
});
