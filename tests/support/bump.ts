/**
 * The firewall's proxy with a bump session, without the sandbox, for
 * driving interception directly: real clients (curl, openssl, Deno) talk
 * through it to HTTPS origins on loopback reached under real names via the
 * test proxy.
 */
import { type BumpLogEntry, createBumpSession } from "../../lib/bump/ssl_bump.ts";
import { parseUrlPatterns } from "../../lib/bump/url_pattern.ts";
import { listenProxy } from "../../lib/bump/node_conn.ts";
import { serveProxy } from "../../lib/bump/proxy.ts";
import { AccessLog } from "../../lib/bump/access_log.ts";
import { BodyLog } from "../../lib/bump/body_log.ts";
import { join } from "node:path";
import { type OriginHandler, type Origins, startOrigins } from "./origin.ts";

const dec = new TextDecoder();

/** The firewall's proxy with a bump session, on loopback. */
export interface BumpFront {
  proxyUrl: string;
  caCertPath: string;
  sessionDir: string;
  /** The bump session's access-log entries. */
  logs: BumpLogEntry[];
  /** `--log-level debug` lines. */
  debug: string[];
  close(): Promise<void>;
}

/** A front plus origins answering under api.github.com and other.github.com. */
export interface BumpFixture extends BumpFront {
  origins: Origins;
  originPaths: () => string[];
}

/**
 * Starts the firewall's own proxy (`serveProxy` on its `--ssl-bump` listener,
 * github.com allowed) with a bump session whose upstream is `upstreamProxy`
 * (none: origins are dialled directly). With `logToFile` the bump entries go
 * to the access-log file, as in the firewall, instead of `logs`, and no debug
 * lines are made.
 */
export async function startBumpFront(options: {
  allowUrls: string[];
  upstreamCaCerts: string[];
  upstreamProxy?: string;
  headTimeoutMs?: number;
  stallTimeoutMs?: number;
  maxOriginConnections?: number;
  logToFile?: boolean;
  /** `--log-bodies`: the bodies log goes to `bodies.jsonl` in the session directory. */
  logBodies?: boolean;
}): Promise<BumpFront> {
  const sessionDir = await Deno.makeTempDir({ prefix: "fw-test-" });
  const logs: BumpLogEntry[] = [];
  const patterns = parseUrlPatterns(options.allowUrls);
  const debug: string[] = [];
  const accessLog = new AccessLog(join(sessionDir, "access.log"));
  const bodyLog = options.logBodies ? new BodyLog(join(sessionDir, "bodies.jsonl")) : undefined;
  const bump = await createBumpSession({
    sessionDir,
    sessionId: "test",
    allowDomains: ["github.com"],
    patterns,
    upstreamCaCerts: options.upstreamCaCerts,
    upstreamProxy: options.upstreamProxy,
    log: options.logToFile ? (e) => accessLog.write(e) : (e) => logs.push(e),
    bodyLog,
    // As in the firewall without --log-level debug, the bench's case: no lines made.
    debug: options.logToFile ? undefined : (line) => debug.push(line),
    headTimeoutMs: options.headTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs,
    maxOriginConnections: options.maxOriginConnections,
  });
  const listener = await listenProxy({ hostname: "127.0.0.1", port: 0 }, true);
  const serving = serveProxy(listener, {
    policy: { allow: ["github.com"], block: [] },
    log: accessLog,
    upstream: { noProxy: [] },
    patterns,
    bump: {
      splice: () => false,
      intercept: (c, h, p, hello) => bump.intercept(c, h, p, hello),
      prepare: (h, p) => bump.prepare(h, p),
    },
  });
  return {
    proxyUrl: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    caCertPath: bump.caCertPath,
    sessionDir,
    logs,
    debug,
    async close() {
      listener.close();
      await bump.close();
      await serving;
      accessLog.close();
      bodyLog?.close();
      await Deno.remove(sessionDir, { recursive: true });
    },
  };
}

/**
 * An origin's answer that comes after 5 s unless the proxy gives the request
 * up first; how it ended ("given up" or "answered") is pushed to `ends`.
 */
export async function answerLate(req: Request, ends: string[]): Promise<Response> {
  const gaveUp = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 5000);
    req.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
  ends.push(gaveUp ? "given up" : "answered");
  return new Response("late\n");
}

/**
 * An origin's answer for the obs-text tests: the body lists the code points
 * of the request's `x-latin` as the origin got them, and `x-echo` sends
 * that value back.
 */
export function echoLatin(req: Request): Response {
  const seen = req.headers.get("x-latin") ?? "";
  const codes = [...seen].map((c) => c.charCodeAt(0).toString(16)).join(" ");
  return new Response(`${codes}\n`, { headers: { "x-echo": seen } });
}

/** Answers `origin <path>` unless another handler is given. */
export async function startBumpFixture(
  allowUrls: string[],
  handler: OriginHandler = (req) => new Response(`origin ${new URL(req.url).pathname}\n`),
  options: {
    headTimeoutMs?: number;
    stallTimeoutMs?: number;
    maxOriginConnections?: number;
    logBodies?: boolean;
  } = {},
): Promise<BumpFixture> {
  const origins = await startOrigins(["api.github.com", "other.github.com"], handler);
  const front = await startBumpFront({
    allowUrls,
    upstreamCaCerts: [origins.ca.cert],
    upstreamProxy: origins.proxy.url,
    ...options,
  });
  return {
    ...front,
    origins,
    originPaths: () => origins.hits.map((h) => h.path),
    async close() {
      await front.close();
      await origins.close();
    },
  };
}

/** Runs curl through the fixture, trusting the session CA. */
export async function curl(f: BumpFront, args: string[]): Promise<{ code: number; out: string }> {
  const out = await new Deno.Command("curl", {
    args: ["-s", "--proxy", f.proxyUrl, "--cacert", f.caCertPath, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, out: dec.decode(out.stdout) };
}

/**
 * Opens a raw TCP connection through the front with an answered CONNECT to
 * `host:443` (for clients that speak TLS and HTTP themselves).
 */
export async function connectThrough(f: BumpFront, host = "api.github.com"): Promise<Deno.TcpConn> {
  const port = Number(new URL(f.proxyUrl).port);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(
    new TextEncoder().encode(`CONNECT ${host}:443 HTTP/1.1\r\nHost: ${host}:443\r\n\r\n`),
  );
  const buf = new Uint8Array(1024);
  let head = "";
  while (!head.includes("\r\n\r\n")) {
    const n = await conn.read(buf);
    if (n === null) throw new Error("the proxy closed the connection after CONNECT");
    head += dec.decode(buf.subarray(0, n));
  }
  if (!head.startsWith("HTTP/1.1 200")) {
    throw new Error(`CONNECT refused: ${head.split("\r\n")[0]}`);
  }
  return conn;
}
