import assert from "node:assert/strict";
import { checkRequestFields, checkTrailerFields, fieldProblem } from "./h2_request.ts";

const BASE: [string, string][] = [
  [":method", "GET"],
  [":scheme", "https"],
  [":authority", "api.github.com"],
  [":path", "/repos/a/b?x=1"],
];

Deno.test("checkRequestFields() accepts a well-formed request and joins its cookies", () => {
  const r = checkRequestFields([
    ...BASE,
    ["accept", "*/*"],
    ["cookie", "a=1"],
    ["te", "trailers"],
    ["cookie", "b=2"],
    ["content-length", "0"],
  ]);
  assert.deepEqual(r, {
    ok: true,
    method: "GET",
    authority: "api.github.com",
    path: "/repos/a/b?x=1",
    headers: [["accept", "*/*"], ["te", "trailers"], ["content-length", "0"], [
      "cookie",
      "a=1; b=2",
    ]],
    length: 0,
    connect: false,
  });
});

Deno.test("checkRequestFields() takes Host when there is no :authority", () => {
  const r = checkRequestFields([...BASE.filter(([k]) => k !== ":authority"), [
    "host",
    "x.example",
  ]]);
  assert.ok(r.ok);
  assert.equal(r.authority, "x.example");
});

Deno.test("checkRequestFields() marks CONNECT, which needs no :scheme or :path", () => {
  const r = checkRequestFields([[":method", "CONNECT"], [":authority", "db.internal:5432"]]);
  assert.ok(r.ok && r.connect);
});

Deno.test("checkRequestFields() refuses malformed requests, naming why", () => {
  const without = (name: string) => BASE.filter(([k]) => k !== name);
  const cases: [string, [string, string][], RegExp][] = [
    ["no :method", without(":method"), /missing or invalid :method/],
    ["no :path", without(":path"), /missing or invalid :path/],
    ["an empty :path", [...without(":path"), [":path", ""]], /:path/],
    ["a relative :path", [...without(":path"), [":path", "a/b"]], /:path/],
    ["* for GET", [...without(":path"), [":path", "*"]], /:path/],
    ["no :scheme", without(":scheme"), /:scheme must be https/],
    ["http scheme", [...without(":scheme"), [":scheme", "http"]], /:scheme must be https/],
    ["no authority at all", without(":authority"), /:authority/],
    ["a bad authority", [...without(":authority"), [":authority", "a b"]], /:authority/],
    ["authority with userinfo", [...without(":authority"), [":authority", "u@x"]], /:authority/],
    ["a repeated pseudo-field", [...BASE, [":path", "/x"]], /repeated pseudo-field :path/],
    ["an unknown pseudo-field", [...BASE, [":protocol", "websocket"]], /unknown pseudo-field/],
    ["a pseudo-field late", [BASE[0], ["accept", "*/*"], ...BASE.slice(1)], /after a regular/],
    ["an upper-case name", [...BASE, ["Accept", "*/*"]], /invalid field name "Accept"/],
    ["a space in a name", [...BASE, ["a b", "1"]], /invalid field name/],
    ["a CR in a value", [...BASE, ["x", "a\rb"]], /invalid value in field x/],
    ["a NUL in a value", [...BASE, ["x", "a\0b"]], /invalid value/],
    ["a leading space", [...BASE, ["x", " a"]], /invalid value/],
    ["a trailing tab", [...BASE, ["x", "a\t"]], /invalid value/],
    ["connection", [...BASE, ["connection", "keep-alive"]], /connection-specific field connection/],
    ["keep-alive", [...BASE, ["keep-alive", "5"]], /connection-specific/],
    ["transfer-encoding", [...BASE, ["transfer-encoding", "chunked"]], /connection-specific/],
    ["upgrade", [...BASE, ["upgrade", "h2c"]], /connection-specific/],
    ["proxy-connection", [...BASE, ["proxy-connection", "x"]], /connection-specific/],
    ["te other than trailers", [...BASE, ["te", "gzip"]], /te other than/],
    ["host differs", [...BASE, ["host", "evil.example"]], /host field differs/],
    ["two hosts", [...without(":authority"), ["host", "a"], ["host", "b"]], /repeated host/],
    ["a non-numeric length", [...BASE, ["content-length", "1e3"]], /invalid content-length/],
    [
      "lengths differ",
      [...BASE, ["content-length", "1"], ["content-length", "2"]],
      /content-length/,
    ],
  ];
  for (const [name, fields, why] of cases) {
    const r = checkRequestFields(fields);
    assert.equal(r.ok, false, name);
    assert.match((r as { why: string }).why, why, name);
  }
});

Deno.test("checkRequestFields() accepts Host equal to :authority in another case", () => {
  assert.ok(checkRequestFields([...BASE, ["host", "API.github.com"]]).ok);
});

Deno.test("checkTrailerFields() refuses pseudo-fields and malformed or connection-specific fields", () => {
  const cases: [[string, string][], RegExp | null][] = [
    [[["grpc-status", "0"], ["grpc-message", "ok"]], null],
    [[], null],
    [[[":status", "200"]], /pseudo-field ":status"/],
    [[["Grpc-Status", "0"]], /invalid field name/],
    [[["x", "a\rb"]], /invalid value/],
    [[["te", "trailers"]], /connection-specific field te/],
    [[["connection", "close"]], /connection-specific/],
  ];
  for (const [fields, why] of cases) {
    const got = checkTrailerFields(fields);
    if (why === null) assert.deepEqual(got, { ok: true, fields }, JSON.stringify(fields));
    else {
      assert.ok(!got.ok, JSON.stringify(fields));
      assert.match(got.why, why, JSON.stringify(fields));
    }
  }
});

Deno.test("fieldProblem() names what makes a field malformed in HTTP/2, te included", () => {
  const cases: [string, string, string | null][] = [
    ["grpc-status", "0", null],
    ["x-bin", "AQID", null],
    [":path", "/", 'pseudo-field ":path" where none may be'],
    ["Grpc-Status", "0", 'invalid field name "Grpc-Status"'],
    ["x-a", "trailing ", "invalid value in field x-a"],
    ["x-a", "a\x00b", "invalid value in field x-a"],
    ["keep-alive", "5", "connection-specific field keep-alive"],
    ["te", "trailers", "connection-specific field te"],
  ];
  for (const [name, value, why] of cases) assert.equal(fieldProblem(name, value), why, name);
});
