import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import {
  decideUrl,
  hostMatches,
  normalisePath,
  parseUrlPattern,
  parseUrlPatterns,
} from "./url_pattern.ts";

Deno.test("normalisePath() resolves dots, decodes unreserved escapes and keeps %2F", () => {
  const cases: [string, string | null][] = [
    ["/", "/"],
    ["/a/b", "/a/b"],
    ["/a/./b", "/a/b"],
    ["/a/../b", "/b"],
    ["/allowed/../secret", "/secret"],
    ["/allowed/%2e%2e/secret", "/secret"],
    ["/allowed/%2E%2E/secret", "/secret"],
    ["/allowed/.%2e/secret", "/secret"],
    ["/allowed%2Fsecret", "/allowed%2Fsecret"],
    ["/allowed%2fsecret", "/allowed%2Fsecret"],
    ["/%61%62c", "/abc"],
    ["/a%20b", "/a%20b"],
    ["/a/b/", "/a/b/"],
    ["/a/b/.", "/a/b/"],
    ["/a/b/..", "/a/"],
    ["/a//b", "/a//b"],
    ["/..", null],
    ["/a/../..", null],
    ["/a%00b", null],
    ["/a%5cb", null],
    ["/a\\b", null],
    ["/a%zz", null],
    ["/a%2", null],
    ["/a\x01", null],
    ["a/b", null],
  ];
  for (const [raw, want] of cases) assert.equal(normalisePath(raw), want, raw);
});

Deno.test("parseUrlPattern() rejects bad patterns with a message that shows a good example", () => {
  const cases: [string, RegExp][] = [
    [
      "http://x.com/y",
      /^URL patterns must start with https:\/\/ \(got: http:\/\/x.com\/y\); use --allow-domains/,
    ],
    ["x.com/y", /must start with https:\/\//],
    ["https://github.com", /no path \(got: https:\/\/github.com\)/],
    ["https://github.com?x=1", /no path/],
    ["https://*", /too broad/],
    ["https://*/x", /too broad: its host is a bare wildcard/],
    ["https://*.*/x", /too broad/],
    ["https://*.com/x", /whole top-level domain/],
    ["https://com/x", /whole top-level domain/],
    ["https://a b.com/x", /whitespace, quotes or control/],
    ['https://a.com/x"', /whitespace, quotes or control/],
    ["https://a.com/x'", /whitespace, quotes or control/],
    ["https://a.com/\tx", /whitespace, quotes or control/],
    ["https://a.com/a/../b", /not in normal form/],
    ["https://a.com/a%00", /not in normal form/],
    ["https://a.com/**/x", /\*\* other than/],
    ["https://a.com/x**", /\*\* other than/],
    ["https://a.com:0/x", /port is invalid/],
    ["https://a.com:99999/x", /port is invalid/],
    ["https://user@a.com/x", /without user/],
    ["https://a*b.com/x", /host is invalid/],
    ["", /empty/],
  ];
  for (const [text, re] of cases) {
    assert.throws(() => parseUrlPattern(text), (err: unknown) => {
      assert.ok(err instanceof CliError, text);
      assert.equal(err.exitCode, 2, text);
      assert.match(err.message, re, text);
      assert.ok(!err.message.includes("\n"));
      assert.ok(/https:\/\//.test(err.message + (err.hint ?? "")), `${text} has an example`);
      return true;
    });
  }
});

Deno.test("parseUrlPattern() lower-cases the host, keeps the path case and reads the port", () => {
  const p = parseUrlPattern("https://GitHub.COM:8443/MyOrg/*?a=*");
  assert.equal(p.host, "github.com");
  assert.equal(p.port, 8443);
  assert.deepEqual(p.segments, ["MyOrg", "*"]);
  assert.equal(p.query, "a=*");
  assert.equal(parseUrlPattern("https://x.com/a").port, 443);
  assert.equal(parseUrlPattern("https://x.com/a").query, null);
});

Deno.test("hostMatches() matches exact hosts case-insensitively and *. on subdomains only", () => {
  const cases: [string, string, boolean][] = [
    ["github.com", "github.com", true],
    ["github.com", "GitHub.com", true],
    ["github.com", "api.github.com", false],
    ["*.github.com", "api.github.com", true],
    ["*.github.com", "a.b.github.com", true],
    ["*.github.com", "github.com", false],
    ["*.github.com", "evilgithub.com", false],
  ];
  for (const [p, h, want] of cases) assert.equal(hostMatches(p, h), want, `${p} ${h}`);
});

Deno.test("decideUrl() allows a request only when a pattern for its host matches", () => {
  const patterns = parseUrlPatterns([
    "https://x.com/allowed/*",
    "https://x.com/deep/**",
    "https://x.com/api/v*/items",
    "https://x.com/search?q=*",
    "https://x.com/Case",
    "https://x.com:8443/port/*",
    "https://*.y.com/pub/*",
  ]);
  const cases: [string, number, string, string, boolean][] = [
    ["x.com", 443, "/allowed/a", "", true],
    ["X.COM", 443, "/allowed/a", "", true],
    ["x.com", 443, "/allowed/", "", true],
    ["x.com", 443, "/allowed/a/b", "", false],
    ["x.com", 443, "/allowed", "", false],
    ["x.com", 443, "/secret", "", false],
    ["x.com", 443, "/allowed/../secret", "", false],
    ["x.com", 443, "/allowed/%2e%2e/secret", "", false],
    ["x.com", 443, "/allowed%2Fsecret", "", false],
    ["x.com", 443, "/allowed/%61", "", true],
    ["x.com", 443, "/allowed/a%2Fb", "", true],
    ["x.com", 443, "/allowed/a%00", "", false],
    ["x.com", 443, "/deep/a/b/c", "", true],
    ["x.com", 443, "/deep", "", true],
    ["x.com", 443, "/deeper/a", "", false],
    ["x.com", 443, "/api/v2/items", "", true],
    ["x.com", 443, "/api/v2/x/items", "", false],
    ["x.com", 443, "/allowed/a", "anything=1", true],
    ["x.com", 443, "/search", "q=forgekit", true],
    ["x.com", 443, "/search", "p=1", false],
    ["x.com", 443, "/Case", "", true],
    ["x.com", 443, "/case", "", false],
    ["x.com", 8443, "/port/a", "", true],
    ["x.com", 8443, "/allowed/a", "", false],
    ["x.com", 9443, "/anything", "", true],
    ["a.y.com", 443, "/pub/a", "", true],
    ["a.y.com", 443, "/priv/a", "", false],
    ["y.com", 443, "/priv/a", "", true],
    ["z.com", 443, "/anything", "", true],
  ];
  for (const [host, port, path, query, want] of cases) {
    const d = decideUrl(patterns, { host, port, path, query });
    assert.equal(d.allowed, want, `${host}:${port}${path}?${query} → ${d.rule}`);
  }
});

Deno.test("decideUrl() names the deciding pattern and the host's patterns", () => {
  const patterns = parseUrlPatterns(["https://x.com/a/*", "https://x.com/b/*", "https://z.com/c"]);
  const ok = decideUrl(patterns, { host: "x.com", port: 443, path: "/a/1", query: "" });
  assert.equal(ok.rule, "url-pattern:https://x.com/a/*");
  const no = decideUrl(patterns, { host: "x.com", port: 443, path: "/c", query: "" });
  assert.equal(no.rule, "url-policy:no-match");
  assert.deepEqual(no.hostPatterns.map((p) => p.source), [
    "https://x.com/a/*",
    "https://x.com/b/*",
  ]);
  const unsafe = decideUrl(patterns, { host: "x.com", port: 443, path: "/a/..%5c", query: "" });
  assert.equal(unsafe.rule, "url-policy:unsafe-path");
});
