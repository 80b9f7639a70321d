/**
 * A bump session behind a minimal CONNECT front, for driving interception
 * directly: real clients (curl, openssl, Deno) talk through it to HTTPS
 * origins on loopback reached under real names via the test proxy.
 */
import { type BumpLogEntry, createBumpSession } from "../../lib/bump/ssl_bump.ts";
import { parseUrlPatterns } from "../../lib/bump/url_pattern.ts";
import { NodeListener } from "../../lib/bump/node_conn.ts";
import type { ByteConn } from "../../lib/bump/conn_io.ts";
import { type OriginHandler, type Origins, startOrigins } from "./origin.ts";

const dec = new TextDecoder();

/** A running fixture. */
export interface BumpFixture {
  proxyUrl: string;
  caCertPath: string;
  sessionDir: string;
  logs: BumpLogEntry[];
  /** `--log-level debug` lines. */
  debug: string[];
  origins: Origins;
  originPaths: () => string[];
  close(): Promise<void>;
}

/** Reads one whole TLS record (the ClientHello) off a connection. */
export async function readClientHello(conn: ByteConn): Promise<Uint8Array> {
  let buf = new Uint8Array(0);
  const chunk = new Uint8Array(16384);
  while (buf.length < 5 || buf.length < 5 + ((buf[3] << 8) | buf[4])) {
    const n = await conn.read(chunk);
    if (n === null) break;
    const next = new Uint8Array(buf.length + n);
    next.set(buf);
    next.set(chunk.subarray(0, n), buf.length);
    buf = next;
  }
  return buf;
}

/** Answers `origin <path>` unless another handler is given. */
export async function startBumpFixture(
  allowUrls: string[],
  handler: OriginHandler = (req) => new Response(`origin ${new URL(req.url).pathname}\n`),
  options: { headTimeoutMs?: number } = {},
): Promise<BumpFixture> {
  const origins = await startOrigins(["api.github.com", "other.github.com"], handler);
  const sessionDir = await Deno.makeTempDir({ prefix: "fw-test-" });
  const logs: BumpLogEntry[] = [];
  const debug: string[] = [];
  const bump = await createBumpSession({
    sessionDir,
    sessionId: "test",
    allowDomains: ["github.com"],
    patterns: parseUrlPatterns(allowUrls),
    upstreamCaCerts: [origins.ca.cert],
    upstreamProxy: origins.proxy.url,
    log: (e) => logs.push(e),
    debug: (line) => debug.push(line),
    headTimeoutMs: options.headTimeoutMs,
  });
  // The firewall's own listener: bumped HTTP/1.1 clients get TLS on their connection.
  const listener = await NodeListener.listen({ hostname: "127.0.0.1", port: 0 });
  const tasks: Promise<void>[] = [];
  const accept = (async () => {
    for await (const conn of listener) {
      tasks.push(
        (async () => {
          const head = new Uint8Array(4096);
          const n = await conn.read(head);
          const line = dec.decode(head.subarray(0, n ?? 0)).split("\r\n")[0];
          const [, target] = line.split(" ");
          const [host, port] = target.split(":");
          await conn.write(new TextEncoder().encode("HTTP/1.1 200 Connection established\r\n\r\n"));
          const hello = await readClientHello(conn);
          await bump.intercept(conn, host, Number(port), hello);
        })().catch(() => {}),
      );
    }
  })();
  return {
    proxyUrl: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    caCertPath: bump.caCertPath,
    sessionDir,
    logs,
    debug,
    origins,
    originPaths: () => origins.hits.map((h) => h.path),
    async close() {
      listener.close();
      await accept;
      await bump.close();
      await Promise.all(tasks);
      await origins.close();
      await Deno.remove(sessionDir, { recursive: true });
    },
  };
}

/** Runs curl through the fixture, trusting the session CA. */
export async function curl(f: BumpFixture, args: string[]): Promise<{ code: number; out: string }> {
  const out = await new Deno.Command("curl", {
    args: ["-s", "--proxy", f.proxyUrl, "--cacert", f.caCertPath, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, out: dec.decode(out.stdout) };
}
