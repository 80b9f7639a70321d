import assert from "node:assert/strict";
import { bodiless, checkResponseFields } from "./h2_response.ts";

type Fields = [string, string][];

const ok = (...extra: Fields): Fields => [[":status", "200"], ...extra];

Deno.test("checkResponseFields() accepts a response head and refuses malformed ones (RFC 9113 §8)", () => {
  const cases: [Fields, RegExp | null][] = [
    [ok(["content-type", "text/plain"]), null],
    [[[":status", "404"], ["content-length", "3"], ["content-length", "3"]], null],
    [[[":status", "103"], ["link", "</a>"]], null],
    [[["server", "x"], [":status", "200"]], /pseudo-field :status after a regular field/],
    [[[":status", "200"], [":status", "200"]], /repeated :status/],
    [[[":status", "200"], [":path", "/"]], /unknown pseudo-field ":path"/],
    [[["server", "x"]], /missing or invalid :status/],
    [[[":status", "20"]], /missing or invalid :status/],
    [[[":status", "600"]], /missing or invalid :status/],
    [[[":status", "101"]], /:status 101/],
    [ok(["X-Upper", "1"]), /invalid field name "X-Upper"/],
    [ok(["bad name", "1"]), /invalid field name/],
    [ok(["x-a", "a\nb"]), /invalid value in field x-a/],
    [ok(["x-a", " padded"]), /invalid value in field x-a/],
    [ok(["connection", "close"]), /connection-specific field connection/],
    [ok(["transfer-encoding", "chunked"]), /connection-specific field transfer-encoding/],
    [ok(["keep-alive", "5"]), /connection-specific field keep-alive/],
    [ok(["upgrade", "h2c"]), /connection-specific field upgrade/],
    [ok(["te", "trailers"]), /connection-specific field te/],
    [ok(["content-length", "1e3"]), /invalid content-length/],
    [ok(["content-length", "3"], ["content-length", "4"]), /invalid content-length "4"/],
  ];
  for (const [fields, why] of cases) {
    const got = checkResponseFields(fields);
    if (why === null) assert.ok(got.ok, `${JSON.stringify(fields)}: ${JSON.stringify(got)}`);
    else {
      assert.ok(!got.ok, JSON.stringify(fields));
      assert.match(got.why, why, JSON.stringify(fields));
    }
  }
  assert.deepEqual(checkResponseFields(ok(["content-length", "3"])), {
    ok: true,
    status: 200,
    headers: [["content-length", "3"]],
    length: 3,
  });
});

Deno.test("bodiless() is true for HEAD, 204 and 304 only", () => {
  const cases: [string, number, boolean][] = [
    ["HEAD", 200, true],
    ["GET", 204, true],
    ["POST", 304, true],
    ["GET", 200, false],
    ["GET", 404, false],
  ];
  for (const [method, status, want] of cases) assert.equal(bodiless(method, status), want);
});
