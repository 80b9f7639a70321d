/**
 * forgekit firewall against a hostile workload (the non-inspecting mode):
 * real processes in real namespaces, python3 and curl inside, the test
 * origins behind the test upstream proxy. Each test states a rule that an
 * audit found broken.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { baseEnv, MAIN_TS, runForgekit } from "./support/cli.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";

const o = await startOrigins(
  ["allowed.example", "other.example"],
  (_req, hit) => new Response(`hello ${hit.host} ${hit.path}\n`),
);
const dir = await Deno.makeTempDir({ prefix: "forgekit-fwaudit-" });
const logDir = join(dir, "logs");
const dec = new TextDecoder();

function firewall(args: string[], command: string[]) {
  return runForgekit(["firewall", "--log-dir", logDir, ...args, "--", ...command], {
    env: { ...o.env, PATH: Deno.env.get("PATH")! },
    timeoutMs: 60_000,
  });
}

/** A python3 script in the test directory (visible inside the sandbox). */
async function python(name: string, source: string): Promise<string[]> {
  const path = join(dir, name);
  await Deno.writeTextFile(path, source);
  return ["python3", path];
}

function readLog(): Record<string, unknown>[] {
  return Deno.readTextFileSync(join(logDir, "access.log")).trim().split("\n").map((l) =>
    JSON.parse(l)
  );
}

/** Sends raw requests to the proxy (through HTTP_PROXY); prints each answer's status line. */
const RAW_CLIENT = `import os, socket, sys
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
def send(label, raw):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(raw)
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    print(label, out.split(b"\\r\\n")[0].decode())
`;

Deno.test(
  "plain HTTP: a URL host that is not a host name gets 400 and goes nowhere; the summary suggests none and shows no control characters",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const before = o.proxy.hits.length;
    const cmd = await python(
      "plain_hosts.py",
      RAW_CLIENT + `
send("comma", b"GET http://other.example,.allowed.example/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
send("semicolon", b"GET http://other.example;.allowed.example/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
send("shell", b"GET http://a$(touch\${IFS}pwned).example/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
send("wildcard", b"GET http://x.com,*.evil.com/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
send("escape", b"\\x1b]0;pwned\\x07GET http://other.example/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
send("ok", b"GET http://allowed.example/ok HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
`,
    );
    const r = await firewall(["--allow-domains", "allowed.example", "--log-level", "debug"], cmd);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split("\n"), [
      "comma HTTP/1.1 400 Bad Request",
      "semicolon HTTP/1.1 400 Bad Request",
      "shell HTTP/1.1 400 Bad Request",
      "wildcard HTTP/1.1 400 Bad Request",
      "escape HTTP/1.1 403 Forbidden",
      "ok HTTP/1.1 200 OK",
    ]);
    // Before: the first two were allowed (they end in .allowed.example) and sent upstream.
    const sent = o.proxy.hits.slice(before).map((h) => h.target);
    assert.deepEqual(sent.filter((t) => !t.startsWith("allowed.example")), [], sent.join(" "));
    assert.ok(!r.stderr.includes("\x1b") && !r.stderr.includes("\x07"), JSON.stringify(r.stderr));
    const suggestion = r.stderr.split("\n").find((l) => l.includes("to allow them"));
    assert.equal(suggestion, "  to allow them: --allow-domains allowed.example,other.example");
    const bad = readLog().filter((e) => e.rule === "bad-request");
    assert.equal(bad.length, 4);
  },
);

Deno.test(
  "a ClientHello naming a second server after the CONNECT host is refused: none of it goes upstream",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const before = o.proxy.hits.length;
    const cmd = await python(
      "two_names.py",
      `import os, socket, struct
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
def ext_sni(names):
    entries = b"".join(b"\\x00" + struct.pack(">H", len(n)) + n for n in names)
    body = struct.pack(">H", len(entries)) + entries
    return b"\\x00\\x00" + struct.pack(">H", len(body)) + body
exts = ext_sni([b"allowed.example", b"other.example"])
body = b"\\x03\\x03" + b"\\x07" * 32 + b"\\x00" + b"\\x00\\x02\\x13\\x01" + b"\\x01\\x00" + struct.pack(">H", len(exts)) + exts
msg = b"\\x01\\x00" + struct.pack(">H", len(body)) + body
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"CONNECT allowed.example:443 HTTP/1.1\\r\\nHost: allowed.example:443\\r\\n\\r\\n")
print(s.recv(4096).split(b"\\r\\n")[0].decode())
s.sendall(b"\\x16\\x03\\x01" + struct.pack(">H", len(msg)) + msg)
print("closed" if s.recv(4096) == b"" else "answered")
`,
    );
    const r = await firewall(["--allow-domains", "allowed.example"], cmd);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "HTTP/1.1 200 Connection established\nclosed\n");
    const e = readLog().at(-1)!;
    assert.deepEqual([e.rule, e.reason], [
      "sni-mismatch",
      "ClientHello names more than one server",
    ]);
    // The tunnel to the CONNECT host (allowed) is opened while the ClientHello
    // comes, and closed without a byte of it once the ClientHello is refused.
    for (let i = 0; i < 100 && o.proxy.hits.slice(before).some((h) => h.sent === undefined); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(
      o.proxy.hits.slice(before).map((h) => [h.target, h.sent]),
      [["allowed.example:443", 0]],
      "nothing went upstream",
    );
  },
);

Deno.test(
  "a Ctrl-C at the terminal reaches COMMAND once, and forgekit exits with COMMAND's status (sandboxed and --no-sandbox)",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const cmd = await python(
      "sigint.py",
      `import signal, sys, time
n = 0
def count(signo, frame):
    global n
    n += 1
signal.signal(signal.SIGINT, count)
print("ready", flush=True)
time.sleep(2)
print("sigints", n, flush=True)
sys.exit(3)
`,
    );
    for (const mode of [[], ["--no-sandbox"]]) {
      const status = join(dir, "status");
      // forgekit on a pseudo-terminal; the shell around it ignores SIGINT, and records its status.
      const line =
        `trap '' INT; ${Deno.execPath()} run -A --quiet ${MAIN_TS} firewall --log-dir ${logDir} ` +
        `${mode.join(" ")} --allow-domains allowed.example -- ${
          cmd.join(" ")
        }; echo $? > ${status}`;
      const child = new Deno.Command("script", {
        args: ["-qec", line, "/dev/null"],
        env: baseEnv(),
        clearEnv: true,
        stdin: "piped",
        stdout: "piped",
        stderr: "null",
      }).spawn();
      const writer = child.stdin.getWriter();
      let out = "";
      let typed = false;
      for await (const chunk of child.stdout) {
        out += dec.decode(chunk);
        if (!typed && out.includes("ready")) {
          typed = true;
          await writer.write(new Uint8Array([3])); // Ctrl-C
        }
      }
      await writer.close().catch(() => {});
      await child.status;
      // Before: the forgekit inside the sandbox had the terminal's SIGINT too, and ended on
      // it (130); with --no-sandbox, COMMAND got the terminal's and forgekit's.
      assert.match(out, /sigints 1\r?\n/, `${mode}: ${out}`);
      assert.equal((await Deno.readTextFile(status)).trim(), "3", `${mode}: ${out}`);
    }
  },
);

Deno.test(
  "a workload that runs the relay out of file descriptors gets its way out back once it lets go",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const cmd = await python(
      "flood.py",
      `import os, socket, subprocess
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
held = []
try:
    while len(held) < 2000:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
except OSError:
    pass
print("held", "many" if len(held) > 100 else len(held), flush=True)
for s in held:
    s.close()
r = subprocess.run(["curl", "-sS", "-m", "10", "http://allowed.example/after"], capture_output=True, text=True)
print("after", r.stdout.strip() or r.stderr.strip())
`,
    );
    // Few descriptors for forgekit and everything inside (inherited).
    const out = await new Deno.Command("prlimit", {
      args: [
        "--nofile=400:400",
        "--",
        Deno.execPath(),
        "run",
        "-A",
        "--quiet",
        MAIN_TS,
        "firewall",
        "--log-dir",
        logDir,
        "--allow-domains",
        "allowed.example",
        "--",
        ...cmd,
      ],
      env: { ...baseEnv(), ...o.env },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = dec.decode(out.stdout);
    assert.equal(out.code, 0, dec.decode(out.stderr));
    // Before: the relay's accept loop ended at the first "too many open files", for good.
    assert.equal(stdout, "held many\nafter hello allowed.example /after\n");
  },
);

Deno.test("an allow entry that is a whole top-level domain or carries a port is exit 2", async () => {
  const cases = [
    [
      "com",
      'error: --allow-domains: "com" is not a valid domain: matches everything or a whole ' +
      "top-level domain (use example.com (with subdomains) or *.example.com (subdomains only))\n",
    ],
    [
      "github.com:443",
      'error: --allow-domains: "github.com:443" has a port (write github.com: every allowed ' +
      "domain is reached on ports 80 and 443 only)\n",
    ],
  ];
  for (const [entry, want] of cases) {
    const r = await runForgekit(["firewall", "--allow-domains", entry, "--", "true"]);
    assert.equal(r.code, 2, entry);
    assert.equal(r.stderr, want);
  }
});

Deno.test(
  "--internal-sandbox run by hand, outside the sandbox's namespaces, is refused before it mounts anything",
  needsNamespaces,
  async () => {
    assertNamespaces();
    // In a mount namespace of the test's own, so that a forgekit that went
    // ahead would cover only that namespace's /run, not the host's. The spec
    // is written in there: one without the namespace it was made in, and one
    // made in the very namespace it is run in (as a session's spec run by hand).
    const session = await Deno.makeTempDir({ dir, prefix: "fw-by-hand-" });
    const specPath = join(session, "sandbox.json");
    const spec = (outside: string | undefined) =>
      JSON.stringify({
        sessionDir: session,
        socketPath: join(session, "proxy.sock"),
        command: "true",
        args: [],
        env: {},
        extraEnv: {},
        bindFiles: [],
        hideDirs: [],
        uid: null,
        gid: null,
        outside,
      });
    for (const outside of [undefined, "@NS@"]) {
      const template = join(session, "template.json");
      await Deno.writeTextFile(template, spec(outside));
      const out = await new Deno.Command("unshare", {
        args: [
          ...(Deno.uid() === 0 ? [] : ["--user", "--map-root-user"]),
          "--mount",
          "sh",
          "-c",
          'sed "s|@NS@|$(readlink /proc/self/ns/mnt)|" "$1" > "$2" && shift 2 && exec "$@"',
          "sh",
          template,
          specPath,
          Deno.execPath(),
          "run",
          "-A",
          MAIN_TS,
          "firewall",
          "--internal-sandbox",
          specPath,
        ],
        env: baseEnv(),
        clearEnv: true,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = dec.decode(out.stderr);
      if (outside !== undefined) {
        assert.match(Deno.readTextFileSync(specPath), /"outside":"mnt:\[\d+\]"/);
      }
      assert.equal(out.code, 2, `outside ${outside}: ${stderr}`);
      assert.equal(
        stderr,
        "error: --internal-sandbox runs only inside the sandbox forgekit firewall makes (run: forgekit firewall --allow-domains LIST -- COMMAND)\n",
      );
    }
  },
);

Deno.test(
  "teardown: firewall audit origins",
  { sanitizeResources: false, sanitizeOps: false },
  async () => {
    await o.close();
    await Deno.remove(dir, { recursive: true });
  },
);
