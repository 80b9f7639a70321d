/**
 * A conformance audit of `--ssl-bump` against its spec and the issue's
 * acceptance list, for the rules no other test would catch breaking, and an
 * adversarial workload: smuggling, pipelining, other hosts named in the
 * request, tunnels and upgrades inside the bumped connection, odd host
 * spellings and very long paths. Raw TLS clients write exact bytes through
 * the firewall's own proxy with a bump session (`support/bump.ts`).
 */
import assert from "node:assert/strict";
import { type BumpFixture, curl, startBumpFixture, startBumpFront } from "./support/bump.ts";
import { startOrigins } from "./support/origin.ts";
import { hasH2Python, header, request, runH2, stream } from "./support/h2_client.ts";
import { runForgekit } from "./support/cli.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { createSessionCa } from "../lib/bump/ca.ts";
import { expectedAuthority } from "../lib/bump/intercept.ts";
import { RawH1 as Raw, type RawResponse } from "./support/raw_h1.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const ALLOW = ["https://api.github.com/allowed/*"];

/** Runs `fn` with a fixture allowing {@linkcode ALLOW}, closed after. */
async function withFixture(
  fn: (f: BumpFixture) => Promise<void>,
  allowUrls: string[] = ALLOW,
): Promise<void> {
  const f = await startBumpFixture(allowUrls);
  try {
    await fn(f);
  } finally {
    await f.close();
  }
}

/**
 * Writes `bytes` on a fresh bumped connection and reads the first response;
 * with `close`, also whether the server then closed the connection.
 */
async function exchangeOnce(
  f: BumpFixture,
  bytes: string,
  { close = false } = {},
): Promise<RawResponse & { closed: boolean }> {
  const c = await Raw.open(f);
  try {
    await c.write(bytes);
    const r = await c.response();
    return { ...r, closed: close && await c.closedByServer() };
  } finally {
    c.close();
  }
}

const get = (path: string, host = "api.github.com", extra = "") =>
  `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;

/** Waits until the access log has `n` lines (they are written when each exchange is over). */
async function logged(f: BumpFixture, n: number): Promise<void> {
  const until = Date.now() + 3000;
  while (f.logs.length < n && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
}

// --- HTTP/1.1 evasions on a bumped connection ---------------------------------

Deno.test("a disallowed request smuggled inside an allowed one's body never reaches the origin as a request", async () => {
  await withFixture(async (f) => {
    const smuggled = get("/secret");
    const c = await Raw.open(f);
    try {
      await c.write(
        `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: ${smuggled.length}\r\n\r\n` +
          smuggled + get("/secret2"),
      );
      assert.equal((await c.response()).status, 200);
      const second = await c.response();
      assert.equal(second.status, 403);
      assert.equal(second.headers.get("x-proxy-error"), "blocked-by-url-policy");
      assert.deepEqual(f.origins.hits.map((h) => [h.path, h.body]), [["/allowed/x", smuggled]]);
    } finally {
      c.close();
    }
  });
});

Deno.test("smuggling shapes (CL+TE, two lengths, obs-fold, bare CR) get 400 and a close; nothing behind them is forwarded", async () => {
  const behind = get("/secret");
  const cases: [string, string][] = [
    [
      "CL.TE",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${behind}`,
    ],
    [
      "TE.CL",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\n${behind}\r\n0\r\n\r\n`,
    ],
    [
      "TE obfuscated",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n${behind}`,
    ],
    [
      "two Content-Length",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 0\r\nContent-Length: ${behind.length}\r\n\r\n${behind}`,
    ],
    [
      "Content-Length list",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 0, ${behind.length}\r\n\r\n${behind}`,
    ],
    [
      "obs-fold",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nX-A: a\r\n Content-Length: ${behind.length}\r\n\r\n${behind}`,
    ],
    [
      "obs-fold of Transfer-Encoding",
      `POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${behind}`,
    ],
    ["bare CR", `GET /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nX-A: a\rHost: evil\r\n\r\n`],
    ["space before colon", `GET /allowed/x HTTP/1.1\r\nHost : other.github.com\r\n\r\n`],
  ];
  await withFixture(async (f) => {
    for (const [name, bytes] of cases) {
      const r = await exchangeOnce(f, bytes, { close: true });
      assert.equal(r.status, 400, name);
      assert.ok(r.closed, `${name}: closed`);
    }
    assert.deepEqual(f.originPaths(), []);
  });
});

Deno.test("an absolute-form target naming another host is never forwarded, whatever the Host says", async () => {
  await withFixture(async (f) => {
    // [request, status, X-Proxy-Error of a 403]
    const shapes: [string, number, string | null][] = [
      [get("https://other.github.com/allowed/x", "other.github.com"), 403, "host-mismatch"],
      [get("https://other.github.com/allowed/x"), 400, null],
      [get("https://api.github.com@other.github.com/allowed/x"), 400, null],
      ["GET https://other.github.com/allowed/x HTTP/1.0\r\n\r\n", 403, "host-mismatch"],
      [get("https://API.GITHUB.COM:8443/allowed/x", "api.github.com:8443"), 403, "host-mismatch"],
      [get("http://api.github.com/allowed/x"), 400, null],
      // Origin-form: a path on the CONNECT host, not an authority.
      [get("//other.github.com/allowed/x"), 403, "url-policy"],
    ];
    for (const [bytes, status, why] of shapes) {
      const r = await exchangeOnce(f, bytes);
      assert.equal(r.status, status, bytes);
      if (why) assert.equal(r.headers.get("x-proxy-error"), `blocked-by-${why}`, bytes);
    }
    assert.deepEqual(f.origins.hits.map((h) => h.host + h.path), []);
  });
});

Deno.test("CONNECT and h2c upgrades inside a bumped HTTP/1.1 connection open no tunnel", async () => {
  await withFixture(async (f) => {
    const connect = await exchangeOnce(
      f,
      "CONNECT other.github.com:443 HTTP/1.1\r\nHost: other.github.com:443\r\n\r\n",
      { close: true },
    );
    assert.equal(connect.status, 400);
    assert.ok(connect.closed);
    // h2c to a disallowed path: blocked like any request.
    const h2c =
      "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n";
    const blocked = await exchangeOnce(f, get("/secret", "api.github.com", h2c));
    assert.equal(blocked.status, 403);
    // h2c to an allowed path: an ordinary HTTP/1.1 exchange, the upgrade fields dropped.
    const c = await Raw.open(f);
    try {
      await c.write(get("/allowed/h2c", "api.github.com", h2c) + get("/secret"));
      const ok = await c.response();
      assert.equal(ok.status, 200);
      assert.equal(ok.text, "origin /allowed/h2c\n");
      assert.equal((await c.response()).status, 403, "the next request is still HTTP/1.1, judged");
    } finally {
      c.close();
    }
    const hit = f.origins.hits.find((h) => h.path === "/allowed/h2c")!;
    assert.equal(hit.headers.get("upgrade"), null);
    assert.equal(hit.headers.get("http2-settings"), null);
    assert.deepEqual(f.originPaths(), ["/allowed/h2c"]);
  });
});

Deno.test("percent-encoded, trailing-dot, IPv6 and upper-case Host spellings do not escape the patterns", async () => {
  await withFixture(async (f) => {
    for (
      const host of ["api%2egithub.com", "api.github.com%00", "[::1]", "api.github.com:443:443"]
    ) {
      const r = await exchangeOnce(f, get("/secret", host));
      assert.ok([400, 403].includes(r.status), `${host}: ${r.status}`);
    }
    const dot = await exchangeOnce(f, get("/secret", "api.github.com."));
    assert.ok([400, 403].includes(dot.status), `trailing dot: ${dot.status}`);
    const upper = await exchangeOnce(f, get("/secret", "API.GitHub.COM"));
    assert.equal(upper.status, 403);
    assert.equal(upper.headers.get("x-proxy-error"), "blocked-by-url-policy");
    assert.deepEqual(f.originPaths(), []);
  });
});

Deno.test("a CONNECT host in upper case or with a trailing dot is still held to its patterns", async () => {
  await withFixture(async (f) => {
    for (const target of ["API.GITHUB.COM:443", "api.github.com.:443"]) {
      const c = await Raw.open(f, { target });
      try {
        await c.write(get("/allowed/x") + get("/secret"));
        assert.equal((await c.response()).status, 200, target);
        const no = await c.response();
        assert.equal(no.status, 403, target);
        assert.equal(no.headers.get("x-proxy-error"), "blocked-by-url-policy", target);
      } finally {
        c.close();
      }
    }
    assert.deepEqual(f.originPaths(), ["/allowed/x", "/allowed/x"]);
  });
});

Deno.test("very long paths are judged (and refused) without reaching the origin", async () => {
  await withFixture(async (f) => {
    const long = await exchangeOnce(f, get(`/allowed/${"a/".repeat(20_000)}x`));
    assert.equal(long.status, 403);
    const dots = await exchangeOnce(f, get(`/allowed/${"../".repeat(10_000)}secret`));
    assert.equal(dots.status, 403);
    assert.deepEqual(f.originPaths(), []);
  });
});

Deno.test("a head over 64 KiB gets 431, also when it arrives in one write", async () => {
  await withFixture(async (f) => {
    const cases: [string, string][] = [
      ["a 70 KB path", get(`/allowed/${"a".repeat(70_000)}`)],
      ["a 66 KB path", get(`/allowed/${"a".repeat(66_000)}`)],
      [
        "88 KB of fields",
        get("/allowed/x", "api.github.com", "X-A: aaaaaaaaaaaaaaaa\r\n".repeat(4000)),
      ],
    ];
    const got = [];
    for (const [name, bytes] of cases) {
      const r = await exchangeOnce(f, bytes);
      got.push(`${name}: ${r.status}${r.headers.get("date") ? " (the origin's answer)" : ""}`);
    }
    assert.deepEqual(got, cases.map(([name]) => `${name}: 431`));
    assert.deepEqual(f.origins.hits.length, 0);
  });
});

Deno.test("unsafe paths (backslash, encoded backslash, NUL escape, above the root) are blocked as url-policy:unsafe-path", async () => {
  await withFixture(async (f) => {
    const paths = [
      "/allowed/..%5Csecret",
      "/allowed/%00",
      "/allowed/%zz",
      "/../allowed/x",
      "/allowed/%0a",
    ];
    for (const path of paths) {
      const r = await exchangeOnce(f, get(path));
      assert.equal(r.status, 403, path);
      assert.equal(r.headers.get("x-proxy-error"), "blocked-by-url-policy", path);
      assert.match(r.text, /cannot be normalised safely/, path);
    }
    await logged(f, paths.length);
    assert.deepEqual(f.logs.map((e) => e.rule), paths.map(() => "url-policy:unsafe-path"));
    assert.deepEqual(f.originPaths(), []);
  });
});

Deno.test("the origin gets the normalised path that was judged, with the query as sent", async () => {
  await withFixture(async (f) => {
    const r = await exchangeOnce(f, get("/allowed/./x/..//../%61b%7e?q=%2F..&x"));
    assert.equal(r.status, 200);
    assert.deepEqual(f.originPaths(), ["/allowed/ab~?q=%2F..&x"]);
  });
});

// --- the block answer and the log -----------------------------------------------

Deno.test("a block names the URL and only the patterns of that host", async () => {
  await withFixture(async (f) => {
    const r = await exchangeOnce(f, get("/secret?q=1"));
    assert.equal(r.status, 403);
    assert.equal(r.headers.get("x-proxy-error"), "blocked-by-url-policy");
    assert.match(r.text, /https:\/\/api\.github\.com\/secret\?q=1/);
    assert.match(r.text, /https:\/\/api\.github\.com\/allowed\/\*/);
    assert.match(r.text, /https:\/\/\*\.github\.com\/pub\/\*\*/);
    assert.doesNotMatch(r.text, /other\.github\.com\/only/);
    await logged(f, 1);
    const e = f.logs[0];
    assert.equal(e.url, "https://api.github.com/secret?q=1");
    assert.equal(e.status, 403);
    assert.equal(e.decision, "blocked");
    assert.equal(e.rule, "url-policy:no-match");
  }, [...ALLOW, "https://*.github.com/pub/**", "https://other.github.com/only/*"]);
});

Deno.test("a request the bumped HTTP/1.1 server refuses as malformed is logged (400)", async () => {
  await withFixture(async (f) => {
    const r = await exchangeOnce(
      f,
      "POST /secret HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert.equal(r.status, 400);
    await logged(f, 1);
    assert.equal(f.logs.length, 1, "a smuggling attempt leaves a line in the access log");
    assert.equal(f.logs[0].status, 400);
    assert.equal(f.logs[0].decision, "blocked");
  });
});

// --- HTTP/2 evasions --------------------------------------------------------------

const noH2 = !hasH2Python();
const hs = (id: number, headers: [string, string][]) => ({
  op: "headers",
  stream: id,
  headers,
  end: true,
});

Deno.test({
  name: "h2 :authority and host that disagree, or name another host, never reach the origin",
  ignore: noH2,
  fn: () =>
    withFixture(async (f) => {
      const withAuthority = (authority: string, path: string, extra: [string, string][] = []) =>
        request(path).map(([k, v]): [string, string] =>
          k === ":authority" ? [k, authority] : [k, v]
        )
          .concat(extra);
      const r = await runH2(f, {
        steps: [
          hs(1, withAuthority("api.github.com", "/allowed/a", [["host", "other.github.com"]])),
          hs(3, withAuthority("other.github.com", "/allowed/b", [["host", "api.github.com"]])),
          hs(5, withAuthority("other.github.com", "/allowed/c")),
          hs(7, withAuthority("api.github.com.", "/secret")),
          hs(9, withAuthority("api%2egithub.com", "/secret")),
          hs(11, request("/allowed/%2e%2e/secret")),
          hs(13, request("/secret#/../allowed/x")),
          hs(15, request("/allowed/ok")),
          { op: "wait", streams: [1, 3, 5, 7, 9, 11, 13, 15] },
        ],
      });
      assert.equal(stream(r, 1).status, 400);
      assert.equal(stream(r, 3).status, 400);
      assert.equal(stream(r, 5).status, 403);
      assert.equal(header(stream(r, 5), "x-proxy-error"), "blocked-by-host-mismatch");
      assert.ok([400, 403].includes(stream(r, 7).status!));
      assert.equal(stream(r, 9).status, 400);
      assert.equal(stream(r, 11).status, 403);
      assert.equal(header(stream(r, 11), "x-proxy-error"), "blocked-by-url-policy");
      // Judged on the normalised path, and that is what is forwarded.
      assert.equal(stream(r, 15).status, 200);
      const reached = f.origins.hits.map((h) => h.host + h.path);
      assert.ok(reached.includes("api.github.com/allowed/ok"), reached.join());
      assert.ok(
        reached.every((p) => ["api.github.com/allowed/ok", "api.github.com/allowed/x"].includes(p)),
        reached.join(),
      );
    }),
});

Deno.test({
  name:
    "an h2 stream refused as malformed (host differs from :authority) is logged with status 400",
  ignore: noH2,
  fn: () =>
    withFixture(async (f) => {
      const r = await runH2(f, {
        steps: [
          hs(1, [...request("/secret"), ["host", "other.github.com"]]),
          { op: "wait", streams: [1] },
        ],
      });
      assert.equal(stream(r, 1).status, 400);
      await logged(f, 1);
      assert.deepEqual(
        f.logs.map((e) => [e.status, e.reason?.startsWith("bad request")]),
        [[400, true]],
        "README: the log line has status 400 and a reason starting `bad request`",
      );
    }),
});

// --- CONNECT-level spellings --------------------------------------------------------

Deno.test("IPv6-literal and percent-encoded CONNECT targets are refused before any TLS", async () => {
  await withFixture(async (f) => {
    for (const [target, want] of [["[::1]:443", 403], ["api%2egithub.com:443", 400]] as const) {
      const tcp = await Deno.connect({
        hostname: "127.0.0.1",
        port: Number(new URL(f.proxyUrl).port),
      });
      try {
        await tcp.write(enc.encode(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
        const buf = new Uint8Array(4096);
        const n = await tcp.read(buf);
        assert.match(
          dec.decode(buf.subarray(0, n ?? 0)),
          new RegExp(`^HTTP/1\\.1 ${want} `),
          target,
        );
      } finally {
        tcp.close();
      }
    }
  });
});

Deno.test("the authority expected of an IPv6-literal CONNECT host is the bracketed form", () => {
  // A client sends `Host: [2001:db8::1]` (RFC 9110 §7.2 / RFC 3986 IP-literal).
  assert.ok(expectedAuthority("2001:db8::1", 443).includes("[2001:db8::1]"));
  assert.ok(expectedAuthority("2001:db8::1", 443).includes("[2001:db8::1]:443"));
  assert.ok(!expectedAuthority("2001:db8::1", 443).includes("2001:db8::1:443"));
});

// --- the CA, the leaves and upstream trust --------------------------------------------

Deno.test("each run makes its own CA: two sessions share no CA key, CA certificate or leaf key", async () => {
  const a = await createSessionCa({ sessionId: "a", allowDomains: ["github.com"] });
  const b = await createSessionCa({ sessionId: "b", allowDomains: ["github.com"] });
  assert.notEqual(a.keyPem, b.keyPem);
  assert.notEqual(a.certPem, b.certPem);
  const leafA = await a.issueLeaf("github.com");
  const leafB = await b.issueLeaf("github.com");
  assert.notEqual(leafA.key, leafB.key, "the leaf key is per run too");
});

async function servedLeaf(f: BumpFixture, host: string): Promise<string> {
  const out = await new Deno.Command("sh", {
    args: [
      "-c",
      `openssl s_client -proxy ${
        new URL(f.proxyUrl).host
      } -connect ${host}:443 -servername ${host} ` +
      `</dev/null 2>/dev/null | openssl x509 -noout -serial -dates -ext subjectAltName`,
    ],
    stdout: "piped",
  }).output();
  return dec.decode(out.stdout);
}

Deno.test("leaves are cached per host: a second connection gets the same leaf, another host its own", async () => {
  await withFixture(async (f) => {
    const first = await servedLeaf(f, "api.github.com");
    const again = await servedLeaf(f, "api.github.com");
    const other = await servedLeaf(f, "other.github.com");
    assert.match(first, /serial=[0-9A-F]{30,}/);
    assert.match(first, /DNS:api\.github\.com/);
    assert.equal(again, first);
    assert.match(other, /DNS:other\.github\.com/);
    assert.notEqual(other.match(/serial=\S+/)![0], first.match(/serial=\S+/)![0]);
  }, []);
});

Deno.test("an origin whose certificate no trusted root vouches for gets 502 upstream-error, logged", async () => {
  const origins = await startOrigins(["api.github.com"], () => new Response("never\n"));
  // Neither --upstream-ca nor DENO_CERT: the test CA is not trusted upstream.
  const front = await startBumpFront({
    allowUrls: [],
    upstreamCaCerts: [],
    upstreamProxy: origins.proxy.url,
  });
  try {
    const r = await curl(front, [
      "-w",
      "\\n%{http_code} %header{x-proxy-error}",
      "https://api.github.com/x",
    ]);
    assert.match(r.out, /\n502 upstream-error$/);
    // The body says what to do about it.
    assert.match(
      r.out,
      /^Upstream error for https:\/\/api\.github\.com\/x: .*certificate.* \(forgekit did not trust the server's certificate: for a private or corporate CA, pass --upstream-ca FILE \(PEM\)\)\n/,
    );
    assert.deepEqual(origins.hits, []);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(front.logs[0]?.status, 502);
    assert.match(front.logs[0]?.reason ?? "", /^upstream error: /);
  } finally {
    await front.close();
    await origins.close();
  }
});

// --- the command line -----------------------------------------------------------------

Deno.test("bad --allow-urls patterns and --no-bump-domains misuse stop the run with exit 2 and one line", async () => {
  const base = ["firewall", "--allow-domains", "x.example,y.example", "--ssl-bump"];
  const cases: [string[], RegExp][] = [
    [
      ["--allow-urls", "https://*"],
      /^error: URL pattern is too broad: its host is a bare wildcard/,
    ],
    [["--allow-urls", "https://*/x"], /^error: URL pattern is too broad/],
    [["--allow-urls", "https://*.*/x"], /^error: URL pattern is too broad/],
    [["--allow-urls", "https://*.com/x"], /^error: URL pattern is too broad: .*whole top-level/],
    [["--allow-urls", "https://x.example"], /^error: URL pattern has no path/],
    [["--allow-urls", "https://x.example/a b"], /^error: URL pattern contains whitespace/],
    [["--allow-urls", 'https://x.example/"a"'], /^error: URL pattern contains whitespace, quotes/],
    [["--allow-urls", "https://x.example/a\x07"], /^error: URL pattern contains .*control/],
    [
      ["--allow-urls", "https://x.example/a#b"],
      /^error: URL pattern must be .* without user, fragment/,
    ],
    [["--allow-urls", "https://x.example:8443/a"], /never connects to/],
    [["--no-bump-domains", "z.example"], /^error: --no-bump-domains: z\.example is not an allowed/],
    // A spliced host's URLs are never seen: its patterns would be silently open.
    [
      ["--allow-urls", "https://api.x.example/a/*", "--no-bump-domains", "x.example"],
      /^error: --allow-urls https:\/\/api\.x\.example\/a\/\* names a host that --no-bump-domains x\.example splices/,
    ],
  ];
  for (const [args, want] of cases) {
    const r = await runForgekit([...base, ...args, "--", "true"], { timeoutMs: 20_000 });
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, want, args.join(" "));
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
  const noBump = await runForgekit([
    "firewall",
    "--allow-domains",
    "x.example",
    "--no-bump-domains",
    "x.example",
    "--",
    "true",
  ]);
  assert.equal(noBump.code, 2);
  assert.match(noBump.stderr, /^error: --no-bump-domains needs --ssl-bump/);
});

Deno.test(
  "inside the sandbox every CA variable names the system bundle, which holds the session CA; the key directory is empty",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const bundle = "/etc/ssl/certs/ca-certificates.crt";
    const hostBundle = await Deno.readTextFile(bundle);
    const vars = [
      "SSL_CERT_FILE",
      "NODE_EXTRA_CA_CERTS",
      "REQUESTS_CA_BUNDLE",
      "CURL_CA_BUNDLE",
      "GIT_SSL_CAINFO",
      "DENO_CERT",
    ];
    const script = [
      ...vars.map((v) => `echo "env ${v}=$(printenv ${v})"`),
      `ca=$(sed -n 2p /usr/local/share/ca-certificates/forgekit-session.crt)`,
      `echo "in-bundle $(grep -cF "$ca" ${bundle})"`,
      `echo "bundle-size $(wc -c < ${bundle})"`,
      `for d in /tmp/fw-2*/; do [ -d "$d/ssl" ] && echo "ssl $(ls -A $d/ssl | wc -l)"; done`,
      `echo "ca-line $ca"`,
    ].join("; ");
    const logDir = await Deno.makeTempDir({ prefix: "forgekit-audit-logs-" });
    try {
      const r = await runForgekit([
        "firewall",
        "--log-dir",
        logDir,
        "--allow-domains",
        "api.example",
        "--ssl-bump",
        "--",
        "sh",
        "-c",
        script,
      ], { timeoutMs: 60_000 });
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stdout.trim().split("\n");
      for (const v of vars) assert.ok(lines.includes(`env ${v}=${bundle}`), `${v}: ${r.stdout}`);
      assert.ok(lines.includes("in-bundle 1"), r.stdout);
      const size = Number(lines.find((l) => l.startsWith("bundle-size "))!.split(" ")[1]);
      assert.ok(size > hostBundle.length, "the system roots followed by the session CA");
      assert.ok(lines.some((l) => l === "ssl 0"), `the key directory is hidden: ${r.stdout}`);
      const caLine = lines.find((l) => l.startsWith("ca-line "))!.slice("ca-line ".length);
      assert.ok(caLine.length > 20);
      assert.ok(!hostBundle.includes(caLine), "the host's trust store never gets the CA");
      assert.equal(await Deno.readTextFile(bundle), hostBundle);
    } finally {
      await Deno.remove(logDir, { recursive: true });
    }
  },
);

Deno.test("plain HTTP to a host the patterns name is blocked by the URL policy (no https:// pattern can match it)", async () => {
  await withFixture(async (f) => {
    const r = await curl(f, [
      "-D",
      "-",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "http://api.github.com/secret",
    ]);
    assert.match(r.out, /x-proxy-error: blocked-by-url-policy/i);
    assert.ok(r.out.endsWith("403"), r.out);
    assert.deepEqual(f.originPaths(), []);
    const path = `${f.sessionDir}/access.log`;
    let lines: { url: string; rule: string; status: number }[] = [];
    for (let i = 0; i < 100 && lines.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      const text = await Deno.readTextFile(path).catch(() => "");
      lines = text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
    }
    assert.deepEqual(
      lines.map((l) => [l.url, l.rule, l.status]),
      [["http://api.github.com/secret", "url-policy:no-match", 403]],
    );
  });
});
