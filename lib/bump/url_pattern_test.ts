import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import {
  decideUrl,
  hostMatches,
  normalisePath,
  parseUrlPattern,
  parseUrlPatterns,
  splicedPattern,
  urlBlockMessage,
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
      /^URL patterns must start with https:\/\/ \(got: http:\/\/x.com\/y\); use --allow-domains for domain-level filtering$/,
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
    // Fail closed: a host named by patterns is held to them on every port.
    ["x.com", 9443, "/anything", "", false],
    ["x.com", 80, "/allowed/a", "", false],
    ["a.y.com", 443, "/pub/a", "", true],
    ["a.y.com", 443, "/priv/a", "", false],
    ["y.com", 443, "/priv/a", "", true],
    ["z.com", 443, "/anything", "", true],
  ];
  for (const [host, port, path, query, want] of cases) {
    const d = decideUrl(patterns, { host, port, path, query });
    assert.equal(d.allowed, want, `${host}:${port}${path}?${query} → ${d.rule}`);
  }
  // Plain HTTP matches no https:// pattern: blocked on a named host, free on others.
  const http: [string, number, string, boolean][] = [
    ["x.com", 80, "/allowed/a", false],
    ["a.y.com", 80, "/pub/a", false],
    ["z.com", 80, "/anything", true],
  ];
  for (const [host, port, path, want] of http) {
    const d = decideUrl(patterns, { scheme: "http", host, port, path, query: "" });
    assert.equal(d.allowed, want, `http://${host}:${port}${path} → ${d.rule}`);
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

Deno.test("normalisePath() decodes every unreserved escape and refuses every unsafe one", () => {
  const cases: [string, string | null][] = [
    ["/%7E%7e%2D%5F%2E%41%7A%30", "/~~-_.Az0"],
    ["/a/%2E/b", "/a/b"],
    ["/a/%2E", "/a/"],
    ["/a/%2e%2E", "/"],
    ["/a/.%2E/..", null],
    ["/%3a%40%21", "/%3A%40%21"],
    ["/%C3%A9", "/%C3%A9"],
    ["/%252e%252e/x", "/%252e%252e/x"],
    ["/a%5Cb", null],
    ["/a%7Fb", null],
    ["/a%7fb", null],
    ["/a%0Ab", null],
    ["/a%0db", null],
    ["/a%09b", null],
    ["/a%1Fb", null],
    ["/a\x7fb", null],
    ["/a b", null],
    ["/a%", null],
    ["/a%g0", null],
  ];
  for (const [raw, want] of cases) assert.equal(normalisePath(raw), want, raw);
});

Deno.test("parseUrlPattern() rejects IPv6 literals, fragments, ** hosts and more control characters", () => {
  const cases: [string, RegExp][] = [
    ["https://[::1]/x", /without user, fragment or IPv6 literal/],
    ["https://a.com/x#frag", /without user, fragment/],
    ["https://**/x", /too broad/],
    ["https://**.com/x", /too broad|host is invalid/],
    ["https://*.*.com/x", /too broad/],
    ["https://a.com/x\n", /whitespace, quotes or control/],
    ["https://a.com/x\r", /whitespace, quotes or control/],
    ["https://a.com/x\x00", /whitespace, quotes or control/],
    ["https://a.com/x\x7f", /whitespace, quotes or control/],
    ["https://a.com/x`", /whitespace, quotes or control/],
    ["https://a.com/x\u00a0", /whitespace, quotes or control/],
    ["ftp://a.com/x", /must start with https:\/\//],
    ["https:/a.com/x", /must start with https:\/\//],
    ["https://a.com:/x", /port is invalid/],
    ["https://a.com:443x/x", /port is invalid|host is invalid/],
  ];
  for (const [text, re] of cases) {
    assert.throws(() => parseUrlPattern(text), (err: unknown) => {
      assert.ok(err instanceof CliError, JSON.stringify(text));
      assert.equal(err.exitCode, 2, JSON.stringify(text));
      assert.match(err.message, re, JSON.stringify(text));
      return true;
    });
  }
});

Deno.test("decideUrl() follows the README's pattern table and the ** and query rules", () => {
  const patterns = parseUrlPatterns([
    "https://github.com/myorg/*",
    "https://github.com/myorg/**",
    "https://api.github.com/repos/*/releases",
    "https://*.example.com/v1/**",
    "https://q.example/search?q=*",
  ]);
  const cases: [string, string, string, boolean][] = [
    ["github.com", "/myorg/tool", "", true],
    ["github.com", "/myorg/tool/info/refs", "service=git-upload-pack", true],
    ["github.com", "/myorgx/tool", "", false],
    ["github.com", "/other/x", "", false],
    ["github.com", "/myorg/", "", true],
    ["github.com", "/myorg%2Ftool", "", false],
    ["github.com", "/MyOrg/tool", "", false],
    ["api.github.com", "/repos/x/releases", "", true],
    ["api.github.com", "/repos/x/y/releases", "", false],
    ["api.github.com", "/repos/x%2Fy/releases", "", true], // %2F stays inside the segment
    ["a.example.com", "/v1/x", "", true],
    ["A.Example.COM", "/v1/x", "", true],
    ["a.example.com.", "/v1/x", "", true],
    ["a.example.com.", "/v2/x", "", false], // a trailing dot does not leave the patterns behind
    ["example.com", "/v1/x", "", true], // named by no pattern: the apex stays at domain level
    ["q.example", "/search", "q=a", true],
    ["q.example", "/search", "", false],
    ["q.example", "/search", "x=1&q=a", false],
    ["q.example", "/Search", "q=a", false],
  ];
  for (const [host, path, query, want] of cases) {
    const d = decideUrl(patterns, { host, port: 443, path, query });
    assert.equal(d.allowed, want, `${host}${path}?${query} → ${d.rule}`);
  }
});

Deno.test("hostMatches() ignores one trailing dot but not two, nor a bare suffix", () => {
  const cases: [string, string, boolean][] = [
    ["github.com", "github.com.", true],
    ["github.com", "github.com..", false],
    ["*.github.com", "api.github.com.", true],
    ["*.github.com", "xgithub.com", false],
  ];
  for (const [p, h, want] of cases) assert.equal(hostMatches(p, h), want, `${p} ${h}`);
});

Deno.test("decideUrl() takes linear time: a long path cannot stall the proxy on a pattern with several *", () => {
  // The proxy decides on its only thread: a request head may hold a 64 KiB path.
  const patterns = parseUrlPatterns([
    "https://x.com/dl/v*-*.tar.gz",
    "https://x.com/s?q=*&*=*&x=*",
  ]);
  const requests = [
    { host: "x.com", port: 443, path: "/dl/v" + "-".repeat(60_000), query: "" },
    { host: "x.com", port: 443, path: "/s", query: "q=" + "&".repeat(60_000) },
  ];
  for (const req of requests) {
    const started = performance.now();
    assert.equal(decideUrl(patterns, req).allowed, false);
    const ms = performance.now() - started;
    assert.ok(ms < 250, `${req.path.slice(0, 8)}…?${req.query.slice(0, 4)}…: ${Math.round(ms)} ms`);
  }
});

Deno.test("splicedPattern() finds a pattern whose host --no-bump-domains would splice", () => {
  const cases: [string, string, boolean][] = [
    ["https://github.com/a/*", "github.com", true],
    ["https://api.github.com/a/*", "github.com", true],
    ["https://github.com/a/*", "*.github.com", false],
    ["https://api.github.com/a/*", "*.github.com", true],
    ["https://*.github.com/a/*", "github.com", true],
    ["https://*.github.com/a/*", "api.github.com", true],
    ["https://*.github.com/a/*", "*.api.github.com", true],
    ["https://*.api.github.com/a/*", "github.com", true],
    ["https://github.com/a/*", "api.github.com", false],
    ["https://github.com/a/*", "gitlab.com", false],
    ["https://*.github.com/a/*", "notgithub.com", false],
  ];
  for (const [pattern, entry, want] of cases) {
    const got = splicedPattern(parseUrlPatterns([pattern]), [entry]);
    assert.equal(got !== null, want, `${pattern} / ${entry}`);
  }
});

Deno.test("a pattern without https:// is refused with the pattern that was meant", () => {
  const refusal = (text: string) => {
    try {
      parseUrlPattern(text);
    } catch (err) {
      assert.ok(err instanceof CliError);
      assert.equal(err.exitCode, 2);
      return [err.message, err.hint];
    }
    assert.fail(`${text} was accepted`);
  };
  assert.deepEqual(refusal("github.com/myorg/**"), [
    "URL patterns must start with https:// (got: github.com/myorg/**); use --allow-domains for domain-level filtering",
    "or write https://github.com/myorg/**",
  ]);
  assert.deepEqual(refusal("*.example.com/v1/**"), [
    "URL patterns must start with https:// (got: *.example.com/v1/**); use --allow-domains for domain-level filtering",
    "or write https://*.example.com/v1/**",
  ]);
  assert.deepEqual(refusal("http://x.com/y"), [
    "URL patterns must start with https:// (got: http://x.com/y); use --allow-domains for domain-level filtering",
    "or write https://x.com/y: patterns match HTTPS requests only, and plain http:// to a host " +
    "they name is blocked",
  ]);
  // Nothing to repair: a good example instead.
  assert.deepEqual(refusal("https:/a.com/x"), [
    "URL patterns must start with https:// (got: https:/a.com/x); use --allow-domains for domain-level filtering",
    "or write https://github.com/myorg/*",
  ]);
});

Deno.test("urlBlockMessage() says how the path was read, and that plain HTTP matches no pattern", () => {
  const patterns = parseUrlPatterns(["https://x.com/a/**"]);
  const message = (url: string) => {
    const u = new URL(url);
    const d = decideUrl(patterns, {
      scheme: u.protocol === "http:" ? "http" : "https",
      host: "x.com",
      port: u.protocol === "http:" ? 80 : 443,
      path: /^[a-z]+:\/\/[^/]*([^?]*)/.exec(url)![1],
      query: "",
    });
    assert.equal(d.allowed, false, url);
    return urlBlockMessage(url, "x.com", d);
  };
  assert.equal(
    message("https://x.com/a/../b"),
    "Blocked by forgekit: https://x.com/a/../b matches no --allow-urls pattern for x.com " +
      "(its path reads as /b); patterns for this host: https://x.com/a/**\n",
  );
  assert.equal(
    message("https://x.com/b"),
    "Blocked by forgekit: https://x.com/b matches no --allow-urls pattern for x.com; " +
      "patterns for this host: https://x.com/a/**\n",
  );
  assert.equal(
    message("http://x.com/a/1"),
    "Blocked by forgekit: http://x.com/a/1 matches no --allow-urls pattern for x.com " +
      "(patterns match https:// only: plain HTTP to this host is blocked); " +
      "patterns for this host: https://x.com/a/**\n",
  );
  assert.match(message("https://x.com/a/%5c"), /\(the path cannot be normalised safely\)/);
});
