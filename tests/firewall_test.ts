/**
 * forgekit firewall end to end: real clients (curl, git, Deno fetch, python)
 * inside the sandbox, HTTPS and HTTP origins on loopback reached under real
 * names through a test upstream proxy (the firewall's own HTTPS_PROXY).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { denoDir, runForgekit, spawnForgekit } from "./support/cli.ts";
import { gitCgi, makeBareRepo } from "./support/git_server.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";

const repo = await makeBareRepo();
const o = await startOrigins(
  [
    "allowed.example",
    "sub.allowed.example",
    "bad.allowed.example",
    "other.example",
    "wild.example",
    "a.wild.example",
    "git.example",
  ],
  (req, hit) => {
    if (hit.host === "git.example") return gitCgi(req, repo.root);
    return new Response(`hello ${hit.host} ${hit.path}\n`);
  },
);
const plainPort = Number(new URL(o.proxy.url).port); // a port open on the host's loopback
const logDir = await Deno.makeTempDir({ prefix: "forgekit-fwlogs-" });

function firewall(args: string[], command: string[], extraEnv: Record<string, string> = {}) {
  return runForgekit(["firewall", "--log-dir", logDir, ...args, "--", ...command], {
    env: { ...o.env, PATH: Deno.env.get("PATH")!, ...extraEnv },
    timeoutMs: 60_000,
  });
}

const sh = (script: string) => ["sh", "-c", script];
const curl = `curl -sS -m 10 --cacert ${o.ca.certPath}`;

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
  "allowed domains and subdomains pass; others get 403 with X-Proxy-Error; *. skips the apex; block beats allow",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const before = sessionDirs();
    const r = await firewall(
      [
        "--allow-domains",
        "allowed.example,*.wild.example",
        "--block-domains",
        "bad.allowed.example",
      ],
      sh([
        `echo "1 $(${curl} https://allowed.example/a)"`,
        `echo "2 $(${curl} https://sub.allowed.example/b)"`,
        `echo "3 $(${curl} http://allowed.example/c)"`,
        `echo "4 $(${curl} -o /dev/null -w '%{http_connect}' https://other.example/ 2>/dev/null)"`,
        `echo "5 $(${curl} -v -o /dev/null https://other.example/ 2>&1 | grep -i '^< x-proxy-error' | tr -d '\\r')"`,
        `echo "6 $(${curl} -o /dev/null -w '%{http_code}' http://other.example/)"`,
        `echo "7 $(${curl} https://a.wild.example/d)"`,
        `echo "8 $(${curl} -o /dev/null -w '%{http_connect}' https://wild.example/ 2>/dev/null)"`,
        `echo "9 $(${curl} -o /dev/null -w '%{http_connect}' https://bad.allowed.example/ 2>/dev/null)"`,
        `echo "10 $(${curl} -s http://other.example/ )"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split("\n");
    assert.deepEqual(lines, [
      "1 hello allowed.example /a",
      "2 hello sub.allowed.example /b",
      "3 hello allowed.example /c",
      "4 403",
      "5 < X-Proxy-Error: blocked-by-domain-policy",
      "6 403",
      "7 hello a.wild.example /d",
      "8 403",
      "9 403",
      "10 forgekit firewall blocked other.example: no-rule (add it to --allow-domains (and remove it from --block-domains))",
    ]);
    assert.match(r.stderr, /forgekit firewall: blocked requests:\n {2}other\.example {2}4\n/);
    assert.match(
      r.stderr,
      /to allow them: --allow-domains allowed\.example,\*\.wild\.example,other\.example,wild\.example/,
    );
    assert.match(
      r.stderr,
      new RegExp(`forgekit firewall: access log ${join(logDir, "access.log")}`),
    );
    assert.deepEqual(sessionDirs(), before, "the session directory is removed");
  },
);

Deno.test(
  "SNI unlike the CONNECT host, IP-literal CONNECTs and other ports are refused",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "allowed.example"],
      sh([
        // CONNECT allowed.example:443 but a ClientHello for other.example.
        `${curl} --connect-to other.example:443:allowed.example:443 https://other.example/ >/dev/null 2>&1; echo "sni $?"`,
        `echo "ip $(${curl} -o /dev/null --noproxy '' -w '%{http_connect}' https://127.0.0.1/ 2>/dev/null)"`,
        `echo "port $(${curl} -o /dev/null -w '%{http_connect}' https://allowed.example:8443/ 2>/dev/null)"`,
        `echo "port-header $(${curl} -v -o /dev/null https://allowed.example:8443/ 2>&1 | grep -i '^< x-proxy-error' | tr -d '\\r')"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout;
    assert.match(out, /^sni (35|56|52)$/m, "the TLS handshake is cut off");
    assert.match(out, /^ip 403$/m);
    assert.match(out, /^port 403$/m);
    assert.match(out, /^port-header < X-Proxy-Error: blocked-by-port$/m);
    const log = readLog();
    const sni = log.findLast((e) => e.rule === "sni-mismatch")!;
    assert.equal(sni.host, "allowed.example");
    assert.equal(sni.decision, "blocked");
    assert.match(String(sni.reason), /SNI other\.example is not the CONNECT host allowed\.example/);
    assert.ok(log.some((e) => e.rule === "ip-literal" && e.host === "127.0.0.1"));
    assert.ok(log.some((e) => e.rule === "port:8443"));
    assert.equal(
      o.hits.filter((h) => h.host === "other.example").length,
      0,
      "nothing reached other.example",
    );
  },
);

Deno.test(
  "inside, direct TCP to an open host port, DNS and UDP all fail",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "allowed.example"],
      sh([
        `curl -sS -m 5 --noproxy '*' http://127.0.0.1:${plainPort}/ >/dev/null 2>&1; echo "tcp $?"`,
        `python3 -c "import socket; socket.gethostbyname('allowed.example')" 2>/dev/null; echo "dns $?"`,
        `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('1.1.1.1', 53))" 2>/dev/null; echo "udp $?"`,
      ].join("; ")),
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^tcp 7$/m, "connection refused: the host's loopback is not reachable");
    assert.match(r.stdout, /^dns [1-9]\d*$/m);
    assert.match(r.stdout, /^udp [1-9]\d*$/m);
  },
);

Deno.test(
  "git ls-remote over smart HTTP and a Deno fetch script work through the proxy",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "git.example,allowed.example"],
      sh([
        `git ls-remote http://git.example/repo.git`,
        `${Deno.execPath()} eval "const r = await fetch('https://allowed.example/deno'); console.log('deno', r.status, (await r.text()).trim())"`,
        `${Deno.execPath()} eval "try { await fetch('https://other.example/'); console.log('other ok') } catch (e) { console.log('other refused') }"`,
      ].join(" && ")),
      { GIT_TERMINAL_PROMPT: "0" },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^${repo.sha}\\tHEAD$`, "m"));
    assert.match(r.stdout, /^deno 200 hello allowed\.example \/deno$/m);
    assert.match(r.stdout, /^other refused$/m);
    const log = readLog();
    const git = log.findLast((e) => e.host === "git.example")!;
    for (
      const k of [
        "time",
        "method",
        "host",
        "port",
        "url",
        "decision",
        "rule",
        "status",
        "bytes_out",
        "bytes_in",
        "duration_ms",
      ]
    ) {
      assert.ok(k in git, k);
    }
    assert.equal(git.decision, "allowed");
    assert.equal(git.rule, "allow-domains:git.example");
    assert.equal(git.status, 200);
    assert.match(String(git.url), /^http:\/\/git\.example\/repo\.git\//);
    assert.ok(Number(git.bytes_in) > 0);
    const https = log.findLast((e) => e.host === "allowed.example" && e.method === "CONNECT")!;
    assert.deepEqual([https.decision, https.port, https.scheme], ["allowed", 443, "https"]);
  },
);

Deno.test(
  "the exit status passes through; SIGTERM gives 143 and removes the session directory",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(["--allow-domains", "allowed.example"], sh("exit 7"));
    assert.equal(r.code, 7);
    const before = sessionDirs();
    const child = spawnForgekit([
      "firewall",
      "--log-dir",
      logDir,
      "--allow-domains",
      "allowed.example",
      "--",
      "sleep",
      "30",
    ], {
      env: { ...o.env, PATH: Deno.env.get("PATH")! },
    });
    // Wait until the sandbox runs COMMAND.
    const end = Date.now() + 20_000;
    let running = false;
    while (!running && Date.now() < end) {
      running = sessionDirs().filter((d) => !before.includes(d)).some((d) => {
        try {
          return Deno.statSync(`/tmp/${d}/sandbox-ready`).isFile;
        } catch {
          return false;
        }
      });
      if (!running) await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(running, "the sandbox started");
    child.kill("SIGTERM");
    const status = await child.output();
    assert.equal(status.code, 143, new TextDecoder().decode(status.stderr));
    assert.deepEqual(sessionDirs(), before, "the session directory is gone after SIGTERM");
  },
);

Deno.test(
  "other firewall sessions' directories are hidden inside the sandbox",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const other = await Deno.makeTempDir({ dir: "/tmp", prefix: "fw-other-" });
    await Deno.writeTextFile(join(other, "ca-key.pem"), "secret");
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example"],
        sh(`cat ${other}/ca-key.pem; echo "rc $?"`),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^rc 1$/m);
      assert.doesNotMatch(r.stdout, /secret/);
      assert.equal(
        await Deno.readTextFile(join(other, "ca-key.pem")),
        "secret",
        "the host's file is untouched",
      );
    } finally {
      await Deno.remove(other, { recursive: true });
    }
  },
);

Deno.test(
  "invoked through sudo, COMMAND runs as SUDO_UID/SUDO_GID, not as root",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(["--allow-domains", "allowed.example"], sh("id -u; id -g"), {
      SUDO_UID: "65534",
      SUDO_GID: "65534",
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "65534\n65534\n");
  },
);

Deno.test(
  "other runs' directories that come and go while the sandbox is set up do not stop it",
  needsNamespaces,
  async () => {
    assertNamespaces();
    // Other firewall runs starting and ending meanwhile: /tmp/fw-* directories
    // that exist when the sandbox lists them and are gone when it hides them.
    let churning = true;
    const churn = (async () => {
      for (let i = 0; churning; i++) {
        const dirs = Array.from({ length: 20 }, (_, k) => `/tmp/fw-churn-${Deno.pid}-${i}-${k}`);
        for (const d of dirs) Deno.mkdirSync(d);
        await new Promise((r) => setTimeout(r, 2));
        for (const d of dirs) Deno.removeSync(d);
      }
    })();
    try {
      for (let run = 0; run < 4; run++) {
        const r = await firewall(["--allow-domains", "allowed.example"], sh("echo ran"));
        assert.equal(r.code, 0, r.stderr);
        assert.equal(r.stdout, "ran\n");
      }
    } finally {
      churning = false;
      await churn;
    }
  },
);

Deno.test("--no-sandbox warns and runs COMMAND with only the proxy variables", {
  sanitizeResources: false,
  sanitizeOps: false,
}, async () => {
  const r = await firewall(
    ["--no-sandbox", "--allow-domains", "allowed.example"],
    sh(
      `echo "$HTTPS_PROXY"; ${curl} https://allowed.example/ns; echo "$(${curl} -o /dev/null -w '%{http_connect}' https://other.example/ 2>/dev/null)"`,
    ),
  );
  assert.equal(r.code, 0, r.stderr);
  const [proxy, ok, blocked] = r.stdout.trim().split("\n");
  assert.match(proxy, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(ok, "hello allowed.example /ns");
  assert.equal(blocked, "403");
  assert.match(
    r.stderr,
    /^warning: --no-sandbox: COMMAND runs without isolation; a program that ignores the proxy variables bypasses the filter$/m,
  );
});

Deno.test("bad options are one-line usage errors with exit 2, before anything runs", async () => {
  const cases: [string[], RegExp][] = [
    [
      ["--allow-domains", "*.com"],
      /^error: --allow-domains: "\*\.com" is not a valid domain: matches everything or a whole top-level domain \(use example\.com/,
    ],
    [
      ["--allow-domains", "a,,b.example"],
      /^error: --allow-domains: "" is not a valid domain: empty entry/,
    ],
    [
      ["--block-domains", "a..b"],
      /^error: --block-domains: "a\.\.b" is not a valid domain: double dots/,
    ],
    [
      ["--allow-domains", "x.example", "--allow-urls", "https://x.example/a"],
      /^error: --allow-urls needs --ssl-bump/,
    ],
    [["--log-level", "loud"], /^error: --log-level must be one of debug, info, warn, error/],
    [["--allow-domains", "x.example"], /^error: Missing the command to run/],
  ];
  for (const [args, want] of cases) {
    const r = await runForgekit([
      "firewall",
      ...args,
      ...(want.source.includes("Missing") ? [] : ["--", "true"]),
    ]);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.stderr, want);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

Deno.test(
  "teardown: firewall test origins",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    await o.close();
    await Deno.remove(logDir, { recursive: true });
    await Deno.remove(repo.root, { recursive: true });
  },
);

/**
 * A Deno cache as a first run through the lockfile leaves it: every locked
 * package's files, but the registry's package metadata only for the
 * packages deno.json names (none for their dependencies).
 */
async function coldDenoDir(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-denodir-" });
  const src = join(denoDir(), "npm", "registry.npmjs.org");
  const dst = join(dir, "npm", "registry.npmjs.org");
  const lock = JSON.parse(await Deno.readTextFile(new URL("../deno.lock", import.meta.url)));
  const named = new Set(
    Object.keys(lock.specifiers).map((s) => s.replace(/^npm:/, "").replace(/@[^@]*$/, "")),
  );
  for (const key of Object.keys(lock.npm)) {
    const base = key.split("_")[0]; // "pkijs@4.0.0_asn1js@4.0.0": peers after "_"
    const at = base.lastIndexOf("@");
    const [name, version] = [base.slice(0, at), base.slice(at + 1)];
    await Deno.mkdir(join(dst, name), { recursive: true });
    await copyTree(join(src, name, version), join(dst, name, version));
    if (named.has(name)) {
      await Deno.copyFile(join(src, name, "registry.json"), join(dst, name, "registry.json"));
    }
  }
  return dir;
}

async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isDirectory) await copyTree(join(from, e.name), join(to, e.name));
    else await Deno.copyFile(join(from, e.name), join(to, e.name));
  }
}

Deno.test(
  "the sandbox starts on a cold Deno cache: the forgekit inside resolves packages through the lockfile, offline",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const cache = await coldDenoDir();
    try {
      // Before: the inner run ignored the lockfile, needed @peculiar/utils' metadata from
      // the registry, and the sandbox (no network) could not be made.
      const r = await firewall(["--allow-domains", "allowed.example"], sh("echo inside"), {
        DENO_DIR: cache,
      });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "inside\n");
      assert.doesNotMatch(r.stderr, /Download|Failed loading/);
    } finally {
      await Deno.remove(cache, { recursive: true });
    }
  },
);
