/**
 * forgekit firewall end to end: real clients (curl, git, Deno fetch, python)
 * inside the sandbox, HTTPS and HTTP origins on loopback reached under real
 * names through a test upstream proxy (the firewall's own HTTPS_PROXY).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { findCommand } from "../lib/cli/mod.ts";
import { baseEnv, denoDir, MAIN_TS, runForgekit, spawnForgekit } from "./support/cli.ts";
import { gitCgi, makeBareRepo } from "./support/git_server.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";
import { removeStaleSessions } from "../lib/bump/session.ts";

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
    // An address (TEST-NET-2), reached only through the test proxy's route to loopback.
    "198.51.100.7",
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

/** `forgekit firewall --ssl-bump` allowing allowed.example, running in the background. */
function spawnBumpFirewall(command: string[]): Deno.ChildProcess {
  return spawnForgekit(
    [
      "firewall",
      "--log-dir",
      logDir,
      "--allow-domains",
      "allowed.example",
      "--ssl-bump",
      "--",
      ...command,
    ],
    { env: { ...o.env, PATH: Deno.env.get("PATH")! } },
  );
}
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
      "10 forgekit firewall blocked other.example: no-rule (add it to --allow-domains)",
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
  "the exit status passes through; SIGTERM gives 143, SIGHUP 129, and both remove the session directory",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(["--allow-domains", "allowed.example"], sh("exit 7"));
    assert.equal(r.code, 7);
    for (const [signal, code] of [["SIGTERM", 143], ["SIGHUP", 129]] as const) {
      const before = sessionDirs();
      const child = spawnBumpFirewall(["sleep", "30"]);
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
      child.kill(signal);
      const status = await child.output();
      assert.equal(status.code, code, new TextDecoder().decode(status.stderr));
      assert.deepEqual(sessionDirs(), before, `the session directory is gone after ${signal}`);
    }
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
    // sudo sets HOME, USER and LOGNAME to root's, where the user can write nothing.
    const r = await firewall(
      ["--allow-domains", "allowed.example"],
      sh('id -u; id -g; echo "$HOME $USER $LOGNAME"'),
      { SUDO_UID: "65534", SUDO_GID: "65534", HOME: "/root", USER: "root", LOGNAME: "root" },
    );
    assert.equal(r.code, 0, r.stderr);
    const passwd = new TextDecoder().decode(
      new Deno.Command("getent", { args: ["passwd", "65534"], stdout: "piped" }).outputSync()
        .stdout,
    ).trim().split(":");
    assert.equal(r.stdout, `65534\n65534\n${passwd[5]} ${passwd[0]} ${passwd[0]}\n`);
  },
);

Deno.test(
  "SUDO_UID without SUDO_GID is not taken for sudo: COMMAND is root, with root's HOME",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "allowed.example"],
      sh('id -u; echo "$HOME $USER $LOGNAME"'),
      { SUDO_UID: "65534", HOME: "/root", USER: "root", LOGNAME: "root" },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "0\n/root root root\n");
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

/** A listener on the host's loopback that counts the connections that reached it. */
function canary(): { port: number; hits(): number; close(): void } {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let hits = 0;
  (async () => {
    for await (const c of l) {
      hits++;
      c.close();
    }
  })().catch(() => {});
  return { port: (l.addr as Deno.NetAddr).port, hits: () => hits, close: () => l.close() };
}

/** Host processes whose command line is exactly `argv`. */
function processesRunning(argv: string[]): number[] {
  const want = argv.join("\0") + "\0";
  const pids: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      if (Deno.readTextFileSync(`/proc/${e.name}/cmdline`) === want) pids.push(Number(e.name));
    } catch { /* gone */ }
  }
  return pids;
}

Deno.test(
  "run as root, COMMAND cannot enter the host's network namespace, uncover the key or change kernel settings",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const host = canary();
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example", "--ssl-bump"],
        sh([
          // Every network namespace it can name (forgekit's is the host's).
          `n=0; for p in /proc/[0-9]*; do nsenter --net="$p/ns/net" curl -s -m 3 --noproxy '*' -o /dev/null http://127.0.0.1:${host.port}/ 2>/dev/null && n=$((n+1)); done; echo "entered $n"`,
          // The key directory: hidden by a mount, which must stay put; and as seen by other processes.
          `for d in /tmp/fw-[0-9]*/ssl; do umount "$d" 2>/dev/null; cat "$d/ca-key.pem" 2>/dev/null; done`,
          `cat /proc/[0-9]*/root/tmp/fw-[0-9]*/ssl/ca-key.pem 2>/dev/null`,
          `[ -w /proc/sys/kernel/hostname ] && echo "sysctl writable"`,
          `[ -w /sys/kernel ] && echo "sysfs writable"`,
          `ip link set lo mtu 60000 2>/dev/null && echo "link changed"`,
          `echo done`,
        ].join("; ")),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^entered 0$/m);
      assert.doesNotMatch(r.stdout, /PRIVATE KEY/);
      assert.doesNotMatch(r.stdout, /link changed|sysctl writable|sysfs writable/);
      assert.match(r.stdout, /^done$/m);
      assert.equal(host.hits(), 0, "nothing reached the host's loopback");
    } finally {
      host.close();
    }
  },
);

Deno.test(
  "the upstream proxy's password is not readable inside the sandbox",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "allowed.example"],
      sh(
        `grep -rls 'pw-cana[r]y' /tmp/fw-[0-9]*/ /proc/[0-9]*/environ 2>/dev/null | wc -l; ${curl} https://allowed.example/pw`,
      ),
      { HTTPS_PROXY: o.proxy.url.replace("http://", "http://user:pw-canary@") },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "0\nhello allowed.example /pw\n");
  },
);

Deno.test(
  "a process COMMAND leaves running ends with the sandbox; orphans that exit are reaped",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const daemon = ["sleep", `3600.${Deno.pid}`];
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example"],
        sh(
          `(setsid ${daemon.join(" ")} </dev/null >/dev/null 2>&1 &); ` +
            `for i in 1 2 3; do (sleep 0.1 &); done; sleep 1; echo "zombies $(ps -eo stat= | grep -c '^Z')"`,
        ),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "zombies 0\n");
      assert.deepEqual(processesRunning(daemon), [], "the daemon is gone");
    } finally {
      for (const pid of processesRunning(daemon)) Deno.kill(pid, "SIGKILL");
    }
  },
);

Deno.test(
  "Unix sockets of the host's services under /run are not reachable inside",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const path = `/run/forgekit-test-${Deno.pid}.sock`;
    const l = Deno.listen({ transport: "unix", path });
    let hits = 0;
    (async () => {
      for await (const c of l) {
        hits++;
        c.close();
      }
    })().catch(() => {});
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example"],
        sh(`curl -s -m 3 --unix-socket ${path} http://x/ >/dev/null 2>&1; echo "rc $?"`),
      );
      assert.equal(r.code, 0, r.stderr);
      assert.doesNotMatch(r.stdout, /^rc (0|52|56)$/m);
      assert.equal(hits, 0, "nothing connected to the host's socket");
    } finally {
      l.close();
      await Deno.remove(path).catch(() => {});
    }
  },
);

Deno.test(
  "the host's System V IPC objects and /dev/shm are not shared with COMMAND",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const queue = new TextDecoder().decode(
      (await new Deno.Command("ipcmk", { args: ["-Q"], stdout: "piped" }).output()).stdout,
    ).match(/\d+/)![0];
    const shm = `/dev/shm/forgekit-test-${Deno.pid}`;
    await Deno.writeTextFile(shm, "host");
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example"],
        sh(`ipcs -q | awk '{print $2}' | grep -cx ${queue}; cat ${shm} 2>/dev/null; echo end`),
      );
      assert.equal(r.stdout, "0\nend\n", r.stderr);
    } finally {
      await new Deno.Command("ipcrm", { args: ["-q", queue] }).output();
      await Deno.remove(shm);
    }
  },
);

Deno.test(
  "invoked through sudo, COMMAND cannot regain root through a setuid program nor reach the user's processes outside",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const dir = await Deno.makeTempDir({ prefix: "forgekit-setuid-" });
    await Deno.chmod(dir, 0o755);
    await Deno.copyFile(findCommand("id")!, join(dir, "id"));
    await Deno.chmod(join(dir, "id"), 0o4755);
    // One of the user's own processes, outside the sandbox.
    const outside = new Deno.Command("setpriv", {
      args: ["--reuid=65534", "--regid=65534", "--clear-groups", "--", "sleep", "60"],
      env: { FORGEKIT_CANARY: "outside" },
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      const r = await firewall(
        ["--allow-domains", "allowed.example"],
        sh(
          `${
            join(dir, "id")
          } -u; tr '\\0' '\\n' < /proc/${outside.pid}/environ 2>/dev/null | grep -c FORGEKIT_CANARY`,
        ),
        { SUDO_UID: "65534", SUDO_GID: "65534" },
      );
      assert.equal(r.stdout, "65534\n0\n", r.stderr);
    } finally {
      outside.kill("SIGKILL");
      await outside.status;
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test(
  "an allowed name that resolves to this machine's loopback is not connected to",
  needsNamespaces,
  async () => {
    assertNamespaces();
    // forgekit runs in a network namespace of its own, where rebind.example is
    // 127.0.0.1 and services listen on 127.0.0.1:80 and :443.
    const dir = await Deno.makeTempDir({ prefix: "forgekit-rebind-" });
    const hosts = join(dir, "hosts");
    await Deno.writeTextFile(hosts, "127.0.0.1 localhost\n127.0.0.1 rebind.example\n");
    const hits = join(dir, "hits");
    const services = `for (const port of [80, 443]) {
      const l = Deno.listen({ hostname: "127.0.0.1", port });
      (async () => { for await (const c of l) { Deno.writeTextFileSync(${
      JSON.stringify(hits)
    }, port + "\\n", { append: true }); c.close(); } })();
    }
    Deno.writeTextFileSync(${JSON.stringify(`${hits}.ready`)}, "");`;
    const script = [
      "set -e",
      "ip link set lo up",
      `mount --bind ${hosts} /etc/hosts`,
      `${Deno.execPath()} eval '${services}' & services=$!`,
      `while [ ! -e ${hits}.ready ]; do sleep 0.05; done`,
      `${Deno.execPath()} run -A --quiet ${MAIN_TS} firewall --log-dir ${dir} --allow-domains rebind.example -- sh -c ` +
      `"curl -sS -m 5 -o /dev/null -w 'http %{http_code}\\n' http://rebind.example/; curl -sk -m 5 https://rebind.example/ >/dev/null; echo https \\$?" || true`,
      "kill $services",
    ].join("\n");
    try {
      const out = await new Deno.Command("unshare", {
        args: [
          ...(Deno.uid() === 0 ? [] : ["--user", "--map-root-user"]),
          "--net",
          "--mount",
          "--",
          "sh",
          "-c",
          script,
        ],
        env: baseEnv(),
        clearEnv: true,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout);
      const stderr = new TextDecoder().decode(out.stderr);
      assert.match(stdout, /^http 502$/m, stderr);
      assert.doesNotMatch(stdout, /^https 0$/m);
      const got = await Deno.readTextFile(hits).catch(() => "");
      assert.equal(got, "", "nothing reached the services on loopback");
      const log = (await Deno.readTextFile(join(dir, "access.log"))).trim().split("\n").map((l) =>
        JSON.parse(l)
      );
      assert.equal(log.length, 2);
      for (const e of log) {
        assert.match(String(e.reason), /rebind\.example resolves to 127\.0\.0\.1/);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test(
  "with --ssl-bump, COMMAND holds none of forgekit's sockets",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const list = `import os, socket
for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    print("socket", fd, s.getsockname())
print("listed")
`;
    const r = await firewall(
      ["--allow-domains", "allowed.example", "--ssl-bump"],
      ["python3", "-c", list],
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "listed\n");
  },
);

Deno.test(
  "COMMAND cannot type into the terminal forgekit runs in",
  needsNamespaces,
  async () => {
    assertNamespaces();
    // forgekit on a terminal (script's pseudo-terminal), and after it the shell
    // that would read what COMMAND typed there (TIOCSTI) as its next command.
    const dir = await Deno.makeTempDir({ prefix: "forgekit-tty-" });
    const type = `import fcntl, os, termios
try:
    tty = os.open("/dev/tty", os.O_RDWR)
    for c in b"echo typed-by-command\\n": fcntl.ioctl(tty, termios.TIOCSTI, bytes([c]))
except OSError as e:
    print("no terminal:", e.strerror)
`;
    await Deno.writeTextFile(join(dir, "type.py"), type);
    await Deno.writeTextFile(
      join(dir, "outer.sh"),
      [
        `${Deno.execPath()} run -A --quiet ${MAIN_TS} firewall --log-dir ${logDir} --allow-domains allowed.example -- python3 ${
          join(dir, "type.py")
        }`,
        `for i in 1 2; do IFS= read -r -t 2 line && echo "the shell read: $line"; done`,
        `echo end`,
      ].join("\n"),
    );
    try {
      // The terminal's input stays open (piped, never written) so that only
      // what is typed into it is read.
      const child = new Deno.Command("script", {
        args: ["-qec", `bash ${join(dir, "outer.sh")}`, "/dev/null"],
        env: { ...baseEnv(), ...o.env },
        clearEnv: true,
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const out = await child.output();
      await child.stdin.close().catch(() => {});
      const stdout = new TextDecoder().decode(out.stdout);
      assert.match(stdout, /^end\r?$/m, new TextDecoder().decode(out.stderr));
      assert.doesNotMatch(stdout, /the shell read: echo typed-by-command/);
    } finally {
      await Deno.remove(dir, { recursive: true });
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

Deno.test(
  "HTTPS to an allowed IP address passes: a client sends no SNI for an address",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const r = await firewall(
      ["--allow-domains", "198.51.100.7"],
      sh(
        `${curl} https://198.51.100.7/ip; echo "other $(${curl} -o /dev/null -w '%{http_connect}' https://198.51.100.8/ 2>/dev/null)"`,
      ),
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "hello 198.51.100.7 /ip\nother 403\n");
    const line = readLog().findLast((e) => e.host === "198.51.100.7")!;
    assert.deepEqual([line.decision, line.rule, line.status], [
      "allowed",
      "allow-domains:198.51.100.7",
      200,
    ]);
  },
);

Deno.test(
  "a forgekit that is killed (SIGKILL) takes the sandbox and COMMAND with it",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const marker = `${30 + Math.random()}`.slice(0, 12); // `sleep 30.123…`: this run's COMMAND
    const running = () =>
      [...Deno.readDirSync("/proc")].filter((e) => /^\d+$/.test(e.name)).some((e) => {
        try {
          const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
          return argv[0] === "sleep" && argv[1] === marker;
        } catch {
          return false;
        }
      });
    const child = spawnForgekit(
      [
        "firewall",
        "--log-dir",
        logDir,
        "--allow-domains",
        "allowed.example",
        "--",
        "sleep",
        marker,
      ],
      { env: { ...o.env, PATH: Deno.env.get("PATH")! } },
    );
    let end = Date.now() + 20_000;
    while (!running() && Date.now() < end) await new Promise((res) => setTimeout(res, 50));
    assert.ok(running(), "COMMAND runs in the sandbox");
    child.kill("SIGKILL");
    // Its status, not its output: a sandbox left running would hold the pipes open.
    await child.status;
    end = Date.now() + 5_000;
    while (running() && Date.now() < end) await new Promise((res) => setTimeout(res, 50));
    const left = running();
    await Promise.all([child.stdout.cancel(), child.stderr.cancel()]);
    assert.equal(left, false, "COMMAND ended with forgekit");
    removeStaleSessions(); // what the next run would do
  },
);

Deno.test(
  "a CONNECT to no host name is logged; --log-level warn names the access log with the summary",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "forgekit-fwlogs-" });
    try {
      const script = `import os, socket
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"CONNECT a,b.example:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())`;
      const r = await runForgekit(
        [
          "firewall",
          "--log-dir",
          dir,
          "--log-level",
          "warn",
          "--no-sandbox",
          "--allow-domains",
          "allowed.example",
          "--",
          "python3",
          "-c",
          script,
        ],
        { env: { ...o.env, PATH: Deno.env.get("PATH")! }, timeoutMs: 60_000 },
      );
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "HTTP/1.1 400 Bad Request\n");
      const line = JSON.parse(await Deno.readTextFile(join(dir, "access.log")));
      assert.deepEqual(
        [line.method, line.host, line.port, line.decision, line.rule, line.status],
        ["CONNECT", "a,b.example", 443, "blocked", "bad-request", 400],
      );
      assert.match(r.stderr, /^forgekit firewall: blocked requests:\n {2}a,b\.example {2}1$/m);
      assert.match(
        r.stderr,
        new RegExp(`^forgekit firewall: access log ${join(dir, "access.log")}$`, "m"),
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test(
  "a missing sandbox tool is exit 2 before the run makes its log directory",
  async () => {
    // A PATH with COMMAND and every sandbox tool but ip.
    const bin = await Deno.makeTempDir({ prefix: "forgekit-bin-" });
    try {
      for (const cmd of ["true", "unshare", "setpriv", "setsid"]) {
        await Deno.symlink(findCommand(cmd)!, join(bin, cmd));
      }
      const dir = join(bin, "logs");
      const r = await runForgekit(
        ["firewall", "--log-dir", dir, "--allow-domains", "x.example", "--", "true"],
        { env: { PATH: bin } },
      );
      assert.equal(r.code, 2);
      assert.equal(
        r.stderr,
        "error: Cannot create the sandbox: the ip command was not found " +
          "(install iproute2, or use --no-sandbox)\n",
      );
      await assert.rejects(() => Deno.stat(dir), Deno.errors.NotFound, "no log directory");
    } finally {
      await Deno.remove(bin, { recursive: true });
    }
  },
);

Deno.test("bad options are one-line usage errors with exit 2, before anything runs", async () => {
  const badFile = join(logDir, "allowed.txt");
  await Deno.writeTextFile(badFile, "a.example # ok\nhttp://b.example/\n");
  const cases: [string[], RegExp][] = [
    [
      ["--allow-domains", "*.com"],
      /^error: --allow-domains: "\*\.com" is not a valid domain: matches everything or a whole top-level domain \(use example\.com/,
    ],
    [
      ["--allow-domains", "a.example,,b.example"],
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
    [
      ["--allow-domains", "https://github.com/myorg/x"],
      /^error: --allow-domains: "https:\/\/github\.com\/myorg\/x" is a URL, not a domain \(write the host name only: github\.com; paths are filtered with --ssl-bump --allow-urls\)$/m,
    ],
    [
      ["--block-domains", "gist.github.com:443"],
      /^error: --block-domains: "gist\.github\.com:443" has a port \(write gist\.github\.com: every allowed domain is reached on ports 80 and 443 only\)$/m,
    ],
    [
      ["--allow-domains-file", badFile],
      new RegExp(
        `^error: --allow-domains-file ${badFile}: "http://b\\.example/" is a URL, not a domain \\(write the host name only: b\\.example\\)$`,
        "m",
      ),
    ],
    [
      ["--allow-domains-file", "/nonexistent/allowed.txt"],
      /^error: Cannot read --allow-domains-file \/nonexistent\/allowed\.txt: no such file or directory \(check the path\)$/m,
    ],
    [
      ["--allow-domains", "x.example", "--log-dir", badFile],
      new RegExp(`^error: --log-dir ${badFile} is not a directory \\(name a directory\\)$`, "m"),
    ],
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
  // A program in the working directory is not on PATH: say how to run it.
  await Deno.writeTextFile(join(logDir, "agent.sh"), "#!/bin/sh\n", { mode: 0o755 });
  const here = await runForgekit(
    ["firewall", "--allow-domains", "x.example", "--", "agent.sh"],
    { cwd: logDir },
  );
  assert.equal(here.code, 2);
  assert.equal(
    here.stderr,
    "error: Cannot run agent.sh: command not found (to run the file in this directory, write ./agent.sh)\n",
  );
  await Deno.remove(badFile);
  await Deno.remove(join(logDir, "agent.sh"));
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

Deno.test(
  "a signal while the firewall sets up ends it before COMMAND runs, and cleans up",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const marker = join(logDir, "ran");
    for (let i = 0; i < 3; i++) {
      const before = sessionDirs();
      const child = spawnBumpFirewall(sh(`echo ran > ${marker}`));
      // The session directory exists: forgekit is setting up (the session CA is being made).
      const end = Date.now() + 20_000;
      while (sessionDirs().every((d) => before.includes(d)) && Date.now() < end) {
        await new Promise((res) => setTimeout(res, 2));
      }
      child.kill("SIGTERM");
      const status = await child.output();
      assert.equal(status.code, 143, new TextDecoder().decode(status.stderr));
      assert.equal(await exists(marker), false, "COMMAND did not run");
      assert.deepEqual(sessionDirs(), before, "the session directory is gone");
    }
  },
);

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}
