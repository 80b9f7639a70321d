/**
 * `forgekit firewall --ssl-bump` end to end: the real command, real clients
 * inside the sandbox (curl over HTTP/1.1 and HTTP/2, git, python3 urllib,
 * Deno fetch), HTTPS origins on loopback reached under real names through a
 * test upstream proxy (the firewall's own HTTPS_PROXY), origin certificates
 * from a test CA given with --upstream-ca.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit, spawnForgekit } from "./support/cli.ts";
import { gitCgi, makeBareRepo } from "./support/git_server.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";

const repo = await makeBareRepo();
const o = await startOrigins([
  "api.example",
  "pinned.example",
  "git.example",
  // An address (TEST-NET-2), reached only through the test proxy's route to loopback.
  "198.51.100.7",
], (req, hit) => {
  if (hit.host === "git.example") return gitCgi(req, repo.root);
  if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onmessage = (e) => socket.send(`echo:${e.data}`);
    return response;
  }
  if (hit.path === "/allowed/echo") {
    return req.arrayBuffer().then((b) =>
      Response.json({ access_token: "SEKRIT5", got_bytes: b.byteLength }, {
        headers: { "set-cookie": "sid=SEKRIT6; Path=/" },
      })
    );
  }
  if (hit.path === "/allowed/big") return new Response("a".repeat(200 * 1024));
  return new Response(`hello ${hit.host} ${hit.path}\n`);
});
const logDir = await Deno.makeTempDir({ prefix: "forgekit-bumplogs-" });
const HOST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/** The origin leaf's public-key pin, as curl --pinnedpubkey wants it. */
async function originPin(): Promise<string> {
  const out = await new Deno.Command("sh", {
    args: [
      "-c",
      `openssl s_client -connect api.example:443 -proxy 127.0.0.1:${o.proxy.port} ` +
      `-servername api.example </dev/null 2>/dev/null | openssl x509 -pubkey -noout | ` +
      `openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64`,
    ],
    stdout: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout).trim();
}

function firewall(args: string[], command: string[]) {
  return runForgekit(
    [
      "firewall",
      "--log-dir",
      logDir,
      "--allow-domains",
      "api.example,pinned.example,git.example",
      "--ssl-bump",
      "--upstream-ca",
      o.ca.certPath,
      ...args,
      "--",
      ...command,
    ],
    {
      // No DENO_CERT: only --upstream-ca makes the origins trusted upstream.
      env: { HTTPS_PROXY: o.proxy.url, HTTP_PROXY: o.proxy.url, PATH: Deno.env.get("PATH")! },
      timeoutMs: 90_000,
    },
  );
}

const sh = (script: string) => ["sh", "-c", script];

/** `forgekit firewall --no-sandbox --ssl-bump ARGS -- sh -c SCRIPT`, through the test proxy. */
function unsandboxed(args: string[], script: string) {
  return runForgekit(
    ["firewall", "--log-dir", logDir, "--no-sandbox", "--ssl-bump", ...args, "--", ...sh(script)],
    { env: { HTTPS_PROXY: o.proxy.url, PATH: Deno.env.get("PATH")! }, timeoutMs: 60_000 },
  );
}
// Inside the sandbox curl trusts the bind-mounted bundle (CURL_CA_BUNDLE).
const curl = "curl -sS -m 10";
const code = "-o /dev/null -w '%{http_code} %header{x-proxy-error}'";

function readLog(): Record<string, unknown>[] {
  return Deno.readTextFileSync(join(logDir, "access.log")).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
}

function sessionDirs(): string[] {
  return [...Deno.readDirSync("/tmp")].filter((e) => /^fw-\d{8}-\d{6}-/.test(e.name)).map((e) =>
    e.name
  );
}

Deno.test(
  "real clients inside the sandbox pass on allowed URLs and get 403 blocked-by-url-policy elsewhere",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const trustBefore = await Deno.readFile(HOST_BUNDLE);
    const before = sessionDirs();
    const r = await firewall(
      ["--allow-urls", "https://api.example/allowed/*,https://git.example/repo.git/**"],
      sh([
        `echo "h1-ok $(${curl} --http1.1 https://api.example/allowed/x)"`,
        `echo "h1-no $(${curl} --http1.1 ${code} https://api.example/secret)"`,
        `echo "h2-ok $(${curl} --http2 -o /dev/null -w '%{http_code} %{http_version}' https://api.example/allowed/y)"`,
        `echo "h2-no $(${curl} --http2 ${code} https://api.example/secret)"`,
        `echo "py-ok $(python3 -c 'import urllib.request as u; print(u.urlopen("https://api.example/allowed/py").read().decode().strip())')"`,
        `echo "py-no $(python3 -c 'import urllib.request as u, urllib.error as e
try: u.urlopen("https://api.example/secret")
except e.HTTPError as x: print(x.code, x.headers["x-proxy-error"])')"`,
        `echo "deno-ok $(${Deno.execPath()} eval 'console.log((await (await fetch("https://api.example/allowed/deno")).text()).trim())')"`,
        `echo "deno-no $(${Deno.execPath()} eval 'const r = await fetch("https://api.example/secret"); await r.body?.cancel(); console.log(r.status, r.headers.get("x-proxy-error"))')"`,
        `git clone -q https://git.example/repo.git /tmp/clone-$$ && echo "git-ok $(ls /tmp/clone-$$)"; rm -rf /tmp/clone-$$`,
        `for d in /tmp/fw-2*; do echo "dir $d $(cat $d/ssl/ca-key.pem 2>/dev/null | head -c 27)"; done`,
        `echo "ca-in-store $(grep -c 'BEGIN CERTIFICATE' /usr/local/share/ca-certificates/forgekit-session.crt)"`,
        // Credentials in URLs are masked wherever forgekit prints or logs them.
        `echo "tok-ok $(${curl} -o /dev/null -w '%{http_code}' 'https://api.example/allowed/t?access_token=SEKRIT1&page=2')"`,
        `echo "tok-no $(${curl} ${code} 'https://api.example/secret?sig=SEKRIT2')"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = Object.fromEntries(
      r.stdout.trim().split("\n").map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
    );
    assert.equal(lines["h1-ok"], "hello api.example /allowed/x");
    assert.equal(lines["h1-no"], "403 blocked-by-url-policy");
    assert.equal(lines["h2-ok"], "200 2");
    assert.equal(lines["h2-no"], "403 blocked-by-url-policy");
    assert.equal(lines["py-ok"], "hello api.example /allowed/py");
    assert.equal(lines["py-no"], "403 blocked-by-url-policy");
    assert.equal(lines["deno-ok"], "hello api.example /allowed/deno");
    assert.equal(lines["deno-no"], "403 blocked-by-url-policy");
    assert.match(lines["git-ok"] ?? "", /README/, r.stdout);
    const mine = r.stdout.split("\n").filter((l) =>
      l.startsWith("dir ") && !before.includes(l.split(" ")[1].slice("/tmp/".length))
    );
    assert.equal(mine.length, 1, `the run's own session directory is visible inside: ${r.stdout}`);
    assert.equal(mine[0].split(" ")[2], "", "the CA key is unreadable inside the sandbox");
    assert.equal(lines["ca-in-store"], "1");
    assert.ok(!o.hits.some((h) => h.path === "/secret"), "no blocked request reached the origin");
    assert.deepEqual(await Deno.readFile(HOST_BUNDLE), trustBefore, "host trust store unchanged");
    const log = readLog();
    const allowed = log.find((e) => e.url === "https://api.example/allowed/x");
    assert.equal(allowed?.decision, "allowed");
    assert.equal(allowed?.status, 200);
    assert.equal(allowed?.pattern, "https://api.example/allowed/*");
    const blocked = log.find((e) => e.url === "https://api.example/secret");
    assert.equal(blocked?.decision, "blocked");
    assert.equal(blocked?.status, 403);
    assert.match(r.stderr, /api\.example[\s\S]*https:\/\/api\.example\/secret/);
    assert.equal(lines["tok-ok"], "200");
    assert.equal(lines["tok-no"], "403 blocked-by-url-policy");
    const logText = Deno.readTextFileSync(join(logDir, "access.log"));
    for (const text of [logText, r.stderr]) {
      assert.ok(!/SEKRIT/.test(text), `no credential from a URL is printed or logged: ${text}`);
    }
    assert.ok(log.some((e) => e.url === "https://api.example/allowed/t?access_token=****&page=2"));
    assert.match(r.stderr, /https:\/\/api\.example\/secret\?sig=\*\*\*\*/, "the summary");
  },
);

Deno.test(
  "--log-bodies logs each allowed exchange's headers and first body bytes, credentials masked",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const bodies = join(logDir, "bodies.jsonl");
    await Deno.remove(bodies).catch(() => {});
    const post = `-H 'Authorization: Bearer SEKRIT3' -H 'Content-Type: application/json'` +
      ` --data '{"user":"u","password":"SEKRIT4","note":"hi"}'`;
    const r = await firewall(
      ["--log-bodies", "--allow-urls", "https://api.example/allowed/**"],
      sh([
        `echo "post $(${curl} --http1.1 ${post} https://api.example/allowed/echo)"`,
        `echo "big $(${curl} --http2 -o /dev/null -w '%{http_code} %{size_download}' https://api.example/allowed/big)"`,
        `echo "no $(${curl} ${code} --data 'x=SEKRIT7' https://api.example/secret)"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /^post \{"access_token":"SEKRIT5","got_bytes":45\}$/m,
      "passed on as sent",
    );
    assert.match(r.stdout, /^big 200 204800$/m);
    assert.match(r.stdout, /^no 403 blocked-by-url-policy$/m);
    assert.match(r.stderr, new RegExp(`bodies log ${bodies.replaceAll("/", "\\/")}`));
    assert.equal((await Deno.stat(bodies)).mode! & 0o777, 0o600);
    const text = await Deno.readTextFile(bodies);
    assert.doesNotMatch(text, /SEKRIT/, "no credential is logged");
    const records = text.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(records.map((x) => [x.method, x.url, x.status]), [
      ["POST", "https://api.example/allowed/echo", 200],
      ["GET", "https://api.example/allowed/big", 200],
    ], "allowed exchanges only");
    const [echo, big] = records;
    assert.ok(
      echo.request.headers.some(([k, v]: string[]) => k === "authorization" && v === "Bearer ****"),
    );
    assert.equal(echo.request.body, '{"user":"u","password":"****","note":"hi"}');
    assert.deepEqual([echo.request.body_bytes, echo.request.body_encoding], [45, "utf-8"]);
    assert.equal(echo.response.body, '{"access_token":"****","got_bytes":45}');
    assert.ok(
      echo.response.headers.some(([k, v]: string[]) =>
        k === "set-cookie" && v === "sid=****; Path=/"
      ),
    );
    assert.deepEqual(
      [big.response.body_bytes, big.response.body_truncated, big.response.body.length],
      [204800, true, 64 * 1024],
    );
    const noBump = await runForgekit([
      "firewall",
      "--allow-domains",
      "api.example",
      "--log-bodies",
      "--",
      "true",
    ]);
    assert.equal(noBump.code, 2);
    assert.match(noBump.stderr, /--log-bodies needs --ssl-bump/);
  },
);

Deno.test(
  "evasions through the firewall are blocked: kept-alive second request, h2 stream, dot segments, %2F, Host header",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-urls", "https://api.example/allowed/*"],
      sh([
        `echo "keepalive $(${curl} --http1.1 -o /dev/null -o /dev/null -w '%{http_code}%{num_connects},' https://api.example/allowed/a https://api.example/secret)"`,
        `echo "h2multi $(${curl} --http2 --parallel -o /dev/null -o /dev/null -w '%{http_code},' https://api.example/allowed/a https://api.example/secret | tr ',' '\\n' | sort | tr '\\n' ',')"`,
        `echo "dots $(${curl} --path-as-is ${code} https://api.example/allowed/../secret)"`,
        `echo "encdots $(${curl} --path-as-is ${code} https://api.example/allowed/%2e%2e/secret)"`,
        `echo "slash $(${curl} ${code} https://api.example/allowed%2Fsecret)"`,
        `echo "host $(${curl} ${code} -H 'Host: pinned.example' https://api.example/allowed/a)"`,
        `echo "absolute $(${curl} --http1.1 ${code} --request-target https://pinned.example/allowed/a https://api.example/allowed/a)"`,
        `echo "abspath $(${curl} --http1.1 ${code} --request-target https://api.example/secret https://api.example/allowed/a)"`,
        `echo "h2host $(${curl} --http2 ${code} -H 'Host: pinned.example' https://api.example/allowed/a)"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = Object.fromEntries(
      r.stdout.trim().split("\n").map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
    );
    // Two responses over one connection: 200 (1 connect) then 403 (0 new connects).
    assert.equal(lines["keepalive"], "2001,4030,");
    assert.equal(lines["h2multi"], "200,403,");
    assert.equal(lines["dots"], "403 blocked-by-url-policy");
    assert.equal(lines["encdots"], "403 blocked-by-url-policy");
    assert.equal(lines["slash"], "403 blocked-by-url-policy");
    assert.equal(lines["host"], "403 blocked-by-host-mismatch");
    assert.match(lines["absolute"], /^(403 blocked-by-host-mismatch|400 )$/, r.stdout);
    assert.match(lines["abspath"], /^(403 blocked-by-url-policy|400 )$/, r.stdout);
    assert.match(lines["h2host"], /^(403 blocked-by-host-mismatch|400 )$/, r.stdout);
    assert.ok(
      !o.hits.some((h) => /secret/.test(h.path) || h.host === "pinned.example"),
      JSON.stringify(o.hits.map((h) => h.host + h.path)),
    );
  },
);

const WS_CLIENT = `
const ws = new WebSocket(Deno.args[0]);
const out = await new Promise((resolve) => {
  ws.onopen = () => ws.send("ping");
  ws.onmessage = (e) => { resolve(String(e.data)); ws.close(); };
  ws.onerror = () => resolve("refused");
});
console.log(out);
`;

Deno.test(
  "inside the sandbox an allowed wss:// URL relays frames and a disallowed handshake is refused",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-urls", "https://api.example/ws/*"],
      sh([
        `cat > /tmp/ws-$$.ts <<'EOF'\n${WS_CLIENT}\nEOF`,
        `echo "ok $(${Deno.execPath()} run -A /tmp/ws-$$.ts wss://api.example/ws/chat)"`,
        `echo "no $(${Deno.execPath()} run -A /tmp/ws-$$.ts wss://api.example/other)"`,
        `rm -f /tmp/ws-$$.ts`,
      ].join("\n")),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = Object.fromEntries(
      r.stdout.trim().split("\n").map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
    );
    assert.equal(lines["ok"], "echo:ping");
    assert.equal(lines["no"], "refused");
    assert.ok(!o.hits.some((h) => h.path === "/other"));
  },
);

Deno.test(
  "a pinning client fails on bumped hosts and works on --no-bump-domains hosts",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const pin = await originPin();
    assert.match(pin, /^[A-Za-z0-9+/]{43}=$/);
    const r = await firewall(
      ["--no-bump-domains", "pinned.example"],
      sh([
        // pinned.example is spliced: the origin's own certificate, trusted via the test CA.
        `echo "bumped $(${curl} --pinnedpubkey sha256//${pin} -o /dev/null -w '%{http_code}' https://api.example/x 2>/dev/null; echo " $?")"`,
        `echo "spliced $(${curl} --cacert ${o.ca.certPath} --pinnedpubkey sha256//${pin} https://pinned.example/x)"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = Object.fromEntries(
      r.stdout.trim().split("\n").map((l) => [l.split(" ")[0], l.slice(l.indexOf(" ") + 1)]),
    );
    assert.equal(lines["bumped"], "000 90", "curl exit 90: public key does not match the pin");
    assert.equal(lines["spliced"], "hello pinned.example /x");
  },
);

for (const [signal, exitCode] of [["SIGTERM", 143], ["SIGINT", 130]] as const) {
  Deno.test(
    `while a run is active the host trust store lacks the session CA and the key is 0600; ${signal} removes the key`,
    needsNamespaces,
    async () => {
      assertNamespaces();
      // The host's curl, with the host's trust store, talking to a bumped URL
      // only works through the sandbox; here we check the session CA never
      // reaches the host bundle while a run is active.
      const before = sessionDirs();
      const child = spawnForgekit(
        [
          "firewall",
          "--log-dir",
          logDir,
          "--allow-domains",
          "api.example",
          "--ssl-bump",
          "--upstream-ca",
          o.ca.certPath,
          "--",
          "sh",
          "-c",
          "echo ready; exec sleep 30",
        ],
        {
          env: { HTTPS_PROXY: o.proxy.url, PATH: Deno.env.get("PATH")! },
        },
      );
      try {
        const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
        let seen = "";
        while (!seen.includes("ready")) {
          const { value, done } = await reader.read();
          if (done) break;
          seen += value;
        }
        const dirs = sessionDirs().filter((d) => !before.includes(d));
        const caPems = dirs.flatMap((d) => {
          try {
            return [Deno.readTextFileSync(`/tmp/${d}/ssl/ca.pem`)];
          } catch {
            return [];
          }
        });
        assert.ok(caPems.length >= 1, "the session CA exists while the run is active");
        const hostBundle = await Deno.readTextFile(HOST_BUNDLE);
        for (const pem of caPems) assert.ok(!hostBundle.includes(pem.trim().split("\n")[1]));
        const keyPaths = dirs.map((d) => `/tmp/${d}/ssl/ca-key.pem`).filter((p) => {
          try {
            return (Deno.statSync(p).mode! & 0o777) === 0o600;
          } catch {
            return false;
          }
        });
        assert.ok(keyPaths.length >= 1, "the key file is 0600 while the run is active");
        child.kill(signal);
        await reader.cancel();
        const status = await child.status;
        assert.equal(status.code, exitCode);
        for (const p of keyPaths) {
          assert.throws(() => Deno.statSync(p), Deno.errors.NotFound, `${p} gone after ${signal}`);
        }
      } finally {
        try {
          child.kill("SIGKILL");
        } catch {
          // already exited
        }
        await child.stderr.cancel().catch(() => {});
      }
    },
  );
}

Deno.test("the CA key is gone after a normal run", needsNamespaces, async () => {
  assertNamespaces();
  const before = sessionDirs();
  const r = await firewall([], sh("ls -d /tmp/fw-2*"));
  assert.equal(r.code, 0, r.stderr);
  const mine = r.stdout.trim().split("\n").map((p) => p.slice("/tmp/".length))
    .filter((d) => !before.includes(d));
  assert.ok(mine.length >= 1, "the run's session directory was visible inside");
  for (const d of mine) {
    assert.throws(() => Deno.statSync(`/tmp/${d}/ssl/ca-key.pem`), Deno.errors.NotFound);
  }
});

Deno.test("--allow-urls is checked before anything runs", async () => {
  const bad = await runForgekit([
    "firewall",
    "--allow-domains",
    "api.example",
    "--ssl-bump",
    "--allow-urls",
    "http://api.example/x",
    "--",
    "true",
  ]);
  assert.equal(bad.code, 2);
  assert.match(
    bad.stderr,
    /^error: URL patterns must start with https:\/\/ \(got: http:\/\/api\.example\/x\); use --allow-domains for domain-level filtering \(or write https:\/\/api\.example\/x: patterns match HTTPS requests only, and plain http:\/\/ to a host they name is blocked\)$/m,
  );
  assert.equal(bad.stderr.trim().split("\n").length, 1);
  const noBump = await runForgekit([
    "firewall",
    "--allow-domains",
    "api.example",
    "--allow-urls",
    "https://api.example/x",
    "--",
    "true",
  ]);
  assert.equal(noBump.code, 2);
  assert.match(noBump.stderr, /^error: --allow-urls needs --ssl-bump/);
});

Deno.test("options that could never take effect are refused before anything runs", async () => {
  const cases: [string[], string][] = [
    [
      ["--allow-domains", "api.example", "--ssl-bump", "--allow-urls", "api.example/allowed/**"],
      "error: URL patterns must start with https:// (got: api.example/allowed/**); " +
      "use --allow-domains for domain-level filtering (or write https://api.example/allowed/**)",
    ],
    [
      ["--allow-domains", "api.example", "--ssl-bump", "--allow-urls", "https://git.example/r/**"],
      "error: --allow-urls https://git.example/r/** names git.example, but --allow-domains does " +
      "not allow it, so it could never match (add git.example to --allow-domains, or drop the pattern)",
    ],
    [
      [
        "--allow-domains",
        "api.example,git.example",
        "--block-domains",
        "git.example",
        "--ssl-bump",
        "--allow-urls",
        "https://git.example/r/**",
      ],
      "error: --allow-urls https://git.example/r/** names git.example, but --block-domains " +
      "git.example blocks it, so it could never match (drop git.example from --block-domains, or drop the pattern)",
    ],
    [
      ["--allow-domains", "api.example", "--upstream-ca", o.ca.certPath],
      "error: --upstream-ca needs --ssl-bump: without it forgekit opens no TLS connection of its " +
      "own (COMMAND verifies servers itself) (add --ssl-bump, or drop --upstream-ca)",
    ],
    [
      ["--allow-domains", "api.example", "--ssl-bump", "--upstream-ca", "/nonexistent/ca.pem"],
      "error: Cannot read --upstream-ca /nonexistent/ca.pem: no such file or directory (check the path)",
    ],
  ];
  for (const [args, want] of cases) {
    const r = await runForgekit(["firewall", ...args, "--", "true"]);
    assert.equal(r.code, 2, args.join(" "));
    assert.equal(r.stderr, `${want}\n`);
  }
  const env = { PATH: Deno.env.get("PATH")!, DENO_CERT: "/nonexistent/deno-cert.pem" };
  const denoCert = await runForgekit(
    ["firewall", "--allow-domains", "api.example", "--ssl-bump", "--", "true"],
    { env },
  );
  assert.equal(denoCert.code, 2);
  assert.equal(
    denoCert.stderr,
    "error: Cannot read DENO_CERT /nonexistent/deno-cert.pem: no such file or directory " +
      "(point DENO_CERT at a PEM file, or unset it)\n",
  );
});

Deno.test(
  "DENO_CERT is not read without --ssl-bump; --no-bump-domains may name a domain that covers allowed ones",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    const env = { PATH: Deno.env.get("PATH")!, DENO_CERT: "/nonexistent/deno-cert.pem" };
    const plain = await runForgekit(
      [
        "firewall",
        "--log-dir",
        logDir,
        "--no-sandbox",
        "--allow-domains",
        "api.example",
        "--",
        "true",
      ],
      { env },
    );
    assert.equal(plain.code, 0, plain.stderr);
    // *.api.example's hosts are all in api.example: spliced, as asked.
    const wide = await runForgekit([
      "firewall",
      "--log-dir",
      logDir,
      "--no-sandbox",
      "--allow-domains",
      "*.api.example",
      "--ssl-bump",
      "--no-bump-domains",
      "api.example",
      "--",
      "true",
    ], { env: { PATH: Deno.env.get("PATH")! } });
    assert.equal(wide.code, 0, wide.stderr);
  },
);

Deno.test(
  "an origin forgekit does not trust is named at the end of the run, with --upstream-ca as the fix",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    const r = await unsandboxed(
      ["--allow-domains", "api.example"],
      `${curl} ${code} https://api.example/untrusted`,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "502 upstream-error");
    assert.match(
      r.stderr,
      /^forgekit firewall: allowed, but failed upstream:\n {2}api\.example {2}1 {2}.*certificate.*\n {2}forgekit did not trust a server's certificate: for a private or corporate CA, pass --upstream-ca FILE \(PEM\)\nforgekit firewall: access log /m,
    );
  },
);

Deno.test(
  "HTTPS to an allowed IP address is inspected: its client sends no SNI",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    const r = await unsandboxed(
      [
        "--allow-domains",
        "198.51.100.7",
        "--allow-urls",
        "https://198.51.100.7/ok/*",
        "--upstream-ca",
        o.ca.certPath,
      ],
      `${curl} https://198.51.100.7/ok/ip; ${curl} ${code} https://198.51.100.7/no`,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "hello 198.51.100.7 /ok/ip\n403 blocked-by-url-policy");
    assert.ok(!o.hits.some((h) => h.path === "/no"));
  },
);

Deno.test(
  "teardown: ssl-bump test origins",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    await o.close();
    await Deno.remove(logDir, { recursive: true });
    await Deno.remove(repo.root, { recursive: true });
  },
);
