/**
 * Conformance audit of the credential file and the outbound request
 * procedure: rules the other tests left open, and the defects the audit
 * found. Real HTTPS origins on loopback under real host names (through a
 * test proxy), and plain loopback servers; the real forgekit program.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit } from "./support/cli.ts";
import { startOrigins } from "./support/origin.ts";

const S = "SECRETSECRET";

const o = await startOrigins(
  ["api.github.com", "ghe.corp.example", "dev.azure.com"],
  (req, hit) => {
    const auth = req.headers.get("authorization");
    const key = `${hit.host}${hit.path}`;
    if (hit.path === "/echo") return new Response(`auth=${auth ?? "none"}\n`);
    if (key === "api.github.com/hop-port") {
      return Response.redirect("https://api.github.com:8443/echo", 302);
    }
    if (key === "api.github.com/hop-port-443") {
      return Response.redirect("https://api.github.com:443/echo", 302);
    }
    if (key === "ghe.corp.example/org/tool/releases/download/v1/tool.bin") {
      return new Response(`web download, auth=${auth ?? "none"}\n`);
    }
    if (hit.path.startsWith("/api/v3/")) return Response.json({ assets: [] });
    if (key === "dev.azure.com/denied") return new Response("no\n", { status: 401 });
    return undefined;
  },
);
// Another port of the same host name: a second server, which records what reaches it.
const otherPortHits: (string | null)[] = [];
const otherPortLeaf = await o.ca.issue(["api.github.com"]);
const otherPort = Deno.serve(
  {
    hostname: "127.0.0.1",
    port: 0,
    cert: otherPortLeaf.cert,
    key: otherPortLeaf.key,
    onListen() {},
  },
  (req) => {
    otherPortHits.push(req.headers.get("authorization"));
    return new Response(`auth=${req.headers.get("authorization") ?? "none"}\n`);
  },
);
o.proxy.route("api.github.com:8443", otherPort.addr.port);

const dir = await Deno.makeTempDir({ prefix: "forgekit-auth-audit-" });

async function authFile(providers: unknown[]): Promise<string> {
  const path = join(dir, `auth-${crypto.randomUUID().slice(0, 8)}.json`);
  await Deno.writeTextFile(path, JSON.stringify({ providers }), { mode: 0o600 });
  return path;
}

function fk(args: string[], file: string | null, env: Record<string, string> = {}) {
  return runForgekit(args, {
    env: { ...o.env, ...(file ? { FORGEKIT_AUTH_FILE: file } : {}), ...env },
  });
}

const opts = { sanitizeResources: false, sanitizeOps: false };

const GH = {
  hosts: ["api.github.com"],
  provider: "codehost",
  auth: "bearer",
  token_env: "GH_TOKEN",
};

Deno.test(
  "a redirect to another port of a listed host drops the Authorization header, auth.json's or the caller's",
  opts,
  async () => {
    const file = await authFile([GH]);
    const env = { GH_TOKEN: `ghp_${S}` };
    let r = await fk(["fetch", "-v", "https://api.github.com/hop-port"], file, env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "auth=none\n");
    assert.match(r.stderr, /authorization stripped: port changes from 443 to 8443/);
    r = await fk(
      ["fetch", "-H", `Authorization: Bearer own_${S}`, "https://api.github.com/hop-port"],
      file,
    );
    assert.equal(r.stdout, "auth=none\n", "the caller's own header stays on its port too");
    assert.deepEqual(otherPortHits, [null, null]);
    // The same port written out is the same origin: kept.
    r = await fk(["fetch", "https://api.github.com/hop-port-443"], file, env);
    assert.equal(r.stdout, `auth=Bearer ghp_${S}\n`);
  },
);

Deno.test(
  "on loopback too, a token never follows a redirect to another port (another service, perhaps another user's)",
  opts,
  async () => {
    const seen: (string | null)[] = [];
    const other = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
      seen.push(req.headers.get("authorization"));
      return new Response(`auth=${req.headers.get("authorization") ?? "none"}\n`);
    });
    const first: Deno.HttpServer<Deno.NetAddr> = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen() {},
    }, (req): Response => {
      const path = new URL(req.url).pathname;
      if (path === "/same") return Response.redirect(`http://127.0.0.1:${first.addr.port}/echo`);
      if (path === "/echo") {
        return new Response(`auth=${req.headers.get("authorization") ?? "none"}\n`);
      }
      return Response.redirect(`http://127.0.0.1:${other.addr.port}/echo`, 307);
    });
    try {
      const file = await authFile([{
        hosts: ["127.0.0.1"],
        provider: "codehost",
        auth: "bearer",
        token: `fks_${S}`,
      }]);
      // Straight to loopback, not through the test proxy.
      const run = (path: string) =>
        runForgekit(["fetch", `http://127.0.0.1:${first.addr.port}${path}`], {
          env: { FORGEKIT_AUTH_FILE: file },
        });
      const away = await run("/away");
      assert.equal(away.code, 0, away.stderr);
      assert.equal(away.stdout, "auth=none\n");
      assert.deepEqual(seen, [null]);
      const same = await run("/same");
      assert.equal(same.stdout, `auth=Bearer fks_${S}\n`, "the same host and port: kept");
    } finally {
      await first.shutdown();
      await other.shutdown();
    }
  },
);

Deno.test(
  "with the caller's own Authorization header a release download is fetched as given, and auth.json's token goes nowhere",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["ghe.corp.example"],
      provider: "codehost",
      auth: "bearer",
      token: `ghe_${S}`,
    }]);
    const before = o.hits.length;
    const r = await fk([
      "fetch",
      "-H",
      "Authorization: Bearer mine",
      "https://ghe.corp.example/org/tool/releases/download/v1/tool.bin",
    ], file);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "web download, auth=Bearer mine\n");
    const hits = o.hits.slice(before);
    assert.deepEqual(hits.map((h) => `${h.path} ${h.headers.get("authorization")}`), [
      "/org/tool/releases/download/v1/tool.bin Bearer mine",
    ]);
  },
);

Deno.test(
  "-H with a line break or a control character is exit 2 naming the field, never its value",
  opts,
  async () => {
    for (const value of [`ghp_${S}\nX-Evil: 1`, `ghp_${S}\rx`, `ghp_${S}\x01`, `ghp_${S}\u20ac`]) {
      const r = await fk(
        ["fetch", "-H", `Authorization: ${value}`, "https://api.github.com/echo"],
        null,
      );
      assert.equal(r.code, 2, JSON.stringify(value));
      assert.equal(
        r.stderr,
        "error: -H Authorization: the value holds a line break or another character a header cannot carry (give the value on one line, in printable characters)\n",
      );
    }
    // A tab and Latin-1 are what a header may carry.
    const ok = await fk(["fetch", "-H", "X-Note: a\tb\u00e9", "https://api.github.com/echo"], null);
    assert.equal(ok.code, 0, ok.stderr);
  },
);

Deno.test(
  "a user name or password in a URL is masked in every error, even when the URL does not parse",
  opts,
  async () => {
    const file = await authFile([GH]);
    const bad = `https://x-access-token:ghp_${S}@exa mple.com/`;
    const cases: [string[], RegExp][] = [
      [
        ["fetch", bad],
        /^error: Not a URL \(got: "https:\/\/\*\*\*\*@exa mple\.com\/"\): Invalid URL/,
      ],
      [["auth", "explain", bad], /^error: Not a URL \(got: "https:\/\/\*\*\*\*@exa mple\.com\/"\)/],
      [
        ["fetch", `https://u:ghp_${S}@api.github.com/echo`, `https://u:ghp_${S}@api.github.com/x`],
        /^error: Expected one URL \(got: https:\/\/\*\*\*\*@api\.github\.com\/echo https:\/\/\*\*\*\*@/,
      ],
      [["auth", "doctor", `https://u:ghp_${S}@api.github.com/`], /^error: Unexpected argument: /],
      [
        ["stack", "list", "--repo", "o/r", "--api-url", bad],
        /^error: --api-url is not a URL \(got: "https:\/\/\*\*\*\*@exa mple\.com"\)/,
      ],
      [
        ["stack", "view", "1", `https://u:ghp_${S}@h/`, "--repo", "o/r"],
        /^error: Expected one stack number/,
      ],
      [["stack", "list", `https://u:ghp_${S}@h/`, "--repo", "o/r"], /^error: Unexpected argument/],
    ];
    for (const [args, want] of cases) {
      const r = await fk(args, file, { GH_TOKEN: "t" });
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, want);
      assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
      assert.ok(!`${r.stdout}${r.stderr}`.includes(S), r.stderr);
    }
  },
);

Deno.test(
  "when no matching entry resolves a token, exactly one request is made, unauthenticated",
  opts,
  async () => {
    const file = await authFile([
      { hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "bearer", token_env: "UNSET_A" },
      { hosts: ["*.azure.com"], provider: "cloud-devops", auth: "basic-pat", token_env: "UNSET_B" },
    ]);
    const before = o.hits.length;
    const r = await fk(["fetch", "-v", "https://dev.azure.com/denied"], file);
    assert.equal(r.code, 1);
    assert.deepEqual(
      o.hits.slice(before).map((h) => h.headers.get("authorization")),
      [null],
      "one unauthenticated request: the fallback is not made twice",
    );
    assert.match(r.stderr, /skipped providers\[0\].*\n.*skipped providers\[1\]/);
    assert.match(r.stderr, /attempt 1: unauthenticated/);
  },
);

Deno.test(
  "without the file no request carries credentials: a missing FORGEKIT_AUTH_FILE means none",
  opts,
  async () => {
    const r = await fk(["fetch", "https://api.github.com/echo"], join(dir, "absent.json"), {
      GH_TOKEN: `ghp_${S}`,
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "auth=none\n");
    assert.equal(r.stderr, "");
  },
);

Deno.test(
  "auth explain --json shows tokens masked, short ones wholly",
  opts,
  async () => {
    const file = await authFile([
      { ...GH, token_env: undefined, token: "short" },
      GH,
    ]);
    const r = await fk(["auth", "explain", "--json", "https://api.github.com/x"], file, {
      GH_TOKEN: `ghp_${S}`,
    });
    assert.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout);
    assert.deepEqual(j.attempts.map((a: { token: string }) => a.token), [
      "inline token ****",
      "$GH_TOKEN ghp_****",
    ]);
    assert.ok(!r.stdout.includes(S) && !r.stdout.includes("short"), r.stdout);
  },
);

Deno.test("teardown: auth audit origins", opts, async () => {
  await otherPort.shutdown();
  await o.close();
  await Deno.remove(dir, { recursive: true });
});
