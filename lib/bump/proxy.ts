/**
 * The filtering proxy: CONNECT (SNI checked, then spliced or handed to the
 * ssl-bump interceptor) and absolute-form plain HTTP. It decides with
 * `domain_policy.ts` and logs every connection or request.
 */
import { type AccessLog, type AccessLogEntry, logTime } from "./access_log.ts";
import { MAX_HELLO, parseClientHello } from "./client_hello.ts";
import { decide, type Decision, type DomainPolicy } from "./domain_policy.ts";
import { isDialable, isIpLiteral, normalizeDomain } from "./host_validation.ts";
import {
  errorResponse,
  fieldTokens,
  HeadTimeoutError,
  HeadTooLargeError,
  HOP_BY_HOP,
  readHttpHead,
} from "./http_head.ts";
import {
  type ByteConn,
  closeQuietly as close,
  concat,
  HALF_CLOSED_LINGER_MS,
  Linger,
  pump,
  readBefore,
  refuse,
} from "./conn_io.ts";
import { parseRequestHead } from "./request_head.ts";
import { BodyEnd } from "./body_end.ts";
import { RequestBodyError } from "./exchange.ts";
import { latin1Encode } from "./latin1.ts";
import { dialHttp, dialTunnel, type UpstreamProxyEnv } from "./upstream.ts";
import { decideUrl, urlBlockMessage, type UrlPattern } from "./url_pattern.ts";

/** What the proxy needs to run. */
export interface ProxyOptions {
  policy: DomainPolicy;
  log: AccessLog;
  upstream: UpstreamProxyEnv;
  /** Hands a bumped CONNECT to the interceptor; null: splice everything. */
  bump: null | {
    /** Whether a host is spliced instead of inspected (--no-bump-domains). */
    splice(host: string): boolean;
    intercept(client: ByteConn, host: string, port: number, hello: Uint8Array): Promise<void>;
    /** Starts the leaf and origin connection of a CONNECT to be bumped, before its ClientHello. */
    prepare(host: string, port: number): void;
  };
  /** How long a client has to send its request head (default 30 s). */
  headTimeoutMs?: number;
  /**
   * The `--allow-urls` patterns: plain HTTP to a host they name is blocked
   * (they allow only `https://` URLs on it).
   */
  patterns?: UrlPattern[];
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const HELLO_TIMEOUT_MS = 10_000;

/** What a 403's body says would allow the host (`d.rule` says what blocked it). */
function allowHint(d: Decision): string {
  if (d.rule.startsWith("block-domains:")) {
    return `${
      d.rule.slice("block-domains:".length)
    } is in --block-domains, which wins over --allow-domains`;
  }
  if (d.reason === "ip-literal") return "add the address to --allow-domains";
  if (d.reason === "port") return "only ports 80 and 443 are allowed";
  return "add it to --allow-domains";
}

function blockResponse(host: string, d: Decision): Uint8Array {
  const body = `forgekit firewall blocked ${host}: ${d.rule} (${allowHint(d)})\n`;
  return errorResponse(403, "Forbidden", body, `blocked-by-${d.reason}`);
}

/**
 * Splices two connections both ways until both directions have ended, or
 * one has and the other stays silent for `lingerMs`; returns the bytes each
 * way.
 */
export async function splice(
  client: ByteConn,
  upstream: ByteConn,
  lingerMs = HALF_CLOSED_LINGER_MS,
): Promise<{ out: number; in: number }> {
  let out = 0;
  let inn = 0;
  const linger = new Linger(lingerMs, () => {
    close(client);
    close(upstream);
  });
  try {
    await Promise.all([
      pump(client, upstream, (n) => {
        out += n;
        linger.moved();
      }).then(() => linger.halfClosed()),
      pump(upstream, client, (n) => {
        inn += n;
        linger.moved();
      }).then(() => linger.halfClosed()),
    ]);
  } finally {
    linger.stop();
  }
  close(client);
  close(upstream);
  return { out, in: inn };
}

async function readHello(
  conn: ByteConn,
  first: Uint8Array,
): Promise<{ bytes: Uint8Array; sni: string | null; error?: string }> {
  // Grown by doubling: a ClientHello sent a byte at a time costs no more to gather.
  let store = first.slice();
  let size = first.length;
  const chunk = new Uint8Array(16384);
  const deadline = performance.now() + HELLO_TIMEOUT_MS;
  while (true) {
    const buf = store.subarray(0, size);
    const r = size ? parseClientHello(buf) : { status: "more" as const };
    if (r.status === "ok") return { bytes: buf, sni: r.sni };
    if (r.status === "invalid") return { bytes: buf, sni: null, error: r.why };
    if (size > MAX_HELLO || performance.now() > deadline) {
      return { bytes: buf, sni: null, error: "no ClientHello" };
    }
    let n: number | null | "expired";
    try {
      n = await readBefore(conn, chunk, deadline);
    } catch {
      n = null;
    }
    if (n === "expired") {
      close(conn);
      n = null;
    }
    if (n === null) {
      return { bytes: buf, sni: null, error: "connection closed before the ClientHello" };
    }
    if (size + n > store.length) {
      const grown = new Uint8Array(Math.max(2 * store.length, size + n, 4096));
      grown.set(buf);
      store = grown;
    }
    store.set(chunk.subarray(0, n), size);
    size += n;
  }
}

function parseAuthority(target: string): { host: string; port: number } | null {
  const m = /^(\[[^\]]+\]|[^:\[\]]+):(\d{1,5})$/.exec(target);
  if (!m) return null;
  return { host: m[1].replace(/^\[|\]$/g, ""), port: Number(m[2]) };
}

/** Turns off Nagle's algorithm on TCP connections (small writes must not wait for ACKs). */
export function noDelay<T extends ByteConn>(conn: T): T {
  const tcp = conn as unknown as Partial<Deno.TcpConn>;
  if (typeof tcp.setNoDelay === "function" && tcp.remoteAddr?.transport === "tcp") {
    tcp.setNoDelay(true);
  }
  return conn;
}

/** Handles one client connection. */
export async function handleClient(conn: ByteConn, opts: ProxyOptions): Promise<void> {
  const started = performance.now();
  noDelay(conn); // a NodeListener's sockets have it already
  const entry = (
    e:
      & Partial<AccessLogEntry>
      & Pick<AccessLogEntry, "method" | "host" | "port" | "decision" | "rule">,
  ) =>
    opts.log.write({
      time: logTime(),
      scheme: "https",
      url: null,
      status: null,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: Math.round(performance.now() - started),
      ...e,
    });
  let got;
  try {
    got = await readHttpHead(conn, opts.headTimeoutMs);
  } catch (err) {
    // A client that connected and sent nothing is closed without a word.
    if (err instanceof HeadTimeoutError && err.received > 0) {
      return await refuse(conn, errorResponse(408, "Request Timeout", `${err.message}\n`));
    }
    if (err instanceof HeadTooLargeError) {
      return await refuse(
        conn,
        errorResponse(431, "Request Header Fields Too Large", `${err.message}\n`),
      );
    }
    got = null;
  }
  if (!got) return close(conn);
  const [method, target = "", version = ""] = got.head.split("\r\n")[0].split(" ");
  if (method === "CONNECT") {
    const at = parseAuthority(target);
    if (!at || !isDialable(normalizeDomain(at.host))) {
      entry({
        method,
        // Cut: the target may be as long as a request head.
        host: (at ? normalizeDomain(at.host) : target).slice(0, 255),
        port: at?.port ?? 0,
        decision: "blocked",
        rule: "bad-request",
        status: 400,
        reason: "the CONNECT target is not host:port with a host name or IP address",
      });
      return await refuse(
        conn,
        errorResponse(
          400,
          "Bad Request",
          `forgekit firewall: bad CONNECT target ${JSON.stringify(target)}\n`,
        ),
      );
    }
    const host = normalizeDomain(at.host);
    const d = decide(opts.policy, host, at.port);
    if (!d.allowed) {
      entry({
        method,
        host,
        port: at.port,
        decision: "blocked",
        rule: d.rule,
        status: 403,
        reason: `blocked-by-${d.reason}`,
      });
      return await refuse(conn, blockResponse(host, d));
    }
    // A spliced host's tunnel is dialled before the CONNECT is answered, so
    // that it overlaps the client's ClientHello (the answer wakes the client,
    // which may take this CPU until its ClientHello is sent). A tunnel whose
    // client then fails the SNI check is closed unused.
    const bump = opts.bump && !opts.bump.splice(host) ? opts.bump : null;
    const dialing = bump ? null : dialTunnel(opts.upstream, host, at.port);
    dialing?.catch(() => {}); // reported once the ClientHello has come
    /** The spliced tunnel's log line. */
    const allowed = (e: Partial<AccessLogEntry>) =>
      entry({ method, host, port: at.port, decision: "allowed", rule: d.rule, ...e });
    let upstream: Deno.Conn | null = null;
    let hello;
    try {
      await conn.write(enc.encode("HTTP/1.1 200 Connection established\r\n\r\n"));
      // Inspected (not spliced): its leaf and origin connection are started now.
      bump?.prepare(host, at.port);
      hello = await readHello(conn, got.rest);
      const sni = hello.sni === null ? null : normalizeDomain(hello.sni);
      // A client sends no SNI for an IP address (RFC 6066 §3): to an allowed
      // address, a ClientHello without one is what is expected.
      const sniless = sni === null && hello.error === undefined && isIpLiteral(host);
      if (sni !== host && !sniless) {
        entry({
          method,
          host,
          port: at.port,
          decision: "blocked",
          rule: "sni-mismatch",
          reason: hello.error ??
            (sni === null
              ? "ClientHello has no SNI"
              : `SNI ${sni} is not the CONNECT host ${host}`),
        });
        return close(conn);
      }
      if (bump) {
        return await bump.intercept(conn, host, at.port, hello.bytes);
      }
      try {
        upstream = noDelay(await dialing!);
      } catch (err) {
        allowed({ reason: `upstream error: ${(err as Error).message}` });
        return close(conn);
      }
    } finally {
      if (upstream === null) dialing?.then(close, () => {});
    }
    await upstream.write(hello.bytes);
    const bytes = await splice(conn, upstream);
    allowed({ status: 200, bytes_out: bytes.out + hello.bytes.length, bytes_in: bytes.in });
    return;
  }
  // Plain HTTP: only absolute-form requests.
  let url: URL | null = null;
  try {
    url = /^https?:\/\//i.test(target) ? new URL(target) : null;
  } catch { /* refused below */ }
  if (!url || url.protocol !== "http:" || !/^HTTP\/1\.[01]$/.test(version)) {
    entry({
      method: method || "?",
      host: "",
      port: 0,
      scheme: "http",
      decision: "blocked",
      rule: "not-a-proxy-request",
      status: 400,
    });
    return await refuse(
      conn,
      errorResponse(400, "Bad Request", "forgekit firewall accepts CONNECT and http:// URLs\n"),
    );
  }
  const host = normalizeDomain(url.hostname);
  const port = Number(url.port || 80);
  const href = url.href;
  const logHttp = (e: Pick<AccessLogEntry, "decision" | "rule"> & Partial<AccessLogEntry>) =>
    entry({ method, host, port, scheme: "http", url: href, ...e });
  // As for CONNECT: the URL parser keeps `,`, `;`, `$`, `*` and more in a
  // host, which whatever takes the name next (an upstream proxy, the end
  // of run summary pasted into a shell) could read as something else.
  if (!isDialable(host)) {
    logHttp({
      decision: "blocked",
      rule: "bad-request",
      status: 400,
      reason: "the URL's host is not a host name",
    });
    return await refuse(
      conn,
      errorResponse(
        400,
        "Bad Request",
        `forgekit firewall: bad host in ${JSON.stringify(href)}\n`,
      ),
    );
  }
  const d = decide(opts.policy, host, port);
  if (!d.allowed) {
    logHttp({
      decision: "blocked",
      rule: d.rule,
      status: 403,
      reason: `blocked-by-${d.reason}`,
    });
    return await refuse(conn, blockResponse(host, d));
  }
  const byUrl = decideUrl(opts.patterns ?? [], {
    scheme: "http",
    host,
    port,
    path: url.pathname,
    query: url.search.slice(1),
  });
  if (!byUrl.allowed) {
    logHttp({ decision: "blocked", rule: byUrl.rule, status: 403 });
    return await refuse(
      conn,
      errorResponse(
        403,
        "Forbidden",
        urlBlockMessage(href, host, byUrl),
        "blocked-by-url-policy",
      ),
    );
  }
  // Read strictly: what is forwarded is what was checked, and nothing a
  // server behind might read differently (a second request, a Host that
  // names another site).
  const req = parseRequestHead(got.head, "http");
  if (!req.ok) {
    const framing = req.why.startsWith("unsafe body framing");
    logHttp({
      decision: "blocked",
      rule: framing ? "bad-framing" : "bad-request",
      status: 400,
      reason: req.why,
    });
    return await refuse(
      conn,
      errorResponse(
        400,
        "Bad Request",
        framing
          ? `forgekit firewall refused an ambiguous request: ${req.why}\n`
          : `forgekit firewall refused a malformed request: ${req.why}\n`,
      ),
    );
  }
  // A chunked body broken in the bytes already read is refused before
  // anything goes upstream; one broken later ends the forwarding there.
  const body = new BodyEnd(req.body);
  const refuseBody = async (err: RequestBodyError) => {
    logHttp({ decision: "blocked", rule: "bad-framing", status: 400, reason: err.message });
    await refuse(
      conn,
      errorResponse(
        400,
        "Bad Request",
        `forgekit firewall refused a malformed request body: ${err.message}\n`,
      ),
    );
  };
  let first: Uint8Array;
  try {
    first = got.rest.subarray(0, body.take(got.rest));
  } catch (err) {
    if (!(err instanceof RequestBodyError)) throw err;
    return await refuseBody(err);
  }
  let up;
  try {
    up = await dialHttp(opts.upstream, host, port);
    noDelay(up.conn);
  } catch (err) {
    logHttp({
      decision: "allowed",
      rule: d.rule,
      status: 502,
      reason: `upstream error: ${(err as Error).message}`,
    });
    return await refuse(
      conn,
      errorResponse(
        502,
        "Bad Gateway",
        `forgekit firewall: cannot reach ${host}:${port}: ${(err as Error).message}\n`,
        "upstream-error",
      ),
    );
  }
  // One request per client connection: the next request comes on a new
  // connection and is checked on its own. The Host is the URL's (RFC 9112
  // §3.2.2), and only the request's own body is passed on.
  const head = latin1Encode(
    plainRequestHead(
      req,
      up.viaProxy ? url.href : `${url.pathname}${url.search}`,
      url.host,
      up.proxyAuthorization,
    ),
  );
  await up.conn.write(concat([head, first]));
  let status: number | null = null;
  let refused = false;
  const client = bodyOnly(conn, body, async (err) => {
    // The upstream gets the body cut short; the client is told why, unless
    // the response has already begun.
    close(up.conn);
    if (status !== null) return;
    refused = true;
    await refuseBody(err);
  });
  const bytes = await splice(client, {
    // Peek at the status line as the response streams through.
    read: async (p: Uint8Array) => {
      const n = await up.conn.read(p);
      if (refused) return null;
      if (status === null && n) {
        status = Number(dec.decode(p.subarray(0, Math.min(n, 16))).split(" ")[1]) || null;
      }
      return n;
    },
    write: (p: Uint8Array) => up.conn.write(p),
    closeWrite: () => up.conn.closeWrite(),
    close: () => up.conn.close(),
  });
  if (refused) return;
  logHttp({
    decision: "allowed",
    rule: d.rule,
    status,
    bytes_out: bytes.out + first.length,
    bytes_in: bytes.in,
  });
}

/**
 * The head sent upstream for a plain-HTTP request: its method and version,
 * `target`, `Host: host`, forgekit's own credentials for the upstream proxy
 * (the client's, meant for forgekit, are hop-by-hop and never passed on),
 * and its end-to-end fields (hop-by-hop ones and those `Connection` names
 * dropped), then `Connection: close`.
 */
function plainRequestHead(
  req: { method: string; version: string; headers: [string, string][] },
  target: string,
  host: string,
  proxyAuthorization: string | null,
): string {
  const listed = fieldTokens(req.headers, "connection");
  let head = `${req.method} ${target} HTTP/${req.version}\r\nHost: ${host}\r\n`;
  if (proxyAuthorization) head += `Proxy-Authorization: ${proxyAuthorization}\r\n`;
  for (const [k, v] of req.headers) {
    if (k !== "host" && !PLAIN_HOP_BY_HOP.has(k) && !listed.includes(k)) head += `${k}: ${v}\r\n`;
  }
  return head + "Connection: close\r\n\r\n";
}

/**
 * Fields for this hop only: the shared list, less the body's framing
 * fields, which go on with the body forwarded as it came.
 */
const PLAIN_HOP_BY_HOP = new Set(
  [...HOP_BY_HOP].filter((k) => k !== "transfer-encoding" && k !== "trailer"),
);

/**
 * The client's side of a plain-HTTP exchange, reading only the rest of its
 * request body: anything after it is read and dropped (never passed on),
 * and the end of input is passed on only when the client really ends it.
 * A body that breaks its chunked framing goes to `broken`, then ends the
 * copy.
 */
function bodyOnly(
  conn: ByteConn,
  body: BodyEnd,
  broken: (err: RequestBodyError) => Promise<void>,
): ByteConn {
  return {
    read: async (p: Uint8Array) => {
      for (;;) {
        const n = await conn.read(p);
        if (n === null) return null;
        let taken: number;
        try {
          taken = body.take(p.subarray(0, n));
        } catch (err) {
          if (err instanceof RequestBodyError) await broken(err);
          throw err;
        }
        if (taken > 0) return taken;
      }
    },
    write: (p: Uint8Array) => conn.write(p),
    closeWrite: () => conn.closeWrite(),
    close: () => conn.close(),
  };
}

/** How long accepting pauses after it failed (too many open files). */
const ACCEPT_RETRY_MS = 100;

/**
 * Passes each connection a listener accepts to `handle` until the listener
 * is closed. An accept that fails (too many open files, when a client
 * holds thousands of connections) pauses accepting for a moment instead
 * of ending it: the connections wait in the backlog until descriptors are
 * free again.
 *
 * @example
 * ```ts
 * const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
 * acceptEach(listener, (conn) => conn.close()); // resolves once listener.close() is called
 * ```
 */
export async function acceptEach<T>(
  listener: AsyncIterable<T>,
  handle: (conn: T) => void,
): Promise<void> {
  for (;;) {
    try {
      // A Deno listener's iterator ends when the listener is closed, and throws on other errors.
      for await (const conn of listener) handle(conn);
      return;
    } catch (err) {
      if (err instanceof Deno.errors.BadResource) return;
      await new Promise((r) => setTimeout(r, ACCEPT_RETRY_MS));
    }
  }
}

/** Serves a listener until it is closed; resolves when every connection ended. */
export async function serveProxy(
  listener: AsyncIterable<ByteConn>,
  opts: ProxyOptions,
): Promise<void> {
  const live = new Set<Promise<void>>();
  await acceptEach(listener, (conn) => {
    const p = handleClient(conn, opts).catch(() => close(conn)).finally(() => live.delete(p));
    live.add(p);
  });
  await Promise.allSettled([...live]);
}
