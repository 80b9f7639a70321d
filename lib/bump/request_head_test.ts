import assert from "node:assert/strict";
import { type ParsedHead, parseRequestHead } from "./request_head.ts";

const H = "Host: api.github.com";

Deno.test("parseRequestHead() reads the request line, fields and body framing", () => {
  const table: [string, string, Omit<Extract<ParsedHead, { ok: true }>, "ok">][] = [
    [
      "origin-form with a query",
      `GET /repos/a/b?per_page=100&q=x HTTP/1.1\r\n${H}`,
      {
        method: "GET",
        target: "/repos/a/b?per_page=100&q=x",
        version: "1.1",
        headers: [["host", "api.github.com"]],
        body: 0,
      },
    ],
    [
      "absolute-form https target",
      `GET https://api.github.com/allowed/x?y HTTP/1.1\r\n${H}`,
      {
        method: "GET",
        target: "https://api.github.com/allowed/x?y",
        version: "1.1",
        headers: [["host", "api.github.com"]],
        body: 0,
      },
    ],
    [
      "HTTP/1.0 without Host",
      "GET /x HTTP/1.0\r\nAccept: */*",
      { method: "GET", target: "/x", version: "1.0", headers: [["accept", "*/*"]], body: 0 },
    ],
    [
      "a chunked body",
      `POST /x HTTP/1.1\r\n${H}\r\nTransfer-Encoding: gzip, chunked`,
      {
        method: "POST",
        target: "/x",
        version: "1.1",
        headers: [["host", "api.github.com"], ["transfer-encoding", "gzip, chunked"]],
        body: "chunked",
      },
    ],
    [
      "a Content-Length body, the same length repeated",
      `PUT /x HTTP/1.1\r\n${H}\r\nContent-Length: 42\r\ncontent-length: 42, 42`,
      {
        method: "PUT",
        target: "/x",
        version: "1.1",
        headers: [["host", "api.github.com"], ["content-length", "42"], [
          "content-length",
          "42, 42",
        ]],
        body: 42,
      },
    ],
    [
      "names lower-cased, values trimmed, order kept",
      `GET / HTTP/1.1\r\nX-Custom-ID:  AbC \r\n${H}\r\nAccept:\t*/*`,
      {
        method: "GET",
        target: "/",
        version: "1.1",
        headers: [["x-custom-id", "AbC"], ["host", "api.github.com"], ["accept", "*/*"]],
        body: 0,
      },
    ],
    [
      "leading empty lines ignored",
      `\r\n\r\nDELETE /x HTTP/1.1\r\n${H}`,
      {
        method: "DELETE",
        target: "/x",
        version: "1.1",
        headers: [["host", "api.github.com"]],
        body: 0,
      },
    ],
  ];
  for (const [name, head, want] of table) {
    assert.deepEqual(parseRequestHead(head), { ok: true, ...want }, name);
  }
});

Deno.test("parseRequestHead() refuses malformed, ambiguous and Host-less heads, naming the reason", () => {
  const table: [string, string, RegExp][] = [
    ["no version", "GET /x", /malformed request line "GET \/x"/],
    ["two spaces", `GET  /x HTTP/1.1\r\n${H}`, /malformed request line/],
    ["HTTP/2.0", `GET /x HTTP/2.0\r\n${H}`, /malformed request line/],
    ["a method that is no token", `G(T /x HTTP/1.1\r\n${H}`, /malformed request line/],
    ["asterisk-form", `OPTIONS * HTTP/1.1\r\n${H}`, /unsupported request target "\*"/],
    ["an http:// target", `GET http://api.github.com/x HTTP/1.1\r\n${H}`, /unsupported request/],
    ["authority-form", `CONNECT api.github.com:443 HTTP/1.1\r\n${H}`, /unsupported request/],
    ["a fragment", `GET /allowed#/../secret HTTP/1.1\r\n${H}`, /unsupported request target/],
    [
      "Content-Length with Transfer-Encoding",
      `POST /x HTTP/1.1\r\n${H}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked`,
      /unsafe body framing: both Transfer-Encoding and Content-Length/,
    ],
    [
      "a Transfer-Encoding not ending in chunked",
      `POST /x HTTP/1.1\r\n${H}\r\nTransfer-Encoding: chunked, gzip`,
      /unsafe body framing: Transfer-Encoding chunked, gzip does not end in chunked/,
    ],
    [
      "two different Content-Length",
      `POST /x HTTP/1.1\r\n${H}\r\nContent-Length: 5\r\nContent-Length: 6`,
      /unsafe body framing: conflicting Content-Length values 5, 6/,
    ],
    [
      "a line without a colon",
      `GET /x HTTP/1.1\r\n${H}\r\nabc`,
      /unsafe body framing: a header line without a name/,
    ],
    [
      "a folded line",
      `GET /x HTTP/1.1\r\n${H}\r\nX-A: a\r\n folded`,
      /unsafe body framing: a header line without a name/,
    ],
    [
      "a folded line with a colon",
      `GET /x HTTP/1.1\r\n${H}\r\nX-A: a\r\n Transfer-Encoding: chunked`,
      /unsafe body framing: whitespace in the header name/,
    ],
    [
      "whitespace before the colon",
      `POST /x HTTP/1.1\r\n${H}\r\nContent-Length : 5`,
      /unsafe body framing: whitespace in the header name "Content-Length "/,
    ],
    [
      "a name that is no token",
      `GET /x HTTP/1.1\r\n${H}\r\nX(A): a`,
      /malformed field name "X\(A\)"/,
    ],
    [
      "a bare LF inside a value",
      `GET /x HTTP/1.1\r\n${H}\r\nX-A: a\nHost: evil`,
      /a control character in the X-A field/,
    ],
    [
      "a NUL inside a value",
      `GET /x HTTP/1.1\r\n${H}\r\nX-A: a\0b`,
      /control character in the X-A/,
    ],
    ["a bare CR inside a value", `GET /x HTTP/1.1\r\n${H}\r\nX-A: a\rb`, /control character/],
    ["no Host on 1.1", "GET /x HTTP/1.1\r\nAccept: */*", /^no Host field$/],
    ["two Host fields", `GET /x HTTP/1.1\r\n${H}\r\n${H}`, /^more than one Host field$/],
  ];
  for (const [name, head, why] of table) {
    const got = parseRequestHead(head);
    assert.equal(got.ok, false, name);
    assert.match((got as { why: string }).why, why, name);
  }
});
