import assert from "node:assert/strict";
import { runForgekit } from "./support/cli.ts";
import denoJson from "../deno.json" with { type: "json" };

Deno.test("forgekit --version prints the version from deno.json", async () => {
  const r = await runForgekit(["--version"]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout.trim(), `forgekit ${denoJson.version}`);
});

Deno.test("forgekit help and --help list the commands and exit 0", async () => {
  for (const args of [["help"], ["--help"], ["-h"]]) {
    const r = await runForgekit(args);
    assert.equal(r.code, 0, args.join(" "));
    assert.match(r.stdout, /Usage: forgekit <command>/);
    for (const name of ["fetch", "auth", "stacks", "stack", "firewall"]) {
      assert.match(r.stdout, new RegExp(`^  ${name} `, "m"), `help lists ${name}`);
    }
  }
});

Deno.test("forgekit with no command prints help on stderr and exits 2", async () => {
  const r = await runForgekit([]);
  assert.equal(r.code, 2);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /Usage: forgekit/);
});

Deno.test("an unknown command is a one-line usage error with exit 2", async () => {
  const r = await runForgekit(["frobnicate"]);
  assert.equal(r.code, 2);
  assert.equal(r.stderr, "error: Unknown command: frobnicate (run: forgekit help)\n");
});

Deno.test("every command answers --help and `forgekit help <command>` with exit 0", async () => {
  for (const name of ["fetch", "auth", "stacks", "stack", "firewall"]) {
    const a = await runForgekit([name, "--help"]);
    assert.equal(a.code, 0, `${name} --help: ${a.stderr}`);
    assert.match(a.stdout, new RegExp(`forgekit ${name}`));
    const b = await runForgekit(["help", name]);
    assert.equal(b.code, 0);
    assert.equal(b.stdout, a.stdout);
  }
});

/** A loopback port that nothing listens on (bound, then closed). */
function closedPort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("bad arguments get one line on stderr and exit 2, before anything runs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  const file = `${dir}/file`;
  await Deno.writeTextFile(file, "not a certificate\n");
  const nowhere = `http://127.0.0.1:${closedPort()}/x`;
  const api = ["--repo", "o/r", "--api-url", nowhere];
  const cases: [string[], RegExp][] = [
    // parseArgs errors: the first sentence once, not again as the cause
    [
      ["fetch", "--bogus", nowhere],
      /^error: Unknown option '--bogus' \(run: forgekit fetch --help\)\n$/,
    ],
    [["fetch", "-o", "-v", nowhere], /^error: Option '-o' argument is ambiguous \(run: /],
    // repeated and empty options
    [
      ["fetch", "-o", `${dir}/a`, "-o", `${dir}/b`, nowhere],
      /^error: --output is given more than once/,
    ],
    [["fetch", "-o", "", nowhere], /^error: --output must not be empty/],
    [["fetch", "--auth-file", "", nowhere], /^error: --auth-file must not be empty/],
    [["fetch", "-v", "-v", nowhere], /^error: --verbose is given more than once/],
    [["fetch", ""], /^error: Not a URL \(got: ""\)/],
    // -o is checked before the request
    [["fetch", "-o", dir, nowhere], /^error: -o .* is a directory/],
    [
      ["fetch", "-o", `${dir}/missing/out`, nowhere],
      /^error: -o .*: the directory .* does not exist/,
    ],
    [["fetch", "-o", `${file}/out`, nowhere], /^error: -o .*: .* is not a directory/],
    // auth
    [["auth", "doctor", "extra"], /^error: Unexpected argument: extra/],
    [["auth", "doctor"], /^error: No auth file at ~\/\.forgekit\/auth\.json: every request is /],
    [
      ["auth", "init", "extra", "--auth-file", `${dir}/x.json`],
      /^error: Unexpected argument: extra/,
    ],
    [["auth", "git-credential", "get", "extra"], /^error: Unexpected argument: extra/],
    [["auth", "help", "bogus"], /^error: Unknown command: forgekit auth bogus/],
    [["auth", "constructor"], /^error: Unknown command: forgekit auth constructor/],
    [["stack", "toString"], /^error: Unknown command: forgekit stack toString/],
    [
      ["stacks", "token", "hasOwnProperty"],
      /^error: Unknown command: forgekit stacks token hasOwn/,
    ],
    [["auth", "init", "--auth-file", dir], /^error: .* is a directory/],
    [
      ["auth", "init", "--auth-file", `${file}/x.json`],
      /^error: Cannot create .*: .* is not a directory/,
    ],
    [["auth", "init", "--auth-file", `${dir}/new/sub/`], /^error: .* is a directory path/],
    // stacks
    [["stacks", "serve", "--db", ""], /^error: --db must not be empty/],
    [["stacks", "serve", "--port", "1", "--port", "2"], /^error: --port is given more than once/],
    [
      ["stacks", "serve", "--hook-backoff-ms", "0"],
      /^error: --hook-backoff-ms must be a whole number from 1 to/,
    ],
    [
      ["stacks", "serve", "--host", "not a host", "--port", "0", "--db", `${dir}/h/s.db`],
      /^error: --host "not a host" is not an address to listen on/,
    ],
    [["stacks", "token", "create", "--user", "a", "--db", ""], /^error: --db must not be empty/],
    [
      ["stacks", "token", "create", "--user", "a", "--db", `${file}/s.db`],
      /^error: Cannot open database/,
    ],
    // stack
    [["stack", "help", "bogus"], /^error: Unknown command: forgekit stack bogus/],
    [
      ["stack", "list", "--repo", "o/r?x=1", "--api-url", nowhere],
      /^error: --repo must be OWNER\/REPO/,
    ],
    [
      ["stack", "list", "--repo", "../..", "--api-url", nowhere],
      /^error: --repo must be OWNER\/REPO/,
    ],
    [["stack", "list", "extra", ...api], /^error: Unexpected argument: extra/],
    [["stack", "list", "--pull-request", "", ...api], /^error: --pull-request must not be empty/],
    [["stack", "list", ...api, "--repo", "o/s"], /^error: --repo is given more than once/],
    [["stack", "view", "1e3", ...api], /^error: The stack number must be a positive whole number/],
    [["stack", "view", "0x10", ...api], /^error: The stack number must be a positive whole number/],
    [["stack", "view", " 5", ...api], /^error: The stack number must be a positive whole number/],
    [["stack", "view", "99999999999999999999", ...api], /^error: The stack number must be/],
    [["stack", "create", ...api], /^error: Missing the pull requests/],
    [["stack", "add", "3", ...api], /^error: Expected a stack number and pull requests/],
    [
      ["stack", "list", "--repo", "o/r", "--api-url", "ftp://127.0.0.1/"],
      /^error: --api-url must be/,
    ],
    [
      ["stack", "list", "--repo", "o/r", "--api-url", "http://me:ghp_SECRETSECRET@127.0.0.1:1"],
      /^error: --api-url must not contain a user name or password/,
    ],
    // firewall
    [["firewall", "--ssl-bump", "--", "true"], /^error: --ssl-bump needs --allow-domains/],
    [
      [
        "firewall",
        "--allow-domains",
        "x.example",
        "--ssl-bump",
        "--allow-urls",
        "https://x.example:8443/**",
        "--",
        "true",
      ],
      /^error: --allow-urls https:\/\/x\.example:8443\/\*\* names port 8443, which the firewall never connects to \(only 80 and 443\)/,
    ],
    [["firewall", "--log-dir", "", "--", "true"], /^error: --log-dir must not be empty/],
    [
      ["firewall", "--log-level", "debug", "--log-level", "info", "--", "true"],
      /^error: --log-level is given more than once/,
    ],
    [
      [
        "firewall",
        "--allow-domains",
        "x.example",
        "--log-dir",
        `${dir}/logs`,
        "--",
        "no-such-cmd-x",
      ],
      /^error: Cannot run no-such-cmd-x: command not found/,
    ],
    [
      ["firewall", "--allow-domains", "x.example", "--", ""],
      /^error: The command after -- is empty/,
    ],
    [
      [
        "firewall",
        "--allow-domains",
        "x.example",
        "--ssl-bump",
        "--upstream-ca",
        file,
        "--",
        "true",
      ],
      /^error: --upstream-ca .* has no PEM certificate/,
    ],
  ];
  try {
    const wrong: string[] = [];
    for (const [args, want] of cases) {
      // A case that is not refused may start a server: it is killed after 10 s.
      const r = await runForgekit(args, { cwd: dir, timeoutMs: 10_000 });
      const ok = r.code === 2 && r.stdout === "" && want.test(r.stderr) &&
        r.stderr.trimEnd().split("\n").length === 1 && !/SECRETSECRET/.test(r.stderr);
      if (!ok) wrong.push(`${JSON.stringify(args)} => exit ${r.code}: ${r.stderr}${r.stdout}`);
    }
    assert.deepEqual(wrong, []);
    // Nothing was left behind by any of them.
    const left = [];
    for await (const e of Deno.readDir(dir)) left.push(e.name);
    assert.deepEqual(left.sort(), ["file"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("stacks serve that cannot listen leaves no database or directory behind", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const r = await runForgekit([
      "stacks",
      "serve",
      "--port",
      String((busy.addr as Deno.NetAddr).port),
      "--db",
      `${dir}/new/sub/stacks.db`,
    ]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^error: Cannot listen on 127\.0\.0\.1:\d+: .* \(pick another --port/);
    assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
    assert.equal(await exists(`${dir}/new`), false, "the db's directory was not left behind");
  } finally {
    busy.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch -d '' still sends an empty body (an empty value is allowed there)", async () => {
  let got: [string, string] | null = null;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    got = [req.method, await req.text()];
    return new Response("ok");
  });
  try {
    const r = await runForgekit(["fetch", "-d", "", `http://127.0.0.1:${server.addr.port}/`]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(got, ["POST", ""]);
  } finally {
    await server.shutdown();
  }
});

Deno.test("forgekit stack against a broken server: one line naming the server, exit 1", async () => {
  const answers: Record<string, () => Response> = {
    "/html": () => new Response("<html>login</html>", { headers: { "content-type": "text/html" } }),
    "/empty": () => new Response(""),
    "/shape": () => Response.json({ unexpected: true }),
    "/s401": () => Response.json({ message: "Bad credentials" }, { status: 401 }),
    "/s404": () => Response.json({ message: "Not Found" }, { status: 404 }),
    "/s422": () =>
      Response.json({ message: "Validation Failed", errors: [{ message: "Nope" }] }, {
        status: 422,
      }),
    "/s500": () => new Response("Internal crash\n  at x.ts:1", { status: 500 }),
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const key = "/" + new URL(req.url).pathname.split("/")[1];
    return answers[key]?.() ?? new Response("?", { status: 418 });
  });
  // Not HTTP at all: a line of bytes, then close.
  const raw = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  (async () => {
    for await (const c of raw) {
      await c.write(new TextEncoder().encode("garbage\r\n\r\n")).catch(() => {});
      c.close();
    }
  })();
  const base = `http://127.0.0.1:${server.addr.port}`;
  const cases: [string, RegExp][] = [
    [
      `http://127.0.0.1:${closedPort()}`,
      /^error: Cannot reach .* \(is the server running\? check --api-url/,
    ],
    [`http://127.0.0.1:${(raw.addr as Deno.NetAddr).port}`, /^error: Cannot reach /],
    [`${base}/html`, /^error: .* returned 200 with a body that is not JSON \(check --api-url/],
    [`${base}/empty`, /^error: .* returned 200 with a body that is not JSON \(check --api-url/],
    [`${base}/shape`, /^error: .* did not return (a stack|stacks) \(check --api-url/],
    [`${base}/s401`, /^error: Bad credentials \(.* returned 401; check the token/],
    [`${base}/s404`, /^error: Not Found \(.* returned 404; check --repo/],
    [`${base}/s422`, /^error: Validation Failed: Nope \(.* returned 422\)/],
    [`${base}/s500`, /^error: 500 Internal Server Error \(.* returned 500; the server failed/],
  ];
  const wrong: string[] = [];
  try {
    for (const [url, want] of cases) {
      for (const cmd of [["list"], ["view", "1"], ["unstack", "1"]]) {
        const r = await runForgekit(["stack", ...cmd, "--repo", "o/r", "--api-url", url]);
        const ok = r.code === 1 && r.stdout === "" && want.test(r.stderr) &&
          r.stderr.includes(url) && r.stderr.trimEnd().split("\n").length === 1;
        if (!ok) wrong.push(`${cmd[0]} ${url} => exit ${r.code}: ${r.stderr}${r.stdout}`);
      }
    }
    assert.deepEqual(wrong, []);
  } finally {
    raw.close();
    await server.shutdown();
  }
});

Deno.test("firewall refuses an HTTPS_PROXY that is not an HTTP proxy, at start and without echoing its password", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const r = await runForgekit(
      ["firewall", "--allow-domains", "x.example", "--log-dir", `${dir}/logs`, "--", "true"],
      { env: { HTTPS_PROXY: "socks5://me:SECRETSECRET@socks.corp:1080" } },
    );
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      /^error: HTTPS_PROXY names a socks5 proxy \(socks5:\/\/socks\.corp:1080\); forgekit chains through HTTP proxies only \(set HTTPS_PROXY to the http:\/\/HOST:PORT of an HTTP proxy, or unset it\)\n$/,
    );
    assert.doesNotMatch(r.stderr, /SECRETSECRET/);
    assert.equal(await exists(`${dir}/logs`), false, "nothing was started");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
