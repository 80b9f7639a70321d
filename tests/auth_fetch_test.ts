/**
 * forgekit fetch end to end: real HTTPS origins on loopback under real host
 * names, reached through a test proxy (HTTPS_PROXY) trusting a test CA
 * (DENO_CERT); asserts the exact Authorization bytes each server received.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit } from "./support/cli.ts";
import { startOrigins } from "./support/origin.ts";

const enc = new TextEncoder();
const b64 = (s: string) => btoa(s);
const ASSET = "release-asset-bytes\n";
const ASSET_SHA = Array.from(
  new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(ASSET))),
).map((b) => b.toString(16).padStart(2, "0")).join("");

function releaseJson(assetUrl: string) {
  return Response.json({ tag_name: "v1", assets: [{ name: "tool.bin", url: assetUrl }] });
}

const o = await startOrigins([
  "github.com",
  "api.github.com",
  "ghe.corp.example",
  "tenant.ghe.com",
  "api.tenant.ghe.com",
  "api.bitbucket.org",
  "bitbucket.org",
  "dev.azure.com",
  "login.microsoftonline.com",
  "objects.storage.example",
], (req, hit) => {
  const auth = req.headers.get("authorization");
  const p = hit.path;
  const key = `${hit.host}${p}`;
  if (p === "/echo" || p.startsWith("/echo?")) return new Response(`auth=${auth ?? "none"}\n`);
  if (key === "dev.azure.com/needs-second") {
    return auth === "Bearer second" ? new Response("ok\n") : new Response("no\n", { status: 401 });
  }
  if (p === "/always-403") return new Response("forbidden\n", { status: 403 });
  if (key === "api.github.com/hop-same") return Response.redirect("https://github.com/echo", 302);
  if (key === "api.github.com/hop-away") {
    return Response.redirect("https://objects.storage.example/echo", 302);
  }
  if (p === "/cookie") return new Response(`cookie=${req.headers.get("cookie") ?? "none"}\n`);
  if (key === "api.github.com/hop-cookie") {
    return Response.redirect("https://objects.storage.example/cookie", 302);
  }
  if (key === "api.github.com/hop-cookie-same") {
    return Response.redirect("https://api.github.com/cookie", 302);
  }
  if (key === "api.bitbucket.org/hop-web") {
    return Response.redirect("https://bitbucket.org/echo", 302);
  }
  if (key === "api.github.com/hop-down") {
    return Response.redirect("http://api.github.com/echo", 302);
  }
  if (key === "api.github.com/leave") {
    return Response.redirect("https://objects.storage.example/back", 302);
  }
  if (key === "objects.storage.example/back") {
    return Response.redirect("https://api.github.com/echo?back", 302);
  }
  if (key === "api.github.com/post-307") {
    return new Response(null, { status: 307, headers: { location: "/echo-body" } });
  }
  if (key === "api.github.com/echo-body") return new Response(`${req.method} ${hit.body}\n`);
  if (p === "/loop") return Response.redirect(`https://${hit.host}/loop`, 302);
  if (key === "api.github.com/hop-invalid") {
    return new Response(null, { status: 302, headers: { location: "https://u:LEAKME@[zz/x" } });
  }
  // enterprise server
  if (key === "ghe.corp.example/api/v3/repos/org/tool/releases/tags/v1") {
    return auth === "Bearer ghe-token"
      ? releaseJson("https://ghe.corp.example/api/v3/repos/org/tool/releases/assets/42")
      : new Response("{}", { status: 404 });
  }
  if (key === "ghe.corp.example/api/v3/repos/org/tool/releases/latest") {
    return releaseJson("https://ghe.corp.example/api/v3/repos/org/tool/releases/assets/42");
  }
  if (key === "ghe.corp.example/api/v3/repos/org/tool/releases/assets/42") {
    if (auth !== "Bearer ghe-token" || req.headers.get("accept") !== "application/octet-stream") {
      return new Response("{}", { status: 404 });
    }
    return Response.redirect("https://objects.storage.example/blob?sig=abc", 302);
  }
  if (key === "objects.storage.example/blob?sig=abc") return new Response(ASSET);
  // github.com through api.github.com
  if (key === "api.github.com/repos/org/private/releases/tags/v1") {
    return releaseJson("https://api.github.com/repos/org/private/releases/assets/7");
  }
  if (key === "api.github.com/repos/org/private/releases/assets/7") {
    return Response.redirect("https://objects.storage.example/blob?sig=abc", 302);
  }
  // data residency
  const dr = /^api\.tenant\.ghe\.com\/repos\/org\/tool\/releases\/tags\/(.+)$/.exec(key);
  if (dr) {
    const assetUrl = {
      v1: "https://api.tenant.ghe.com/repos/org/tool/releases/assets/9",
      "other-repo": "https://api.tenant.ghe.com/repos/org/other/releases/assets/9",
      "other-host": "https://evil.example/repos/org/tool/releases/assets/9",
      "not-numeric": "https://api.tenant.ghe.com/repos/org/tool/releases/assets/9x",
    }[dr[1]];
    return assetUrl ? releaseJson(assetUrl) : undefined;
  }
  if (key === "api.tenant.ghe.com/repos/org/tool/releases/assets/9") {
    return Response.redirect("https://objects.storage.example/blob?sig=abc", 302);
  }
  // repohost downloads: pre-signed redirect
  if (key === "api.bitbucket.org/2.0/repositories/ws/repo/downloads/tool.bin") {
    return Response.redirect("https://objects.storage.example/blob?sig=abc", 302);
  }
  // cloud-ad token endpoint
  if (key === "login.microsoftonline.com/tenant-moved/oauth2/v2.0/token") {
    return new Response(null, {
      status: 307,
      headers: { location: "https://objects.storage.example/token-sink" },
    });
  }
  if (hit.host === "login.microsoftonline.com" && p === "/tenant-1/oauth2/v2.0/token") {
    const form = new URLSearchParams(hit.body);
    if (form.get("client_secret") !== "right-secret") {
      return Response.json({
        error: "invalid_client",
        error_description: "AADSTS7000215: Invalid client secret provided.",
      }, { status: 401 });
    }
    return Response.json({ access_token: "ad-token", expires_in: 3600, token_type: "Bearer" });
  }
  if (hit.host === "login.microsoftonline.com" && p === "/tenant-bad-token/oauth2/v2.0/token") {
    return Response.json({ access_token: "eyJAD\r\nLEAKME", expires_in: 3600 });
  }
  return undefined;
});

const dir = await Deno.makeTempDir({ prefix: "forgekit-auth-" });

async function authFile(providers: unknown[], mode = 0o600): Promise<string> {
  const path = join(dir, `auth-${crypto.randomUUID().slice(0, 8)}.json`);
  await Deno.writeTextFile(path, JSON.stringify({ providers }), { mode });
  await Deno.chmod(path, mode);
  return path;
}

function fk(args: string[], file: string | null, env: Record<string, string> = {}) {
  return runForgekit(args, {
    env: { ...o.env, ...(file ? { FORGEKIT_AUTH_FILE: file } : {}), ...env },
  });
}

function hitsFor(host: string, path: string) {
  return o.hits.filter((h) => h.host === host && h.path === path).map((h) =>
    h.headers.get("authorization")
  );
}

const GH = {
  hosts: ["github.com", "api.github.com", "raw.githubusercontent.com", "codeload.github.com"],
  provider: "codehost",
  auth: "bearer",
  token_env: "GH_TOKEN",
};

const opts = { sanitizeResources: false, sanitizeOps: false };

Deno.test("every scheme sends exactly the specification's header", opts, async () => {
  const file = await authFile([
    GH,
    { hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "basic-pat", token_env: "ADO_PAT" },
    {
      hosts: ["api.bitbucket.org"],
      provider: "repohost",
      auth: "basic",
      username: "me@example.com",
      token_env: "BB_API_TOKEN",
    },
  ]);
  const env = { GH_TOKEN: "ghp_secret1", ADO_PAT: "adopat", BB_API_TOKEN: "bbtok" };
  const cases: [string, string][] = [
    ["https://api.github.com/echo", "Bearer ghp_secret1"],
    ["https://dev.azure.com/echo", `Basic ${b64(":adopat")}`],
    ["https://api.bitbucket.org/echo", `Basic ${b64("me@example.com:bbtok")}`],
    ["https://objects.storage.example/echo", "none"],
  ];
  for (const [url, want] of cases) {
    const r = await fk(["fetch", url], file, env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `auth=${want}\n`, url);
    assert.doesNotMatch(r.stderr, /ghp_secret1|adopat|bbtok/);
  }
  // Bearer variants: cloud-devops bearer and repohost bearer.
  const bearer = await authFile([
    { hosts: ["dev.azure.com"], provider: "azure-devops", auth: "bearer", token: "adoBearer" },
    { hosts: ["api.bitbucket.org"], provider: "bitbucket", auth: "bearer", token_env: "BB_ACCESS" },
  ]);
  assert.equal(
    (await fk(["fetch", "https://dev.azure.com/echo"], bearer)).stdout,
    "auth=Bearer adoBearer\n",
  );
  assert.equal(
    (await fk(["fetch", "https://api.bitbucket.org/echo"], bearer, { BB_ACCESS: "bbAccess" }))
      .stdout,
    "auth=Bearer bbAccess\n",
  );
});

Deno.test(
  "401/403 moves to the next entry, then exactly one unauthenticated request",
  opts,
  async () => {
    const file = await authFile([
      { hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "basic-pat", token: "first" },
      { hosts: ["*.azure.com"], provider: "cloud-devops", auth: "bearer", token_env: "UNSET_VAR" },
      { hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "bearer", token: "second" },
    ]);
    const ok = await fk(["fetch", "-v", "https://dev.azure.com/needs-second"], file);
    assert.equal(ok.code, 0, ok.stderr);
    assert.deepEqual(hitsFor("dev.azure.com", "/needs-second"), [
      `Basic ${b64(":first")}`,
      "Bearer second",
    ]);
    assert.match(
      ok.stderr,
      /skipped providers\[1\] \(cloud-devops bearer\): \$UNSET_VAR is not set/,
    );
    assert.doesNotMatch(ok.stderr, /second\b.*second/);

    const denied = await fk(["fetch", "-v", "https://dev.azure.com/always-403"], file);
    assert.equal(denied.code, 1);
    assert.deepEqual(hitsFor("dev.azure.com", "/always-403"), [
      `Basic ${b64(":first")}`,
      "Bearer second",
      null,
    ]);
    assert.match(
      denied.stderr,
      /^error: GET https:\/\/dev\.azure\.com\/always-403 returned 403 Forbidden$/m,
    );
    assert.match(denied.stderr, /attempt 3: unauthenticated/);
  },
);

Deno.test(
  "redirects keep the header only inside the entry's hosts and never on downgrade",
  opts,
  async () => {
    const file = await authFile([GH]);
    const env = { GH_TOKEN: "ghp_tok" };
    let r = await fk(["fetch", "-v", "https://api.github.com/hop-same"], file, env);
    assert.equal(r.stdout, "auth=Bearer ghp_tok\n", "github.com is in the entry: kept");
    assert.match(r.stderr, /redirect 302 -> https:\/\/github\.com\/echo \(authorization kept\)/);

    r = await fk(["fetch", "-v", "https://api.github.com/hop-away"], file, env);
    assert.equal(r.stdout, "auth=none\n", "storage host is outside: stripped");
    assert.match(
      r.stderr,
      /authorization stripped: objects\.storage\.example is outside the entry's hosts/,
    );

    r = await fk(["fetch", "-v", "https://api.github.com/hop-down"], file, env);
    assert.equal(r.stdout, "auth=none\n", "https to http: stripped");
    assert.match(r.stderr, /authorization stripped: https to http downgrade/);
    assert.equal(o.hits.at(-1)!.scheme, "http");

    // A repohost token never goes to the web host, which takes none, even when it is listed.
    const bb = await authFile([{
      hosts: ["api.bitbucket.org", "bitbucket.org"],
      provider: "repohost",
      auth: "bearer",
      token_env: "BB_TOKEN",
    }]);
    r = await fk(["fetch", "-v", "https://api.bitbucket.org/hop-web"], bb, { BB_TOKEN: "bb_tok" });
    assert.equal(r.stdout, "auth=none\n", "bitbucket.org takes no repohost token");
    assert.match(r.stderr, /authorization stripped: bitbucket\.org is outside the entry's hosts/);

    // The caller's cookies stay with their host.
    r = await fk(["fetch", "-H", "Cookie: s=1", "https://api.github.com/hop-cookie"], file, env);
    assert.equal(r.stdout, "cookie=none\n", "another host: the cookie is dropped");
    r = await fk(
      ["fetch", "-H", "Cookie: s=1", "https://api.github.com/hop-cookie-same"],
      file,
      env,
    );
    assert.equal(r.stdout, "cookie=s=1\n", "the same host: kept");

    // A user and password in the URL are the caller's own: no auth.json token beside them.
    r = await fk(["fetch", "-v", "https://u:p@api.github.com/echo"], file, env);
    assert.equal(r.stdout, `auth=Basic ${b64("u:p")}\n`);
    assert.match(r.stderr, /with the URL's own user and password; auth\.json not used/);
    assert.doesNotMatch(r.stderr, /u:p@/);

    // Plain http:// to a host outside loopback: the entry is not used at all.
    r = await fk(["fetch", "-v", "http://api.github.com/echo"], file, env);
    assert.equal(r.stdout, "auth=none\n", "no token without TLS");
    assert.match(
      r.stderr,
      /auth\.json's entries for api\.github\.com not used: plain http:\/\/ to api\.github\.com \(not loopback\)/,
    );
    assert.equal(o.hits.at(-1)!.scheme, "http");

    r = await fk(["fetch", "https://api.github.com/leave"], file, env);
    assert.equal(r.stdout, "auth=none\n", "a chain that leaves and comes back stays stripped");
    assert.deepEqual(hitsFor("objects.storage.example", "/back"), [null]);

    r = await fk(
      ["fetch", "-X", "POST", "-d", "payload", "https://api.github.com/post-307"],
      file,
      env,
    );
    assert.equal(r.stdout, "POST payload\n", "307 replays the method and body");

    r = await fk(["fetch", "https://api.github.com/loop"], file, env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /more than 10 redirects/);
    assert.equal(hitsFor("api.github.com", "/loop").length, 11);

    r = await fk(["fetch", "-v", "https://api.github.com/hop-invalid"], file, env);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /^error: GET https:\/\/api\.github\.com\/hop-invalid redirected to a Location that is no URL: Invalid URL: "https:\/\/\*\*\*\*@\[zz\/x"/m,
    );
    assert.doesNotMatch(r.stderr, /LEAKME/, "a Location's user name and password are never shown");
  },
);

Deno.test(
  "enterprise release downloads resolve through /api/v3 and drop the header at storage",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["ghe.corp.example"],
      provider: "codehost",
      auth: "bearer",
      token: "ghe-token",
    }]);
    const out = join(dir, "tool.bin");
    const r = await fk([
      "fetch",
      "https://ghe.corp.example/org/tool/releases/download/v1/tool.bin",
      "-o",
      out,
      "--sha256",
      `sha256:${ASSET_SHA}`,
    ], file);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await Deno.readTextFile(out), ASSET);
    assert.deepEqual(hitsFor("ghe.corp.example", "/api/v3/repos/org/tool/releases/tags/v1"), [
      "Bearer ghe-token",
    ]);
    assert.deepEqual(hitsFor("ghe.corp.example", "/api/v3/repos/org/tool/releases/assets/42"), [
      "Bearer ghe-token",
    ]);
    assert.equal(hitsFor("objects.storage.example", "/blob?sig=abc").at(-1), null);

    const latest = await fk([
      "fetch",
      "https://ghe.corp.example/org/tool/releases/latest/download/tool.bin",
    ], file);
    assert.equal(latest.stdout, ASSET);

    const missing = await fk([
      "fetch",
      "https://ghe.corp.example/org/tool/releases/download/v1/nope.bin",
    ], file);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^error: Release v1 of org\/tool has no asset named nope\.bin/);
  },
);

Deno.test(
  "github.com release downloads go through api.github.com when github.com is listed",
  opts,
  async () => {
    const file = await authFile([GH]);
    const r = await fk(
      ["fetch", "https://github.com/org/private/releases/download/v1/tool.bin"],
      file,
      { GH_TOKEN: "gh-rel" },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, ASSET);
    assert.deepEqual(hitsFor("api.github.com", "/repos/org/private/releases/assets/7"), [
      "Bearer gh-rel",
    ]);
    assert.equal(
      o.hits.filter((h) => h.host === "api.github.com" && h.path.endsWith("/assets/7"))[0].headers
        .get("accept"),
      "application/octet-stream",
    );
  },
);

Deno.test(
  "data-residency downloads use api.TENANT.ghe.com and refuse any other asset URL",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["tenant.ghe.com", "*.tenant.ghe.com"],
      provider: "codehost",
      auth: "bearer",
      token: "dr-token",
    }]);
    const ok = await fk(
      ["fetch", "https://tenant.ghe.com/org/tool/releases/download/v1/tool.bin"],
      file,
    );
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, ASSET);
    assert.deepEqual(hitsFor("api.tenant.ghe.com", "/repos/org/tool/releases/tags/v1"), [
      "Bearer dr-token",
    ]);
    const refusals: [string, RegExp][] = [
      ["other-repo", /belongs to org\/other, not org\/tool/],
      ["other-host", /is not on api\.tenant\.ghe\.com/],
      ["not-numeric", /does not end in a numeric asset id/],
    ];
    for (const [tag, why] of refusals) {
      const r = await fk([
        "fetch",
        `https://tenant.ghe.com/org/tool/releases/download/${tag}/tool.bin`,
      ], file);
      assert.equal(r.code, 1, tag);
      assert.match(r.stderr, /^error: Refusing release download /);
      assert.match(r.stderr, why);
    }
    assert.equal(o.hits.filter((h) => h.host === "evil.example").length, 0);
  },
);

Deno.test(
  "repohost Downloads redirect to pre-signed storage without the header and still succeed",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["api.bitbucket.org"],
      provider: "repohost",
      auth: "basic",
      username: "me@example.com",
      token: "bbtok",
    }]);
    const r = await fk([
      "fetch",
      "-v",
      "https://api.bitbucket.org/2.0/repositories/ws/repo/downloads/tool.bin",
      "--sha256",
      ASSET_SHA,
    ], file);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, ASSET);
    assert.match(r.stderr, /authorization stripped/);
    assert.equal(hitsFor("objects.storage.example", "/blob?sig=abc").at(-1), null);
    // The web host takes no API token.
    const web = await fk(
      ["fetch", "https://bitbucket.org/echo"],
      await authFile([{
        hosts: ["bitbucket.org", "api.bitbucket.org"],
        provider: "repohost",
        auth: "bearer",
        token: "x",
      }]),
    );
    assert.equal(web.stdout, "auth=none\n");
  },
);

Deno.test("a checksum mismatch leaves no file and exits 1", opts, async () => {
  const out = join(dir, "mismatch.bin");
  const r = await fk([
    "fetch",
    "https://objects.storage.example/blob?sig=abc",
    "-o",
    out,
    "--sha256",
    "0".repeat(64),
  ], null);
  assert.equal(r.code, 1);
  assert.match(
    r.stderr,
    /^error: SHA-256 mismatch for .+: expected 0{64}, got [0-9a-f]{64} \(nothing was written/,
  );
  await assert.rejects(Deno.stat(out), Deno.errors.NotFound);
  assert.deepEqual([...Deno.readDirSync(dir)].filter((e) => e.name.includes("mismatch")), []);
  const bad = await fk(["fetch", "https://objects.storage.example/x", "--sha256", "xyz"], null);
  assert.equal(bad.code, 2);
});

Deno.test(
  "cloud-cli takes the token from az on PATH; a missing az is a clear error",
  opts,
  async () => {
    const bin = await Deno.makeTempDir({ dir });
    await Deno.writeTextFile(
      join(bin, "az"),
      `#!/bin/sh\necho "$@" >> "${bin}/calls"\necho '{"accessToken": "az-token", "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": 4070908800}'\n`,
      { mode: 0o755 },
    );
    const file = await authFile([{
      hosts: ["dev.azure.com"],
      provider: "cloud-devops",
      auth: "azure-cli",
    }]);
    const path = `${bin}:${Deno.env.get("PATH")}`;
    const r = await fk(["fetch", "https://dev.azure.com/echo"], file, { PATH: path });
    assert.equal(r.stdout, "auth=Bearer az-token\n", r.stderr);
    assert.equal(
      (await Deno.readTextFile(join(bin, "calls"))).trim(),
      "account get-access-token --resource 499b84ac-1321-427f-aa17-267ca6975798 --output json",
    );
    const none = await fk(["fetch", "https://dev.azure.com/echo"], file, { PATH: "/nonexistent" });
    assert.equal(none.code, 1);
    assert.match(
      none.stderr,
      /^error: cloud-cli: the az command was not found on PATH: .*\(install the Azure CLI and run: az login\)$/m,
    );
  },
);

Deno.test(
  "a token from az or the token endpoint that is not JSON, not a string or holds a line break is an error that never quotes it",
  opts,
  async () => {
    const bin = await Deno.makeTempDir({ dir });
    const cli = await authFile([{
      hosts: ["dev.azure.com"],
      provider: "cloud-devops",
      auth: "cloud-cli",
    }]);
    const path = `${bin}:${Deno.env.get("PATH")}`;
    const outputs: [string, RegExp][] = [
      [
        "eyJ0SECRET",
        /^error: cloud-cli: az printed no JSON: Unexpected token 'e' \(run: az login\)$/,
      ],
      [
        '{"accessToken": "eyJ\\r\\nSECRET", "expires_on": 4070908800}',
        /^error: cloud-cli: az printed an accessToken that holds a line break or another character a header cannot carry \(run: az login\)$/,
      ],
      ['{"accessToken": "eyJ\\u0000SECRET"}', /holds a line break or another character/],
      [
        '{"accessToken": 12345678901234}',
        /^error: cloud-cli: az printed no accessToken \(run: az login\)$/,
      ],
      ['{"accessToken": "eyJSECRET", "expiresOn": 5}', /^$/],
    ];
    for (const [output, want] of outputs) {
      await Deno.writeTextFile(join(bin, "az"), `#!/bin/sh\ncat <<'EOF'\n${output}\nEOF\n`, {
        mode: 0o755,
      });
      const r = await fk(["fetch", "-v", "https://dev.azure.com/echo"], cli, { PATH: path });
      const errors = r.stderr.split("\n").filter((l) => !l.startsWith("* ")).join("\n").trim();
      assert.match(errors, want, output);
      assert.equal(r.code, errors === "" ? 0 : 1, output);
      assert.doesNotMatch(r.stderr, /SECRET|0SE|12345678/, output);
    }
    const ad = await fk(
      ["fetch", "https://dev.azure.com/echo"],
      await authFile([{
        hosts: ["dev.azure.com"],
        provider: "cloud-devops",
        auth: "cloud-ad",
        tenant_id: "tenant-bad-token",
        client_id: "client-1",
        client_secret_env: "ADO_CLIENT_SECRET",
      }]),
      { ADO_CLIENT_SECRET: "right-secret" },
    );
    assert.equal(ad.code, 1);
    assert.match(
      ad.stderr,
      /^error: cloud-ad: login\.microsoftonline\.com answered client client-1 with an access_token that holds a line break/,
    );
    assert.doesNotMatch(ad.stderr, /LEAKME/);
  },
);

Deno.test(
  "cloud-ad makes one client-credentials request for many fetches; a bad secret is a clear error",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["dev.azure.com"],
      provider: "cloud-devops",
      auth: "cloud-ad",
      tenant_id: "tenant-1",
      client_id: "client-1",
      client_secret_env: "ADO_CLIENT_SECRET",
    }]);
    const { authFetch, loadAuthConfig } = await import("../lib/auth/mod.ts");
    const before = o.hits.filter((h) => h.host === "login.microsoftonline.com").length;
    Deno.env.set("ADO_CLIENT_SECRET", "right-secret");
    try {
      const config = await loadAuthConfig(file);
      for (let i = 0; i < 100; i++) {
        const res = await authFetch("https://dev.azure.com/echo", {}, { config, client: o.client });
        assert.equal(await res.text(), "auth=Bearer ad-token\n");
      }
    } finally {
      Deno.env.delete("ADO_CLIENT_SECRET");
    }
    const tokenHits = o.hits.filter((h) => h.host === "login.microsoftonline.com").slice(before);
    assert.equal(tokenHits.length, 1);
    const form = new URLSearchParams(tokenHits[0].body);
    assert.equal(form.get("grant_type"), "client_credentials");
    assert.equal(form.get("client_id"), "client-1");
    assert.equal(form.get("scope"), "499b84ac-1321-427f-aa17-267ca6975798/.default");

    const bad = await fk(["fetch", "https://dev.azure.com/echo"], file, {
      ADO_CLIENT_SECRET: "wrong-secret",
    });
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      /^error: cloud-ad: the token request for client client-1 was rejected: AADSTS7000215: Invalid client secret provided\. \(check tenant_id, client_id and the secret in \$ADO_CLIENT_SECRET\)$/m,
    );
    assert.doesNotMatch(bad.stderr, /wrong-secret/);
  },
);

Deno.test("the cloud-ad client secret never follows a redirect", opts, async () => {
  const file = await authFile([{
    hosts: ["dev.azure.com"],
    provider: "cloud-devops",
    auth: "cloud-ad",
    tenant_id: "tenant-moved",
    client_id: "client-1",
    client_secret_env: "ADO_CLIENT_SECRET",
  }]);
  const r = await fk(["fetch", "https://dev.azure.com/echo"], file, {
    ADO_CLIENT_SECRET: "right-secret",
  });
  assert.equal(r.code, 1);
  assert.match(
    r.stderr,
    /^error: cloud-ad: the token request for client client-1 was rejected: 307/,
  );
  assert.deepEqual(hitsFor("objects.storage.example", "/token-sink"), []);
});

Deno.test("a file readable by others still works and warns once", opts, async () => {
  const file = await authFile([GH], 0o644);
  const r = await fk(["fetch", "https://api.github.com/echo"], file, { GH_TOKEN: "t1" });
  assert.equal(r.code, 0);
  assert.equal(r.stdout, "auth=Bearer t1\n");
  assert.equal(r.stderr, `warning: ${file} is readable by other users (run: chmod 600 ${file})\n`);
  const home = await Deno.makeTempDir({ dir });
  await Deno.mkdir(join(home, ".forgekit"));
  await Deno.writeTextFile(
    join(home, ".forgekit", "auth.json"),
    JSON.stringify({ providers: [GH] }),
    { mode: 0o640 },
  );
  await Deno.chmod(join(home, ".forgekit", "auth.json"), 0o640);
  const h = await runForgekit(["fetch", "https://api.github.com/echo"], {
    env: { ...o.env, HOME: home, GH_TOKEN: "t2" },
  });
  assert.equal(h.stdout, "auth=Bearer t2\n");
  assert.equal(
    h.stderr,
    "warning: ~/.forgekit/auth.json is readable by other users (run: chmod 600 ~/.forgekit/auth.json)\n",
  );
});

Deno.test(
  "fetch: -o is atomic, -i prints headers, 404 exits 1, bad usage exits 2",
  opts,
  async () => {
    const out = join(dir, "echo.txt");
    const r = await fk(["fetch", "https://objects.storage.example/echo", "-o", out], null);
    assert.equal(r.code, 0);
    assert.equal(r.stdout, "");
    assert.equal(await Deno.readTextFile(out), "auth=none\n");
    // "-o -" is stdout, as in curl (not a file named "-").
    const dash = await fk(["fetch", "https://objects.storage.example/echo", "-o", "-"], null);
    assert.equal(dash.code, 0, dash.stderr);
    assert.equal(dash.stdout, "auth=none\n");
    const i = await fk(["fetch", "-i", "https://objects.storage.example/echo"], null);
    assert.match(i.stdout, /^HTTP\/1\.1 200 OK\r\n/);
    const nf = await fk(
      ["fetch", "https://objects.storage.example/nothing", "-o", join(dir, "nf")],
      null,
    );
    assert.equal(nf.code, 1);
    assert.equal(
      nf.stderr,
      "error: GET https://objects.storage.example/nothing returned 404 Not Found\n",
    );
    await assert.rejects(Deno.stat(join(dir, "nf")));
    for (
      const args of [["fetch"], ["fetch", "not a url"], [
        "fetch",
        "-H",
        "nocolon",
        "https://x.example/",
      ], ["fetch", "--bogus", "https://x.example/"]]
    ) {
      const u = await fk(args, null);
      assert.equal(u.code, 2, args.join(" "));
      assert.match(u.stderr, /^error: .+ \(.+\)\n$/);
    }
  },
);

Deno.test(
  "auth explain lists the entries in order with masked tokens, no network",
  opts,
  async () => {
    const file = await authFile([
      GH,
      {
        hosts: ["*.github.com"],
        provider: "codehost",
        auth: "bearer",
        token: "inline-secret-token",
      },
    ]);
    const n = o.hits.length;
    const r = await fk(["auth", "explain", "https://api.github.com/repos/o/r"], file, {
      GH_TOKEN: "ghp_abcdefghijkl",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      r.stdout,
      "1. providers[0] codehost bearer: $GH_TOKEN ghp_****\n2. providers[1] codehost bearer: inline token inli****\n3. unauthenticated (when every entry above answers 401/403)\n",
    );
    assert.equal(o.hits.length, n);
    const j = await fk(["auth", "explain", "--json", "https://example.org/"], file);
    assert.deepEqual(JSON.parse(j.stdout).attempts, []);
  },
);

Deno.test(
  "auth explain says why the unauthenticated request comes: no file, no match, no token, or 401/403",
  opts,
  async () => {
    const url = "https://api.github.com/user";
    const home = await Deno.makeTempDir({ dir });
    const none = await runForgekit(["auth", "explain", url], { env: { ...o.env, HOME: home } });
    assert.equal(none.code, 0, none.stderr);
    assert.equal(
      none.stdout,
      "no auth file (~/.forgekit/auth.json): unauthenticated\n1. unauthenticated (no auth file)\n",
    );
    const file = await authFile([GH, { ...GH, token_env: "EXPLAIN_OTHER_TOKEN" }]);
    const other = await fk(["auth", "explain", "https://example.org/"], file);
    assert.equal(other.stdout, "1. unauthenticated (no entry matches)\n");
    const unset = await fk(["auth", "explain", url], file);
    assert.equal(
      unset.stdout,
      "1. providers[0] codehost bearer: skipped: $GH_TOKEN is not set\n" +
        "2. providers[1] codehost bearer: skipped: $EXPLAIN_OTHER_TOKEN is not set\n" +
        "3. unauthenticated (no entry above has a token to send)\n",
    );
    const one = await fk(["auth", "explain", url], file, { EXPLAIN_OTHER_TOKEN: "ghp_other1" });
    assert.match(
      one.stdout,
      /\n3\. unauthenticated \(when every entry above answers 401\/403\)\n$/,
    );
  },
);

Deno.test(
  "auth explain skips a cloud-ad entry whose secret variable is unset, as fetch does",
  opts,
  async () => {
    const ad = {
      hosts: ["dev.azure.com"],
      provider: "cloud-devops",
      auth: "cloud-ad",
      tenant_id: "t",
      client_id: "c",
      client_secret_env: "EXPLAIN_AD_SECRET",
    };
    const file = await authFile([ad]);
    const url = "https://dev.azure.com/org/_apis/projects";
    const unset = await fk(["auth", "explain", url], file);
    assert.equal(unset.code, 0, unset.stderr);
    assert.equal(
      unset.stdout,
      "1. providers[0] cloud-devops cloud-ad: skipped: $EXPLAIN_AD_SECRET is not set\n2. unauthenticated (no entry above has a token to send)\n",
    );
    const set = await fk(["auth", "explain", url], file, { EXPLAIN_AD_SECRET: "s3cret-value" });
    assert.match(set.stdout, /^1\. providers\[0\] cloud-devops cloud-ad: client credentials c @ /);
    assert.ok(!set.stdout.includes("s3cret-value"));
  },
);

Deno.test(
  "auth doctor --json reports a missing or broken file as JSON too, besides the one-line error",
  opts,
  async () => {
    const home = await Deno.makeTempDir({ dir });
    const missing = await runForgekit(["auth", "doctor", "--json"], {
      env: { ...o.env, HOME: home },
    });
    assert.equal(missing.code, 2);
    assert.deepEqual(JSON.parse(missing.stdout), {
      file: join(home, ".forgekit", "auth.json"),
      valid: false,
      usable: false,
      error:
        "No auth file at ~/.forgekit/auth.json: every request is unauthenticated (run: forgekit auth init)",
      warnings: [],
      entries: [],
    });
    assert.match(missing.stderr, /^error: No auth file at ~\/\.forgekit\/auth\.json: /);
    const broken = await authFile([{ ...GH, token_evn: "GH_TOKEN" }]);
    const bad = await fk(["auth", "doctor", "--json"], broken);
    assert.equal(bad.code, 2);
    const report = JSON.parse(bad.stdout);
    assert.equal(report.valid, false);
    assert.match(report.error, /providers\[0\]: unknown key "token_evn"/);
    assert.equal(bad.stderr.trimEnd().split("\n").length, 1);
    // Without --json, nothing on stdout: the error alone, as before.
    const plain = await fk(["auth", "doctor"], broken);
    assert.equal(plain.code, 2);
    assert.equal(plain.stdout, "");
  },
);

Deno.test(
  "auth doctor reports entries, masks tokens, and exits 2 when unusable",
  opts,
  async () => {
    const file = await authFile([GH, {
      hosts: ["bitbucket.org"],
      provider: "repohost",
      auth: "bearer",
      token_env: "BB",
    }]);
    const ok = await fk(["auth", "doctor"], file, { GH_TOKEN: "ghp_doctortoken" });
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(ok.stdout, /ok {3}providers\[0\] codehost bearer .*token \$GH_TOKEN ghp_\*\*\*\*/);
    assert.match(ok.stdout, /warning: providers\[1\] lists only bitbucket\.org/);
    assert.doesNotMatch(ok.stdout, /doctortoken/);
    const bad = await fk(["auth", "doctor"], file);
    assert.equal(bad.code, 2);
    const cli = await fk(
      ["auth", "doctor"],
      await authFile([{ hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "cloud-cli" }]),
      { PATH: "/nonexistent" },
    );
    assert.equal(cli.code, 2);
    assert.match(cli.stdout, /az not found on PATH/);
  },
);

Deno.test(
  "auth init writes a valid mode-600 file listing the github.com hosts and never overwrites",
  opts,
  async () => {
    const home = await Deno.makeTempDir({ dir });
    const env = { ...o.env, HOME: home };
    const r = await runForgekit(["auth", "init"], { env });
    assert.equal(r.code, 0, r.stderr);
    const path = join(home, ".forgekit", "auth.json");
    assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
    const text = await Deno.readTextFile(path);
    for (
      const h of [
        "github.com",
        "api.github.com",
        "raw.githubusercontent.com",
        "codeload.github.com",
      ]
    ) {
      assert.ok(text.includes(`"${h}"`), h);
    }
    const doctor = await runForgekit(["auth", "doctor"], {
      env: { ...env, GH_TOKEN: "x".repeat(20) },
    });
    assert.equal(doctor.code, 0, doctor.stdout + doctor.stderr);
    const again = await runForgekit(["auth", "init"], { env });
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already exists; not overwriting it/);
    assert.equal(await Deno.readTextFile(path), text);
  },
);

Deno.test("the git credential helper answers real `git credential fill`", opts, async () => {
  const file = await authFile([
    GH,
    { hosts: ["api.bitbucket.org"], provider: "repohost", auth: "bearer", token_env: "BB_ACCESS" },
  ]);
  const helper = `!'${Deno.execPath()}' run -A --quiet '${
    new URL("../main.ts", import.meta.url).pathname
  }' auth git-credential`;
  const fill = async (host: string, protocol = "https") => {
    const child = new Deno.Command("git", {
      args: ["-c", "credential.helper=", "-c", `credential.helper=${helper}`, "credential", "fill"],
      env: {
        FORGEKIT_AUTH_FILE: file,
        GH_TOKEN: "gh-git-token",
        BB_ACCESS: "bb-access",
        GIT_TERMINAL_PROMPT: "0",
        HOME: dir,
      },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(enc.encode(`protocol=${protocol}\nhost=${host}\n\n`));
    await w.close();
    const out = await child.output();
    return { code: out.code, stdout: new TextDecoder().decode(out.stdout) };
  };
  const gh = await fill("github.com");
  assert.match(gh.stdout, /^username=x-access-token\npassword=gh-git-token\n/m);
  const bb = await fill("bitbucket.org");
  assert.match(bb.stdout, /^username=x-token-auth\npassword=bb-access\n/m);
  const none = await fill("example.org");
  assert.notEqual(none.code, 0, "no credential: git gives up without a prompt");
  // Over plain http, a token goes only to this machine.
  const plain = await fill("github.com", "http");
  assert.notEqual(plain.code, 0, "no token for http://github.com");
  assert.doesNotMatch(plain.stdout, /gh-git-token/);
});

Deno.test(
  "a broken auth.json stops every command with exit 2 and one line naming the place",
  opts,
  async () => {
    const path = join(dir, "broken.json");
    const before = o.hits.length;
    await Deno.writeTextFile(path, JSON.stringify({ providers: [{ ...GH, token_evn: "X" }] }), {
      mode: 0o600,
    });
    for (
      const args of [["fetch", "https://api.github.com/echo"], ["auth", "doctor"], [
        "auth",
        "explain",
        "https://api.github.com/",
      ]]
    ) {
      const r = await fk(args, path);
      assert.equal(r.code, 2, args.join(" "));
      assert.equal(
        r.stderr,
        `error: ${path} providers[0]: unknown key "token_evn" (did you mean "token_env"?)\n`,
      );
    }
    assert.equal(o.hits.length, before, "nothing was sent");
    // The default file is named as the README shows it, not as a bare "auth.json".
    const home = await Deno.makeTempDir({ dir });
    await Deno.mkdir(join(home, ".forgekit"));
    await Deno.copyFile(path, join(home, ".forgekit", "auth.json"));
    const named = await runForgekit(["auth", "doctor"], { env: { ...o.env, HOME: home } });
    assert.equal(named.code, 2);
    assert.equal(
      named.stderr,
      'error: ~/.forgekit/auth.json providers[0]: unknown key "token_evn" (did you mean "token_env"?)\n',
    );
    const missing = await fk([
      "fetch",
      "--auth-file",
      join(dir, "nope.json"),
      "https://api.github.com/echo",
    ], null);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^error: Cannot read .*nope\.json: no such file/);
  },
);

Deno.test("no token or URL password reaches stderr, even when it is malformed", opts, async () => {
  const file = await authFile([GH]);
  const S = "SECRETSECRET";
  // A line break inside the token: the entry is skipped, its value never printed.
  const nl = await fk(["fetch", "-v", "https://api.github.com/echo"], file, {
    GH_TOKEN: `ghp_${S}\nsecond-line`,
  });
  assert.equal(nl.code, 0, nl.stderr);
  assert.equal(nl.stdout, "auth=none\n");
  assert.match(
    nl.stderr,
    /skipped providers\[0\] \(codehost bearer\): \$GH_TOKEN holds a line break/,
  );
  // A password in the URL: masked in -v lines and in the error.
  const userinfo = await fk(
    ["fetch", "-v", `https://x-access-token:ghp_${S}@objects.storage.example/nothing`],
    null,
  );
  assert.equal(userinfo.code, 1);
  assert.match(
    userinfo.stderr,
    /^error: GET https:\/\/\*\*\*\*@objects\.storage\.example\/nothing returned 404 Not Found$/m,
  );
  // A malformed -H, an unquoted token in auth.json, a secret put where a variable name goes.
  const broken = join(dir, "unquoted.json");
  await Deno.writeTextFile(
    broken,
    `{"providers": [{"hosts": ["api.github.com"], "provider": "codehost", "auth": "bearer", "token": ghp_${S}}]}`,
    { mode: 0o600 },
  );
  const secretInName = await authFile([{
    hosts: ["dev.azure.com"],
    provider: "cloud-devops",
    auth: "cloud-ad",
    tenant_id: "t",
    client_id: "c",
    client_secret_env: `abc8Q~${S}`,
  }]);
  const usage: [string[], string | null][] = [
    [["fetch", "-H", `Authorization Bearer ghp_${S}`, "https://api.github.com/echo"], null],
    [["fetch", "https://api.github.com/echo"], broken],
    [["auth", "doctor"], secretInName],
  ];
  for (const [args, f] of usage) {
    const r = await fk(args, f);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.stderr, /^error: [^\n]+\n$/);
    assert.ok(!`${r.stdout}${r.stderr}`.includes("SECRET"), r.stderr);
  }
  for (const r of [nl, userinfo]) assert.ok(!r.stderr.includes("SECRET"), r.stderr);
});

Deno.test(
  "without a home directory auth.json is never read from the working directory",
  opts,
  async () => {
    const cwd = await Deno.makeTempDir({ dir });
    await Deno.mkdir(join(cwd, ".forgekit"));
    await Deno.writeTextFile(
      join(cwd, ".forgekit", "auth.json"),
      JSON.stringify({
        providers: [{
          hosts: ["objects.storage.example"],
          provider: "codehost",
          auth: "bearer",
          token_env: "GH_TOKEN",
        }],
      }),
      { mode: 0o600 },
    );
    const r = await runForgekit(["fetch", "https://objects.storage.example/echo"], {
      cwd,
      env: { ...o.env, HOME: "", GH_TOKEN: "planted-gets-it" },
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "auth=none\n");
  },
);

Deno.test("an auth file that is a directory is one clear line and exit 2", opts, async () => {
  const d = await Deno.makeTempDir({ dir });
  await Deno.chmod(d, 0o755);
  const r = await fk(["fetch", "--auth-file", d, "https://api.github.com/echo"], null);
  assert.equal(r.code, 2);
  assert.equal(
    r.stderr,
    `error: Cannot read ${d}: it is a directory (point --auth-file or FORGEKIT_AUTH_FILE at the auth.json file)\n`,
  );
});

Deno.test(
  "-X HEAD and -H on a release download go to the asset and storage; the metadata lookup stays a plain GET",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["ghe.corp.example"],
      provider: "codehost",
      auth: "bearer",
      token: "ghe-token",
    }]);
    const before = o.hits.length;
    const r = await fk([
      "fetch",
      "-X",
      "HEAD",
      "-H",
      "X-Trace: t1",
      "https://ghe.corp.example/org/tool/releases/download/v1/tool.bin",
    ], file);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "");
    const hits = o.hits.slice(before);
    assert.deepEqual(hits.map((h) => `${h.method} ${h.host}${h.path}`), [
      "GET ghe.corp.example/api/v3/repos/org/tool/releases/tags/v1",
      "HEAD ghe.corp.example/api/v3/repos/org/tool/releases/assets/42",
      "HEAD objects.storage.example/blob?sig=abc",
    ]);
    // The caller's own fields go with the asset request, not with the metadata lookup.
    assert.deepEqual(hits.map((h) => h.headers.get("x-trace")), [null, "t1", "t1"]);
  },
);

Deno.test(
  "auth explain lists no entries where fetch would use none, and says why",
  opts,
  async () => {
    const file = await authFile([{
      hosts: ["ghe.corp.example"],
      provider: "codehost",
      auth: "bearer",
      token: "ghe-token-1234",
    }]);
    const cases: [string, string, string][] = [
      [
        "http://ghe.corp.example/echo",
        "plain http:// to ghe.corp.example (not loopback)",
        "unauthenticated",
      ],
      [
        "https://me:pw@ghe.corp.example/echo",
        "the URL carries its own user name or password",
        "the URL's own user and password",
      ],
      ["ftp://ghe.corp.example/echo", "ftp: is neither https: nor http:", "unauthenticated"],
    ];
    for (const [url, why, then] of cases) {
      const r = await fk(["auth", "explain", url], file);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `auth.json's entries are not used: ${why}\n1. ${then}\n`, url);
      const j = JSON.parse((await fk(["auth", "explain", "--json", url], file)).stdout);
      assert.deepEqual([j.not_used, j.attempts, j.then], [why, [], then], url);
    }
    // fetch agrees: no token over plain http, none beside the URL's own password.
    assert.equal((await fk(["fetch", cases[0][0]], file)).stdout, "auth=none\n");
    assert.equal((await fk(["fetch", cases[1][0]], file)).stdout, `auth=Basic ${b64("me:pw")}\n`);
    const usable = JSON.parse(
      (await fk(["auth", "explain", "--json", "https://ghe.corp.example/echo"], file)).stdout,
    );
    assert.deepEqual([usable.not_used, usable.attempts.length], [null, 1]);
  },
);

Deno.test(
  "an auth.json host may be an IPv6 address in any spelling; fe80:: is never the host fe80",
  opts,
  async () => {
    let server: Deno.HttpServer<Deno.NetAddr>;
    try {
      server = Deno.serve(
        { hostname: "::1", port: 0, onListen() {} },
        (req) => new Response(`auth=${req.headers.get("authorization") ?? "none"}\n`),
      );
    } catch (err) {
      console.log(`skipped: no IPv6 loopback address here (${err})`);
      return;
    }
    try {
      for (const host of ["::1", "[::1]", "0:0:0:0:0:0:0:1"]) {
        const file = await authFile([{
          hosts: [host],
          provider: "codehost",
          auth: "bearer",
          token: "v6-token",
        }]);
        // Straight to the loopback server, not through the test proxy.
        const r = await runForgekit(["fetch", `http://[::1]:${server.addr.port}/`], {
          env: { FORGEKIT_AUTH_FILE: file },
        });
        assert.equal(r.code, 0, `${host}: ${r.stderr}`);
        assert.equal(r.stdout, "auth=Bearer v6-token\n", host);
      }
      const fe80 = await authFile([{
        hosts: ["fe80::"],
        provider: "codehost",
        auth: "bearer",
        token: "fe80-token",
      }]);
      const r = await fk(["auth", "explain", "--json", "https://fe80/"], fe80);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout).attempts, []);
    } finally {
      await server.shutdown();
    }
  },
);

Deno.test(
  "auth.json must be a regular file or a pipe of at most 4 MiB; a pipe gets no permission warning",
  opts,
  async () => {
    const big = join(dir, "big.json");
    await Deno.writeTextFile(
      big,
      JSON.stringify({ providers: [GH], "//": "x".repeat(5 * 1024 * 1024) }),
      { mode: 0o600 },
    );
    const cases: [string, RegExp][] = [
      ["/dev/zero", /^error: Cannot read \/dev\/zero: it is not a regular file or a pipe \(/],
      [big, /^error: Cannot read .*big\.json: it is larger than 4 MiB \(/],
    ];
    for (const [path, want] of cases) {
      const r = await runForgekit(["fetch", "--auth-file", path, "https://api.github.com/echo"], {
        env: o.env,
        timeoutMs: 20_000,
      });
      assert.equal(r.code, 2, `${path}: ${r.stderr.slice(0, 200)}`);
      assert.match(r.stderr, want);
      assert.equal(r.stderr.trimEnd().split("\n").length, 1);
    }
    // A pipe, as --auth-file <(command) gives: read once, and its mode means nothing.
    const fifo = join(dir, "auth.fifo");
    assert.equal(
      (await new Deno.Command("mkfifo", { args: ["-m", "644", fifo] }).output()).code,
      0,
    );
    const [r] = await Promise.all([
      fk(["fetch", "--auth-file", fifo, "https://api.github.com/echo"], null, {
        GH_TOKEN: "t-pipe",
      }),
      Deno.writeTextFile(fifo, JSON.stringify({ providers: [GH] })),
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "auth=Bearer t-pipe\n");
    assert.equal(r.stderr, "");
  },
);

Deno.test("teardown: auth test origins", opts, async () => {
  await o.close();
  await Deno.remove(dir, { recursive: true });
});
