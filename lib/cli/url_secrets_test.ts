import assert from "node:assert/strict";
import { isSecretParam, maskUrlSecrets } from "./url_secrets.ts";

Deno.test("maskUrlSecrets masks the credentials a URL carries and keeps the rest", () => {
  const cases: [string, string][] = [
    // nothing to mask: returned as is
    ["https://api.github.com/repos/o/r/pulls?per_page=100&page=2", ""],
    ["https://api.github.com/search/code?q=token+in:file", ""],
    ["https://github.com/o/r/blob/main/src/auth_token.ts", ""],
    // query parameters by name, any case, - or _
    [
      "https://api.github.com/user?access_token=abc123&page=2",
      "https://api.github.com/user?access_token=****&page=2",
    ],
    ["https://x.test/a?token=t1&TOKEN=t2", "https://x.test/a?token=****&TOKEN=****"],
    [
      "https://bucket.s3.amazonaws.com/f?X-Amz-Credential=AK%2F2026&X-Amz-Signature=ff00&X-Amz-Expires=300",
      "https://bucket.s3.amazonaws.com/f?X-Amz-Credential=****&X-Amz-Signature=****&X-Amz-Expires=300",
    ],
    [
      "https://acct.blob.core.windows.net/c/b?sv=2024-01-01&se=2026-11-25&sp=r&sig=abc%3D",
      "https://acct.blob.core.windows.net/c/b?sv=2024-01-01&se=2026-11-25&sp=r&sig=****",
    ],
    ["https://maps.test/api?key=AIzaXYZ&q=x", "https://maps.test/api?key=****&q=x"],
    ["https://x.test/cb?code=c0de&state=s", "https://x.test/cb?code=****&state=s"],
    [
      "https://x.test/t?client_secret=s&client_id=i",
      "https://x.test/t?client_secret=****&client_id=i",
    ],
    ["https://x.test/t?private-token=p", "https://x.test/t?private-token=****"],
    ["https://x.test/t?api%5Fkey=k", "https://x.test/t?api%5Fkey=****"],
    ["https://x.test/t?my+password=p", "https://x.test/t?my+password=****"],
    // an empty value, a name without a value, a malformed escape
    ["https://x.test/t?token=&token", ""],
    ["https://x.test/t?%E0token=v", "https://x.test/t?%E0token=****"],
    // the fragment ends the query's last value, and is read as a query too
    // (OAuth's implicit grant returns `#access_token=…`)
    ["https://x.test/t?sig=abc#sig=frag", "https://x.test/t?sig=****#sig=****"],
    ["https://x.test/cb#access_token=t&state=s", "https://x.test/cb#access_token=****&state=s"],
    ["https://x.test/blob/main/a.ts#L10-L20", ""],
    // `;` separates parameters for many servers, and a second `?` is no value of ours to show
    ["https://x.test/t?a=1;access_token=t;b=2", "https://x.test/t?a=1;access_token=****;b=2"],
    ["https://x.test/t?a=1?access_token=t", "https://x.test/t?a=1?access_token=****"],
    ["https://x.test/t?a=what?&b=c;", ""],
    [
      "https://x.test/t?JSESSIONID=s&PHPSESSID=p",
      "https://x.test/t?JSESSIONID=****&PHPSESSID=****",
    ],
    // tokens in a path, and JWTs
    [
      "https://x.test/hook/ghp_0123456789abcdefABCDEF0123/send",
      "https://x.test/hook/ghp_****/send",
    ],
    [
      "https://x.test/a/github_pat_11ABCDEFG0123456789_abcdefghij",
      "https://x.test/a/github_pat_****",
    ],
    [
      "https://x.test/a?state=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
      "https://x.test/a?state=eyJ****",
    ],
    // a token right after a percent escape or a `_`, where `\b` sees no word start
    [
      "https://x.test/a?h=Authorization%3A%20token%20ghp_0123456789abcdefABCDEF0123",
      "https://x.test/a?h=Authorization%3A%20token%20ghp_****",
    ],
    [
      "https://x.test/a?h=Bearer%20eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
      "https://x.test/a?h=Bearer%20eyJ****",
    ],
    ["https://x.test/a/x_ghp_0123456789abcdefABCDEF0123", "https://x.test/a/x_ghp_****"],
    ["https://x.test/a/sighp_0123456789abcdefABCDEF0123", ""],
    // path parameters
    [
      "https://shop.test/cart;jsessionid=ABC123/item;v=2?x=1",
      "https://shop.test/cart;jsessionid=****/item;v=2?x=1",
    ],
    ["https://x.test/a;b/c", ""],
    // user information
    ["https://x-access-token:ghp_abc@github.com/o/r.git", "https://****@github.com/o/r.git"],
    ["http://u:p@proxy.test:8080/?x=1", "http://****@proxy.test:8080/?x=1"],
    ["https://github.com/o/r/commits?author=a@b.test", ""],
  ];
  for (const [url, want] of cases) {
    assert.equal(maskUrlSecrets(url), want === "" ? url : want, url);
  }
});

Deno.test("isSecretParam decides by the parameter's name", () => {
  const cases: [string, boolean][] = [
    ["access_token", true],
    ["refresh-token", true],
    ["X-Goog-Signature", true],
    ["X-Amz-Security-Token", true],
    ["apikey", true],
    ["sig", true],
    ["Session", true],
    ["per_page", false],
    ["q", false],
    ["state", false],
    ["signed", false],
    ["keyword", false],
  ];
  for (const [name, want] of cases) assert.equal(isSecretParam(name), want, name);
});

Deno.test("maskUrlSecrets takes linear time on a long URL (it runs once per logged request)", () => {
  // Each `eyJ` in one long run of JWT characters was tried again to the
  // run's end: 64 KiB took about a second, on the event loop, per request.
  const urls = [
    `https://x.test/?q=${"eyJ-".repeat(16 * 1024)}`,
    `https://x.test/?q=${"%20eyJaaaaaaaaa.".repeat(4 * 1024)}`,
    `https://x.test/?${"a=1;".repeat(16 * 1024)}`,
  ];
  for (const url of urls) {
    const started = performance.now();
    maskUrlSecrets(url);
    const ms = performance.now() - started;
    assert.ok(ms < 100, `${url.slice(0, 30)}…: ${ms.toFixed(0)} ms`);
  }
});
