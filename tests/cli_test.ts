import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit, runOnTerminal, spawnForgekit } from "./support/cli.ts";
import { startRawServer } from "./support/raw_server.ts";
import { clientEnv } from "./support/stacks_server.ts";
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

Deno.test("an option before the command is named as an option, not as a command", async () => {
  const r = await runForgekit(["-v", "fetch", "https://x.example/"]);
  assert.equal(r.code, 2);
  assert.equal(
    r.stderr,
    "error: Unknown option '-v' (options follow the command; run: forgekit help)\n",
  );
});

Deno.test("a bad stack or pull request number names the command's own example", async () => {
  const api = ["--repo", "o/r", "--api-url", "http://127.0.0.1:1"];
  const cases: [string[], string][] = [
    [["view", "x"], "e.g. forgekit stack view 3 --repo o/r"],
    [["unstack", "x"], "e.g. forgekit stack unstack 3 --repo o/r"],
    [["create", "1", "x"], "e.g. forgekit stack create 12 13 14 --repo o/r (bottom to top)"],
    [
      ["add", "x", "4"],
      "e.g. forgekit stack add 3 15 16 --repo o/r (stack 3 gets #15 and #16 on top)",
    ],
    [["list", "--pull-request", "x"], "e.g. --pull-request 12"],
  ];
  for (const [args, hint] of cases) {
    const r = await runForgekit(["stack", ...args, ...api]);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.stderr, /^error: .* must be a positive whole number \(got: "x"\) \(.*\)\n$/);
    assert.ok(r.stderr.endsWith(`(${hint})\n`), `${args.join(" ")}: ${r.stderr}`);
  }
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
    [["fetch", "-o", `${dir}/nodir/`, nowhere], /^error: -o .*\/nodir\/ names a directory/],
    [["fetch", "-m", "0", nowhere], /^error: --max-time must be a number of seconds from 0\.001/],
    [["fetch", "--max-time", "soon", nowhere], /^error: --max-time must be a number of seconds/],
    [["fetch", "--idle-timeout", "5m", nowhere], /^error: --idle-timeout must be a number/],
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
    [
      ["stacks", "serve", "--busy-timeout-ms", "nope", "--db", `${dir}/b/s.db`],
      /^error: --busy-timeout-ms must be a whole number from 0 to 600000 \(got: nope\)/,
    ],
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
      ["firewall", "--allow-domains", "x.example", "--", dir],
      /^error: Cannot run .*: is a directory \(name a program file\)/,
    ],
    [
      ["firewall", "--allow-domains", "x.example", "--", file],
      /^error: Cannot run .*: not executable \(chmod \+x /,
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

/** A loopback server counting its requests; `/slow` streams a chunk every 50 ms, forever. */
function startCountingServer() {
  const seen: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    seen.push(`${req.method} ${path}`);
    if (path === "/slow") {
      let timer: ReturnType<typeof setTimeout> | undefined;
      return new Response(
        new ReadableStream({
          pull: (c) =>
            new Promise((done) => {
              timer = setTimeout(() => done(c.enqueue(new Uint8Array(100).fill(120))), 50);
            }),
          cancel: () => clearTimeout(timer),
        }),
      );
    }
    return new Response(`body of ${path}\n`);
  });
  return { seen, base: `http://127.0.0.1:${server.addr.port}`, close: () => server.shutdown() };
}

async function listDir(dir: string): Promise<string[]> {
  const names = [];
  for await (const e of Deno.readDir(dir)) names.push(e.name);
  return names.sort();
}

Deno.test("fetch -o keeps an existing file's mode and writes through links, FIFOs and devices", async () => {
  const srv = startCountingServer();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const url = `${srv.base}/new`;
    // An existing owner-only file stays owner-only.
    const kept = join(dir, "kept.txt");
    await Deno.writeTextFile(kept, "old\n", { mode: 0o600 });
    await Deno.chmod(kept, 0o600);
    let r = await runForgekit(["fetch", url, "-o", kept]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await Deno.readTextFile(kept), "body of /new\n");
    assert.equal((await Deno.stat(kept)).mode! & 0o777, 0o600);

    // A symbolic link: the file it names is replaced, the link stays a link.
    await Deno.mkdir(join(dir, "real"));
    await Deno.writeTextFile(join(dir, "real", "target.txt"), "old\n");
    await Deno.symlink("real/target.txt", join(dir, "link.txt"));
    r = await runForgekit(["fetch", url, "-o", join(dir, "link.txt")]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok((await Deno.lstat(join(dir, "link.txt"))).isSymlink);
    assert.equal(await Deno.readTextFile(join(dir, "real", "target.txt")), "body of /new\n");

    // A dangling link: the file it names is created.
    await Deno.symlink("real/missing.txt", join(dir, "dangling.txt"));
    r = await runForgekit(["fetch", url, "-o", join(dir, "dangling.txt")]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok((await Deno.lstat(join(dir, "dangling.txt"))).isSymlink);
    assert.equal(await Deno.readTextFile(join(dir, "real", "missing.txt")), "body of /new\n");

    // A link to a device: written through; /dev/null stays a device and the link a link.
    await Deno.symlink("/dev/null", join(dir, "null"));
    r = await runForgekit(["fetch", url, "-o", join(dir, "null")]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok((await Deno.lstat(join(dir, "null"))).isSymlink);
    assert.ok((await Deno.stat("/dev/null")).isCharDevice, "/dev/null is still a device");

    // A FIFO: its reader gets the body, and it stays a FIFO.
    const fifo = join(dir, "fifo");
    assert.equal((await new Deno.Command("mkfifo", { args: [fifo] }).output()).code, 0);
    const reading = Deno.readTextFile(fifo);
    r = await runForgekit(["fetch", url, "-o", fifo]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await reading, "body of /new\n");
    assert.ok((await Deno.lstat(fifo)).isFifo);

    assert.deepEqual(
      (await listDir(dir)).filter((n) => n.endsWith(".tmp")),
      [],
      "no temporary file is left",
    );
  } finally {
    await srv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch -o that cannot be written is refused before anything is sent", async () => {
  const srv = startCountingServer();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    // /proc takes no new files, not even from root.
    const cases: [string, RegExp][] = [
      [join(dir, "nodir/"), /^error: -o .* names a directory/],
      ["/proc/forgekit-out.json", /^error: Cannot write \/proc\/forgekit-out\.json: /],
    ];
    for (const [out, want] of cases) {
      const r = await runForgekit([
        "fetch",
        "-X",
        "POST",
        "-d",
        "x",
        `${srv.base}/create`,
        "-o",
        out,
      ]);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, want);
      assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
    }
    assert.deepEqual(srv.seen, [], "no request was sent");
    assert.deepEqual(await listDir(dir), []);
  } finally {
    await srv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch -o takes any valid file name, however long", async () => {
  const srv = startCountingServer();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const name = `${"n".repeat(251)}.bin`; // 255 bytes: NAME_MAX
    const r = await runForgekit(["fetch", `${srv.base}/long`, "-o", join(dir, name)]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(await listDir(dir), [name]);
  } finally {
    await srv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch -o stopped by SIGINT, SIGTERM or SIGHUP exits 128+n and leaves no file", async () => {
  const srv = startCountingServer();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const cases: [Deno.Signal, number][] = [["SIGINT", 130], ["SIGTERM", 143], ["SIGHUP", 129]];
    for (const [signal, code] of cases) {
      const child = spawnForgekit(["fetch", `${srv.base}/slow`, "-o", join(dir, "out.bin")]);
      // Wait until the download is under way: a temporary file with bytes in it.
      for (let i = 0; i < 300; i++) {
        const tmp = (await listDir(dir)).find((n) => n.endsWith(".tmp"));
        if (tmp && (await Deno.stat(join(dir, tmp)).catch(() => null))?.size) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      child.kill(signal);
      const out = await child.output();
      assert.equal(out.code, code, `${signal}: ${new TextDecoder().decode(out.stderr)}`);
      assert.deepEqual(await listDir(dir), [], `${signal} left nothing behind`);
    }
  } finally {
    await srv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch --max-time and --idle-timeout end a silent server: one line naming the request, exit 1", async () => {
  const silent = startRawServer({ send: null, close: false });
  const stalled = startRawServer({
    send: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc",
    close: false,
  });
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const cases: [string[], RegExp][] = [
      [
        ["fetch", "-m", "1", silent.url],
        /^error: GET http:\/\/127\.0\.0\.1:\d+\/: not finished within 1 s \(--max-time 1; raise it/,
      ],
      [
        ["fetch", "-X", "POST", "--max-time", "1", stalled.url, "-o", join(dir, "out")],
        /^error: POST http:\/\/127\.0\.0\.1:\d+\/: not finished within 1 s \(--max-time 1;/,
      ],
      [
        ["fetch", "--idle-timeout", "1", silent.url],
        /^error: GET http:\/\/127\.0\.0\.1:\d+\/: nothing received for 1 s \(--idle-timeout 1;/,
      ],
      [
        ["fetch", "--idle-timeout", "0.5", stalled.url, "-o", join(dir, "out")],
        /^error: GET http:\/\/127\.0\.0\.1:\d+\/: nothing received for 0\.5 s \(--idle-timeout/,
      ],
    ];
    for (const [args, want] of cases) {
      const t0 = performance.now();
      const r = await runForgekit(args, { timeoutMs: 20_000 });
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, want);
      assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
      assert.ok(performance.now() - t0 < 15_000, `${args.join(" ")} stopped in time`);
    }
    assert.deepEqual(await listDir(dir), [], "no file or temporary file is left");
  } finally {
    silent.close();
    stalled.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch: a body cut short is one line naming the request, and leaves no file", async () => {
  const short = startRawServer({
    send: "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789",
    close: true,
  });
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    for (const extra of [[], ["-o", join(dir, "out")]]) {
      const r = await runForgekit(["fetch", short.url, ...extra]);
      assert.equal(r.code, 1, r.stderr);
      assert.match(
        r.stderr,
        /^error: GET http:\/\/127\.0\.0\.1:\d+\/ failed while reading the response body: .* \(the connection was closed/,
      );
      assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
    }
    assert.deepEqual(await listDir(dir), []);
  } finally {
    short.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fetch stops quietly when the reader of its stdout goes away", async () => {
  const chunk = new Uint8Array(1 << 16).fill(97);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    let left = 1024; // 64 MiB, far more than a pipe holds
    return new Response(
      new ReadableStream({
        pull: (c) => left-- > 0 ? c.enqueue(chunk) : c.close(),
      }),
    );
  });
  try {
    const child = spawnForgekit(["fetch", `http://127.0.0.1:${server.addr.port}/`]);
    const reader = child.stdout.getReader();
    await reader.read();
    await reader.cancel(); // as `| head -c 1` does
    const [status, stderr] = await Promise.all([child.status, new Response(child.stderr).text()]);
    assert.equal(status.code, 1);
    assert.equal(stderr, "");
  } finally {
    await server.shutdown();
  }
});

Deno.test("fetch -d @FILE streams the file with its Content-Length: memory stays below its size", async () => {
  const size = 512 * 1024 * 1024;
  let child: Deno.ChildProcess | undefined;
  let got = "";
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    let n = 0;
    for await (const c of req.body ?? []) n += c.length;
    // The peak resident memory of forgekit so far, read while it waits for this answer.
    const status = await Deno.readTextFile(`/proc/${child!.pid}/status`);
    const peak = Number(/^VmHWM:\s+(\d+) kB/m.exec(status)![1]) * 1024;
    got = `length=${req.headers.get("content-length")} chunked=${
      req.headers.has("transfer-encoding")
    } received=${n}`;
    return new Response(String(peak));
  });
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    const file = join(dir, "upload.bin");
    await Deno.writeFile(file, new Uint8Array(0));
    await Deno.truncate(file, size); // sparse: costs no disk
    child = spawnForgekit(["fetch", "-d", `@${file}`, `http://127.0.0.1:${server.addr.port}/`]);
    const out = await child.output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.equal(got, `length=${size} chunked=false received=${size}`);
    const peak = Number(new TextDecoder().decode(out.stdout));
    assert.ok(peak < size / 2, `peak memory ${peak >> 20} MiB for a ${size >> 20} MiB upload`);
  } finally {
    await server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("colours go only to a terminal: a report on stdout redirected to a file has none", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-colour-" });
  // A stack for `stack view` to draw.
  const ac = new AbortController();
  const api = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen() {} },
    (req) => {
      const path = new URL(req.url).pathname;
      if (path === "/repos/o/r/stacks/1") {
        return Response.json({
          number: 1,
          open: true,
          base: { ref: "main" },
          pull_requests: [{
            number: 7,
            state: "open",
            draft: false,
            merged_at: null,
            head: { ref: "feature" },
          }],
        });
      }
      if (path === "/repos/o/r/pulls/7") return Response.json({ number: 7, title: "Seven" });
      return Response.json({ message: "Not Found" }, { status: 404 });
    },
  );
  // An auth.json whose entry for 127.0.0.1 sends a token: the doctor reports it usable.
  const env = await clientEnv(dir, `http://127.0.0.1:${api.addr.port}`, "fks_colour_test_token");
  const authFile = env.FORGEKIT_AUTH_FILE;
  const ESC = "\x1b[";
  const commands: [string, string[]][] = [
    ["auth doctor", ["auth", "doctor", "--auth-file", authFile]],
    ["stack view", [
      "stack",
      "view",
      "1",
      "--repo",
      "o/r",
      "--api-url",
      `http://127.0.0.1:${api.addr.port}`,
      "--auth-file",
      authFile,
    ]],
  ];
  try {
    for (const [name, args] of commands) {
      // On the terminal, the report is coloured: the check below is not vacuous.
      const shown = await runOnTerminal(args, { env });
      assert.equal(shown.code, 0, `${name}: ${shown.terminal}`);
      assert.ok(shown.terminal.includes(ESC), `${name} colours a terminal: ${shown.terminal}`);
      // `forgekit … > file` with stderr still on the terminal: the file gets plain text.
      const redirected = await runOnTerminal(args, { env, stdoutToFile: true });
      assert.equal(redirected.code, 0, `${name}: ${redirected.terminal}`);
      assert.ok(redirected.file!.length > 0, name);
      assert.ok(!redirected.file!.includes(ESC), `${name} > file: ${redirected.file}`);
    }
  } finally {
    ac.abort();
    await api.finished;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("firewall: each run's default log directory is new and private; a linked access.log is refused", async () => {
  const dirs: string[] = [];
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cli-" });
  try {
    for (let i = 0; i < 2; i++) {
      const r = await runForgekit(
        ["firewall", "--no-sandbox", "--allow-domains", "x.example", "--", "true"],
      );
      assert.equal(r.code, 0, r.stderr);
      const path = /access log (\/tmp\/fw-logs-\d{8}-\d{6}-[0-9a-f]{8})\/access\.log$/m.exec(
        r.stderr,
      )?.[1];
      assert.ok(path, r.stderr);
      dirs.push(path);
      assert.equal((await Deno.stat(path)).mode! & 0o777, 0o700);
      assert.equal((await Deno.stat(`${path}/access.log`)).mode! & 0o777, 0o600);
    }
    // Two runs in the same second share nothing.
    assert.notEqual(dirs[0], dirs[1]);

    // Whoever may write to a --log-dir cannot turn the log onto another file.
    await Deno.mkdir(`${dir}/logs`);
    await Deno.writeTextFile(`${dir}/victim`, "precious\n");
    /** A linked FILE in --log-dir is refused (exit 2) before COMMAND starts, the target untouched. */
    const refusesLinked = async (file: string, what: string, options: string[]) => {
      await Deno.symlink(`${dir}/victim`, `${dir}/logs/${file}`);
      const r = await runForgekit(
        ["firewall", "--no-sandbox", "--allow-domains", "x.example", ...options]
          .concat(["--log-dir", `${dir}/logs`, "--", "sh", "-c", "echo ran > " + `${dir}/ran`]),
      );
      assert.equal(r.code, 2, r.stderr);
      assert.equal(
        r.stderr,
        `error: Cannot open the ${what}: ${dir}/logs/${file} is a symbolic link ` +
          "(remove it or choose another --log-dir)\n",
      );
      assert.equal(await Deno.readTextFile(`${dir}/victim`), "precious\n");
      assert.equal(await exists(`${dir}/ran`), false, "the command never started");
    };
    await refusesLinked("access.log", "access log", []);

    // So is the bodies log (--log-bodies).
    await Deno.remove(`${dir}/logs/access.log`);
    await refusesLinked("bodies.jsonl", "bodies log", ["--ssl-bump", "--log-bodies"]);
  } finally {
    for (const d of [...dirs, dir]) await Deno.remove(d, { recursive: true }).catch(() => {});
  }
});
