/**
 * Interception driven directly: a minimal CONNECT front hands connections to
 * `BumpSession.intercept()`, real clients (curl, openssl) talk through it to
 * HTTPS origins on loopback reached under real names via the test proxy.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { curl, startBumpFixture as startFixture } from "./support/bump.ts";

const dec = new TextDecoder();

const W = ["-w", "%{http_code} %{http_version} %header{x-proxy-error}\\n"];

Deno.test("allowed paths pass and other paths get 403 over HTTP/1.1 and HTTP/2", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    for (const v of ["--http1.1", "--http2"]) {
      f.debug.length = 0;
      const ok = await curl(f, [v, ...W, "https://api.github.com/allowed/x"]);
      assert.equal(ok.out, `origin /allowed/x\n200 ${v === "--http2" ? "2" : "1.1"} \n`);
      // Both are served on the client connection itself.
      const route = `${v === "--http2" ? "HTTP/2" : "HTTP/1.1"} (on the client connection)`;
      assert.ok(f.debug.some((l) => l.includes(route)), f.debug.join("\n"));
      const no = await curl(f, [v, ...W, "https://api.github.com/secret"]);
      assert.match(no.out, /^Blocked by forgekit: https:\/\/api\.github\.com\/secret matches no/);
      assert.match(no.out, /patterns for this host: https:\/\/api\.github\.com\/allowed\/\*/);
      assert.match(no.out, /403 (1\.1|2) blocked-by-url-policy\n$/);
    }
    assert.deepEqual(f.originPaths(), ["/allowed/x", "/allowed/x"]);
  } finally {
    await f.close();
  }
});

Deno.test("a second disallowed request on a kept-alive HTTP/1.1 connection is blocked", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const r = await curl(f, [
      "--http1.1",
      "-o",
      "/dev/null",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code} %{num_connects}\\n",
      "https://api.github.com/allowed/1",
      "https://api.github.com/secret",
    ]);
    assert.equal(r.out, "200 1\n403 0\n"); // 0 new connects: the connection was reused
    assert.deepEqual(f.originPaths(), ["/allowed/1"]);
  } finally {
    await f.close();
  }
});

Deno.test("a disallowed HTTP/2 stream beside an allowed one is blocked", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const r = await curl(f, [
      "--http2",
      "--parallel",
      "--parallel-immediate",
      "-o",
      "/dev/null",
      "-o",
      "/dev/null",
      "-w",
      "%{url} %{http_code} %{http_version}\\n",
      "https://api.github.com/allowed/1",
      "https://api.github.com/secret",
    ]);
    const lines = r.out.trim().split("\n").sort();
    assert.deepEqual(lines, [
      "https://api.github.com/allowed/1 200 2",
      "https://api.github.com/secret 403 2",
    ]);
    assert.deepEqual(f.originPaths(), ["/allowed/1"]);
  } finally {
    await f.close();
  }
});

Deno.test("dot segments, encoded dot segments and an encoded slash cannot escape a pattern", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    for (const path of ["/allowed/../secret", "/allowed/%2e%2e/secret", "/allowed%2Fsecret"]) {
      for (const v of ["--http1.1", "--http2"]) {
        const r = await curl(f, [
          v,
          "--path-as-is",
          "-o",
          "/dev/null",
          ...W,
          `https://api.github.com${path}`,
        ]);
        assert.match(r.out, /^403 .* blocked-by-url-policy\n$/, `${v} ${path}`);
      }
    }
    assert.deepEqual(f.originPaths(), []);
    const blocked = f.logs.filter((e) => e.decision === "blocked").map((e) => e.url);
    assert.ok(blocked.includes("https://api.github.com/allowed/../secret"));
  } finally {
    await f.close();
  }
});

Deno.test("a request whose Host names another host than the CONNECT host is blocked", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    for (const v of ["--http1.1", "--http2"]) {
      const r = await curl(f, [
        v,
        "-H",
        "Host: other.github.com",
        ...W,
        "https://api.github.com/allowed/x",
      ]);
      assert.match(r.out, /^Blocked by forgekit: request for host "other\.github\.com"/);
      assert.match(r.out, /403 .* blocked-by-host-mismatch\n$/);
    }
    assert.deepEqual(f.originPaths(), []);
  } finally {
    await f.close();
  }
});

Deno.test("a WebSocket handshake to a disallowed path is blocked", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const r = await curl(f, [
      "--http1.1",
      "-o",
      "/dev/null",
      "-H",
      "Connection: Upgrade",
      "-H",
      "Upgrade: websocket",
      "-H",
      "Sec-WebSocket-Version: 13",
      "-H",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
      ...W,
      "https://api.github.com/secret/socket",
    ]);
    assert.equal(r.out, "403 1.1 blocked-by-url-policy\n");
  } finally {
    await f.close();
  }
});

Deno.test("hosts named by no pattern stay allowed and their full URLs are logged", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const r = await curl(f, [...W, "https://other.github.com/any/path?q=1"]);
    assert.equal(r.out, "origin /any/path\n200 2 \n");
    const e = f.logs.find((l) => l.host === "other.github.com")!;
    assert.equal(e.url, "https://other.github.com/any/path?q=1");
    assert.equal(e.decision, "allowed");
    assert.equal(e.rule, "url-policy:no-pattern-for-host");
    assert.equal(e.status, 200);
    assert.equal(e.method, "GET");
  } finally {
    await f.close();
  }
});

Deno.test("each allowed request is logged with its full URL, status and pattern", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    await curl(f, ["-o", "/dev/null", "-d", "hello", "https://api.github.com/allowed/p?x=1"]);
    const e = f.logs.find((l) => l.decision === "allowed")!;
    assert.equal(e.url, "https://api.github.com/allowed/p?x=1");
    assert.equal(e.method, "POST");
    assert.equal(e.status, 200);
    assert.equal(e.pattern, "https://api.github.com/allowed/*");
    assert.equal(e.rule, "url-pattern:https://api.github.com/allowed/*");
    assert.equal(e.bytes_out, 5);
    assert.equal(e.bytes_in, "origin /allowed/p\n".length);
  } finally {
    await f.close();
  }
});

Deno.test("a client that does not trust the session CA refuses the bumped connection", async () => {
  const f = await startFixture([]);
  try {
    const out = await new Deno.Command("curl", {
      args: ["-s", "--proxy", f.proxyUrl, "https://api.github.com/"],
      stdout: "null",
      stderr: "null",
    }).output();
    assert.equal(out.code, 60); // peer certificate cannot be authenticated
  } finally {
    await f.close();
  }
});

Deno.test("the session key is 0600 in a 0700 directory and overwritten and removed by close", async () => {
  const f = await startFixture([]);
  const sslDir = join(f.sessionDir, "ssl");
  try {
    assert.equal((await Deno.stat(sslDir)).mode! & 0o777, 0o700);
    assert.equal((await Deno.stat(join(sslDir, "ca-key.pem"))).mode! & 0o777, 0o600);
    const bundle = await Deno.readTextFile(join(sslDir, "bundle.pem"));
    assert.ok(bundle.endsWith(await Deno.readTextFile(f.caCertPath)));
  } finally {
    await f.close();
  }
  await assert.rejects(Deno.stat(join(sslDir, "ca-key.pem")), Deno.errors.NotFound);
});

Deno.test("the leaf served for a bumped host verifies against the session CA with openssl", async () => {
  const f = await startFixture([]);
  try {
    const out = await new Deno.Command("openssl", {
      args: [
        "s_client",
        "-proxy",
        f.proxyUrl.replace("http://", ""),
        "-connect",
        "api.github.com:443",
        "-servername",
        "api.github.com",
        "-alpn",
        "h2,http/1.1",
        "-CAfile",
        f.caCertPath,
        "-verify_return_error",
        "-verify_hostname",
        "api.github.com",
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = out.stdin.getWriter();
    await w.close();
    const res = await out.output();
    const text = dec.decode(res.stdout);
    assert.equal(res.code, 0, dec.decode(res.stderr));
    assert.match(text, /Verify return code: 0 \(ok\)/);
    assert.match(text, /ALPN protocol: h2/);
  } finally {
    await f.close();
  }
});

Deno.test("bumped HTTP/2 opens no listener of its own: no TCP port, no Unix socket", async () => {
  const f = await startFixture([]);
  try {
    const before = await listeningPorts();
    const ok = await curl(f, ["--http2", ...W, "https://api.github.com/x"]);
    assert.equal(ok.out, "origin /x\n200 2 \n");
    assert.deepEqual((await listeningPorts()).filter((p) => !before.includes(p)), []);
    const sslDir = join(f.sessionDir, "ssl");
    const sockets = [...Deno.readDirSync(sslDir)].filter((e) => e.isFile === false);
    assert.deepEqual(sockets.map((e) => e.name), []);
    assert.equal((await Deno.stat(sslDir)).mode! & 0o777, 0o700);
  } finally {
    await f.close();
  }
});

async function listeningPorts(): Promise<number[]> {
  const out = await new Deno.Command("ss", { args: ["-Hltnp"], stdout: "piped" }).output();
  return dec.decode(out.stdout).split("\n")
    .filter((l) => l.includes(`pid=${Deno.pid},`) && l.includes("127.0.0.1:"))
    .map((l) => Number(l.match(/127\.0\.0\.1:(\d+)/)![1]));
}

Deno.test("a 16 MiB response arrives whole over HTTP/1.1 and HTTP/2 (flow control never stalls)", async () => {
  const body = new Uint8Array(16 << 20).map((_, i) => (i * 31) >> 8);
  const f = await startFixture([], () => new Response(body));
  try {
    const want = await sha256(body);
    for (const v of ["--http1.1", "--http2"]) {
      const file = await Deno.makeTempFile();
      try {
        const r = await curl(f, [v, "-m", "20", "-o", file, ...W, "https://api.github.com/big"]);
        assert.equal(r.out, `200 ${v === "--http2" ? "2" : "1.1"} \n`, v);
        assert.equal(await sha256(await Deno.readFile(file)), want, v);
      } finally {
        await Deno.remove(file);
      }
    }
  } finally {
    await f.close();
  }
});

async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as BufferSource);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}
