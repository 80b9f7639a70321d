import assert from "node:assert/strict";
import { ApiError } from "./api_error.ts";
import { strField, unstorableText } from "./http.ts";

Deno.test("unstorableText() refuses NUL and unpaired surrogates, which SQLite cannot give back", () => {
  const cases: [string, string | null][] = [
    ["main", null],
    ["", null],
    ["日本 café 🎉", null],
    ["\u202e\u0007 control characters other than NUL", null],
    ["a\u0000b", "must not contain NUL characters (\\u0000)"],
    ["\u0000", "must not contain NUL characters (\\u0000)"],
    ["\ud800", "must be valid Unicode (it has an unpaired surrogate)"],
    ["x\udc00y", "must be valid Unicode (it has an unpaired surrogate)"],
    ["\ud83c", "must be valid Unicode (it has an unpaired surrogate)"],
  ];
  for (const [value, want] of cases) {
    assert.equal(unstorableText(value), want, JSON.stringify(value));
  }
});

Deno.test("strField() answers 422 naming the field for a wrong type or unstorable text", () => {
  const cases: [unknown, string | undefined | null][] = [
    ["ok", "ok"],
    [undefined, undefined],
    [null, undefined],
    [42, "title must be a string"],
    ["a\u0000b", "title must not contain NUL characters (\\u0000)"],
    ["\ud800", "title must be valid Unicode (it has an unpaired surrogate)"],
  ];
  for (const [value, want] of cases) {
    let got: string | undefined | null;
    try {
      got = strField({ title: value }, "title", "PullRequest");
    } catch (err) {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 422);
      assert.equal(err.errors?.[0].field, "title");
      got = err.errors?.[0].message;
    }
    assert.equal(got, want, JSON.stringify(value));
  }
});
