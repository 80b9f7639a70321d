/**
 * The `--ssl-bump` session: the CA on disk (key 0600 in a 0700 directory),
 * the trust bundle for the sandbox, and interception of bumped connections.
 * The firewall (proxy, sandbox, logs) calls {@linkcode createBumpSession}.
 *
 * @module
 */
import type { BodyLog } from "./body_log.ts";
import { join } from "node:path";
import { createSessionCa, type Leaf } from "./ca.ts";
import { type BumpLogEntry, Interceptor } from "./intercept.ts";
import { LeafCache } from "./leaf_cache.ts";
import { OriginClient } from "./origin_client.ts";
import { proxyEnv, type UpstreamProxyEnv } from "./upstream.ts";
import type { ByteConn } from "./conn_io.ts";
import { joinBundle, readSystemRoots } from "./trust_bundle.ts";
import type { UrlPattern } from "./url_pattern.ts";

export type { BumpLogEntry } from "./intercept.ts";

/** Options of {@linkcode createBumpSession}. */
export interface BumpSessionOptions {
  /** The session directory; `${sessionDir}/ssl/` (0700) is created in it. */
  sessionDir: string;
  /** Names the session in the CA subject. */
  sessionId: string;
  /** The validated allow list, for the CA's name constraints. */
  allowDomains: string[];
  /** From `parseUrlPatterns`. */
  patterns: UrlPattern[];
  /** PEMs from `--upstream-ca` / DENO_CERT, trusted upstream beside the default roots. */
  upstreamCaCerts: string[];
  /** The access log writer. */
  log: (entry: BumpLogEntry) => void;
  /** `--log-bodies`: where each exchange's headers and bodies go. */
  bodyLog?: BodyLog;
  /**
   * `--log-level debug` decisions; absent otherwise (the lines are then not
   * even made).
   */
  debug?: (line: string) => void;
  /** The system root bundle to extend (for tests). */
  systemBundlePath?: string;
  /** The most leaves kept. */
  leafCacheSize?: number;
  /** How long a request head may take on a bumped HTTP/1.1 connection (default 30 s). */
  headTimeoutMs?: number;
  /** How long a bumped request may make no progress on the client's side (default 60 s). */
  stallTimeoutMs?: number;
  /** Origin connections open at once (default `MAX_ORIGIN_CONNECTIONS`). */
  maxOriginConnections?: number;
  /** An upstream proxy URL; by default the invoking environment's HTTPS_PROXY applies. */
  upstreamProxy?: string;
  /** The invoking environment's proxy settings, when already read (`proxyEnv()`). */
  upstream?: UpstreamProxyEnv;
}

/** A running `--ssl-bump` session. */
export interface BumpSession {
  /** The session CA certificate (PEM) on disk. */
  caCertPath: string;
  /** System roots plus the session CA, on disk. */
  trustBundlePath: string;
  /** The directory holding the key; to be hidden inside the sandbox. */
  sslDir: string;
  /**
   * Takes over a client connection after the proxy answered CONNECT and read
   * the ClientHello (`clientHello`, replayed into the TLS server). Closes it.
   */
  intercept(client: ByteConn, host: string, port: number, clientHello: Uint8Array): Promise<void>;
  /**
   * Starts the leaf and the origin connection for a bumped CONNECT as soon
   * as it is accepted, so that they overlap the client's ClientHello.
   */
  prepare(host: string, port: number): void;
  /** Overwrites the key file with zeros and deletes it; idempotent. */
  close(): Promise<void>;
}

/**
 * Creates the session CA, writes it out and starts interception.
 *
 * @example
 * ```ts
 * const bump = await createBumpSession({
 *   sessionDir: "/tmp/fw-20260101T000000", sessionId: "20260101T000000",
 *   allowDomains: ["github.com"], patterns: [], upstreamCaCerts: [],
 *   log: console.log,
 * });
 * await bump.close();
 * ```
 */
export async function createBumpSession(options: BumpSessionOptions): Promise<BumpSession> {
  const ca = await createSessionCa({
    sessionId: options.sessionId,
    allowDomains: options.allowDomains,
  });
  const sslDir = join(options.sessionDir, "ssl");
  const keyPath = join(sslDir, "ca-key.pem");
  const caCertPath = join(sslDir, "ca.pem");
  const trustBundlePath = join(sslDir, "bundle.pem");
  // Set once sslDir is ours: a key path in a directory someone else made is never wiped.
  let ownDir = false;
  try {
    await Deno.mkdir(sslDir, { mode: 0o700 });
    ownDir = true;
    await Deno.chmod(sslDir, 0o700); // mkdir's mode is subject to the umask
    // Mode at creation; createNew refuses a file planted in advance.
    await Deno.writeTextFile(keyPath, ca.keyPem, { mode: 0o600, createNew: true });
    await Deno.writeTextFile(caCertPath, ca.certPem, { mode: 0o644, createNew: true });
    const roots = await readSystemRoots(options.systemBundlePath);
    await Deno.writeTextFile(trustBundlePath, joinBundle([roots, ca.certPem]), {
      mode: 0o644,
      createNew: true,
    });
  } catch (e) {
    if (ownDir) await wipe(keyPath, ca.keyPem.length);
    throw new Error(`Cannot write the session CA to ${sslDir}: ${(e as Error).message}`, {
      cause: e,
    });
  }

  const leaves = new LeafCache<Leaf>({ capacity: options.leafCacheSize ?? 1024 });
  const origins = new OriginClient({
    caCerts: options.upstreamCaCerts,
    upstream: options.upstream ??
      (options.upstreamProxy ? { https: new URL(options.upstreamProxy), noProxy: [] } : proxyEnv()),
    maxConnections: options.maxOriginConnections,
  });
  const interceptor = new Interceptor({
    patterns: options.patterns,
    origins,
    leafFor: (host) => leaves.get(host, () => ca.issueLeaf(host)),
    log: options.log,
    bodyLog: options.bodyLog,
    debug: options.debug,
    headTimeoutMs: options.headTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs,
  });
  let closed: Promise<void> | undefined;
  return {
    caCertPath,
    trustBundlePath,
    sslDir,
    intercept: (conn, host, port, hello) => interceptor.intercept(conn, host, port, hello),
    prepare: (host, port) => interceptor.prepare(host, port),
    close() {
      closed ??= (async () => {
        await wipe(keyPath, ca.keyPem.length);
        await interceptor.close();
        leaves.clear();
        origins.close();
      })();
      return closed;
    },
  };
}

/** Overwrites a key file with zeros, then deletes it; a missing file is fine. */
async function wipe(path: string, length: number): Promise<void> {
  try {
    const f = await Deno.open(path, { write: true });
    try {
      await f.write(new Uint8Array(length));
      await f.syncData();
    } finally {
      f.close();
    }
    await Deno.remove(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}
