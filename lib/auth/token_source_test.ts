import assert from "node:assert/strict";
import type { AuthEntry } from "./config.ts";
import { staticToken } from "./token_source.ts";

const entry = (over: Partial<AuthEntry>): AuthEntry => ({
  index: 0,
  hosts: ["api.github.com"],
  provider: "codehost",
  auth: "bearer",
  ...over,
});

Deno.test("staticToken() trims a token as it is sent and skips one no header can carry, without quoting it", () => {
  const S = "SECRETSECRET";
  const cases: [Partial<AuthEntry>, string | null, string | null][] = [
    [{ token: `ghp_${S}` }, null, `ghp_${S}`],
    [{ token: `ghp_${S}\n` }, null, `ghp_${S}`],
    [{ token: `\tghp_${S}\r\n` }, null, `ghp_${S}`],
    [{ token: `\nghp_${S}` }, null, null],
    [{ token: `ghp_${S}\nnext` }, null, null],
    [{ token: `ghp_${S}\r\nnext` }, null, null],
    [{ token: `ghp_${S}\0` }, null, null],
    [{ token: `\u201cghp_${S}\u201d` }, null, null],
    [{ token_env: "TOKEN_SOURCE_TEST" }, `ghp_${S}\nnext`, null],
    [{ token_env: "TOKEN_SOURCE_TEST" }, ` ghp_${S} `, `ghp_${S}`],
    [{ token_env: "TOKEN_SOURCE_TEST" }, `ghp_${S}\n`, `ghp_${S}`],
  ];
  for (const [over, env, want] of cases) {
    if (env === null) Deno.env.delete("TOKEN_SOURCE_TEST");
    else Deno.env.set("TOKEN_SOURCE_TEST", env);
    try {
      const got = staticToken(entry(over));
      const label = JSON.stringify(over);
      assert.equal(got.token, want, label);
      const shown = got.token === null ? got.reason : got.source;
      assert.ok(!shown.includes(S), `${label}: ${shown}`);
      if (want === null) assert.match(shown, /holds a line break or another character/, label);
      if (want !== null) assert.match(shown, /\*\*\*\*$/, label);
    } finally {
      Deno.env.delete("TOKEN_SOURCE_TEST");
    }
  }
});

Deno.test("staticToken() says a variable holding only white space is no token", () => {
  Deno.env.set("TOKEN_SOURCE_TEST", " \n");
  try {
    assert.deepEqual(staticToken(entry({ token_env: "TOKEN_SOURCE_TEST" })), {
      token: null,
      reason: "$TOKEN_SOURCE_TEST holds only white space",
    });
  } finally {
    Deno.env.delete("TOKEN_SOURCE_TEST");
  }
});
