/**
 * TLS termination and per-request policy for `--ssl-bump`.
 *
 * TLS is terminated on the client's own connection (`NodeConn.startTls`,
 * node:tls with the host's leaf; ALPN h2 and http/1.1). Then:
 *
 * - HTTP/1.1: forgekit's own server (`h1_server.ts`) reads each request
 *   off the connection; nothing else is in the way.
 * - HTTP/2: forgekit's own server (`h2_server.ts`) reads the frames off
 *   the connection and hands over each stream on its own.
 *
 * Either way each request gets the same treatment: the Host (or
 * :authority) must be the CONNECT host, the URL must pass the patterns,
 * and allowed requests go to the origin through the pooled
 * {@linkcode OriginClient}.
 *
 * @module
 */
import { LeafCache } from "./leaf_cache.ts";
import type { Leaf } from "./ca.ts";
import { decideUrl, urlBlockMessage, type UrlPattern } from "./url_pattern.ts";
import { type ByteConn, closeQuietly } from "./conn_io.ts";
import {
  type AccessLogEntry,
  logTime,
  untrustedCertificate,
  UPSTREAM_CA_HINT,
} from "./access_log.ts";
import { type OriginClient, type OriginResponse, RequestCancelled } from "./origin_client.ts";
import { NodeConn } from "./node_conn.ts";
import { SocketIo } from "./socket_io.ts";
import { fieldTokens, HEAD_TIMEOUT_MS, HOP_BY_HOP } from "./http_head.ts";
import {
  type BumpHandler,
  type BumpReply,
  type BumpRequest,
  ownReply,
  type Refusal,
  RequestBodyError,
  STALL_TIMEOUT_MS,
} from "./exchange.ts";
import { serveH1 } from "./h1_server.ts";
import { serveH2 } from "./h2_server.ts";
import { parseClientHello, serverAlpn } from "./client_hello.ts";
import { maskUrlSecrets } from "../cli/url_secrets.ts";
import { type BodyLog, type LoggedBody, loggedBody, tapResponse, tapStream } from "./body_log.ts";
import tls from "node:tls";

/** One access-log line: the firewall's entry. */
export type BumpLogEntry = AccessLogEntry;

/** Options of {@linkcode Interceptor}. */
export interface InterceptorOptions {
  patterns: UrlPattern[];
  /** Signs (or returns the cached) leaf for a host. */
  leafFor: (host: string) => Promise<Leaf>;
  /** Upstream requests: pooled connections to origins (HTTP/1.1, and HTTP/2 for HTTP/2 clients). */
  origins: OriginClient;
  log: (entry: BumpLogEntry) => void;
  /** `--log-bodies`: each allowed exchange's headers and first body bytes. */
  bodyLog?: BodyLog;
  /** Decision lines for `--log-level debug`; absent otherwise (the lines are then not made). */
  debug?: (line: string) => void;
  /** The most TLS contexts kept (one per host). */
  capacity?: number;
  /** How long a request head may take on an adopted connection. */
  headTimeoutMs?: number;
  /** How long a request may make no progress on the client's side (default 60 s). */
  stallTimeoutMs?: number;
}

/**
 * A bumped connection: its CONNECT host and port, and the handler its
 * server calls for each request (see {@linkcode BumpHandler} for why a
 * method).
 */
class ConnContext implements BumpHandler {
  constructor(
    readonly host: string,
    readonly port: number,
    readonly answerFor: (ctx: ConnContext, req: BumpRequest) => Promise<BumpReply>,
  ) {}

  answer(req: BumpRequest): Promise<BumpReply> {
    return this.answerFor(this, req);
  }
}

/**
 * The request's end-to-end headers (names lower-case), as pairs for the
 * origin. Content-Length goes as one field of one number: HTTP/1.1 takes
 * `5, 5` or a repeated field of the same value (the servers checked that
 * they agree), HTTP/2 does not (RFC 9113 §8.1.1), and an origin may end the
 * whole connection for it, with every other client's streams on it.
 */
function forwardHeaders(headers: Iterable<[string, string]>): [string, string][] {
  const all = [...headers];
  const listed = fieldTokens(all, "connection");
  const out: [string, string][] = [];
  let length = false;
  for (const field of all) {
    const k = field[0];
    if (k === "host" || HOP_BY_HOP.has(k) || listed.includes(k)) continue;
    if (k !== "content-length") out.push(field);
    else if (!length) {
      length = true;
      out.push([k, String(Number(field[1].split(",")[0].trim()))]);
    }
  }
  return out;
}

/** Where a request goes once the policy allowed it. */
interface Allowed {
  /** Path and query to send (the normalised path). */
  target: string;
  /** The URL as the client sent it, for logs. */
  sentUrl: string;
  rule: string;
  pattern?: string;
  /** A log entry for this request, with the given outcome. */
  entry(status: number | null, extra?: Partial<BumpLogEntry>): BumpLogEntry;
}

/** Splits a request URL into the authority and the raw path and query the client sent. */
export function splitRawUrl(url: string): { authority: string; path: string; query: string } {
  const rest = url.slice(url.indexOf("://") + 3);
  const slash = rest.search(/[/?]/);
  const authority = slash === -1 ? rest : rest.slice(0, slash);
  let target = slash === -1 ? "/" : rest.slice(slash);
  if (target.startsWith("?")) target = "/" + target;
  const q = target.indexOf("?");
  return {
    authority: authority.toLowerCase(),
    path: q === -1 ? target : target.slice(0, q),
    query: q === -1 ? "" : target.slice(q + 1),
  };
}

/** The authority a request for `host:port` must carry (the port only when not 443). */
export function expectedAuthority(host: string, port: number): string[] {
  // An IPv6 literal is written in brackets in a Host field or :authority.
  const h = host.includes(":") ? `[${host.toLowerCase()}]` : host.toLowerCase();
  return port === 443 ? [h, `${h}:443`] : [`${h}:${port}`];
}

/**
 * Terminates TLS for bumped connections and applies the URL policy to every
 * request.
 */
export class Interceptor {
  #opts: InterceptorOptions;
  #contexts: LeafCache<tls.SecureContext>;
  #sockets = new Set<tls.TLSSocket>();
  /** Every connection's requests go through this one function. */
  readonly #answerFor = (ctx: ConnContext, req: BumpRequest) => this.#answer(ctx, req);
  #closed = false;

  constructor(options: InterceptorOptions) {
    this.#opts = options;
    this.#contexts = new LeafCache<tls.SecureContext>({ capacity: options.capacity ?? 256 });
  }

  /**
   * Takes over a client connection whose ClientHello (for `host`) was
   * already read, until it ends. Only connections accepted by the proxy's
   * `NodeListener` can be taken over; any other is closed.
   */
  async intercept(
    client: ByteConn,
    host: string,
    port: number,
    clientHello: Uint8Array,
  ): Promise<void> {
    if (this.#closed || !(client instanceof NodeConn)) return closeQuietly(client);
    const ctx = new ConnContext(host.toLowerCase(), port, this.#answerFor);
    this.#opts.origins.warm(ctx.host, port);
    // A client offering h2 gets it (forgekit prefers it): its requests may go
    // to the origin over HTTP/2, whose connection is opened during the handshake.
    const hello = parseClientHello(clientHello);
    if (hello.status === "ok" && hello.alpn.includes("h2")) {
      this.#opts.origins.warmH2(ctx.host, port);
    }
    let socket: tls.TLSSocket | undefined;
    try {
      const secureContext = await this.#secureContext(ctx.host);
      const alpn = serverAlpn(hello.status === "ok" ? hello.alpn : []);
      const tls = client.startTls(clientHello, { secureContext, alpn });
      socket = tls.socket;
      this.#sockets.add(socket);
      const closed = new Promise<void>((resolve) => socket!.once("close", resolve));
      const stallTimeoutMs = this.#opts.stallTimeoutMs ?? STALL_TIMEOUT_MS;
      const io = new SocketIo(socket, { stallMs: stallTimeoutMs, input: tls.input });
      if (!await handshake(socket, closed, this.#opts.headTimeoutMs ?? HEAD_TIMEOUT_MS)) return;
      const h2 = socket.alpnProtocol === "h2";
      this.#opts.debug?.(
        `ssl-bump: ${ctx.host}:${port}: ${h2 ? "HTTP/2" : "HTTP/1.1"} (on the client connection)`,
      );
      const serve = h2 ? serveH2 : serveH1;
      await serve(io, ctx, {
        headTimeoutMs: this.#opts.headTimeoutMs,
        stallTimeoutMs,
        onRefused: (r) => this.#logRefusal(ctx, r),
      });
      // The writing side has ended; the client gets a moment to close its own.
      const timer = setTimeout(() => socket!.destroy(), 2000);
      await closed;
      clearTimeout(timer);
    } catch (e) {
      this.#opts.debug?.(
        `ssl-bump: interception of ${ctx.host}:${ctx.port} ended: ${(e as Error).message}`,
      );
    } finally {
      if (socket) {
        this.#sockets.delete(socket);
        if (!socket.destroyed) {
          const closed = new Promise((resolve) => socket!.once("close", resolve));
          socket.destroy();
          await closed;
        }
      }
      closeQuietly(client);
    }
  }

  /**
   * Starts what a connection to `host:port` will need, before its
   * ClientHello has come (called once the CONNECT is accepted): the leaf and
   * its TLS context are made, and the origin connection opened, while the
   * client builds and sends its ClientHello. A failure here is met again,
   * and reported, by {@linkcode Interceptor.intercept}.
   */
  prepare(host: string, port: number): void {
    if (this.#closed) return;
    const h = host.toLowerCase();
    this.#opts.origins.warm(h, port);
    this.#secureContext(h).catch(() => {});
  }

  /** The TLS context presenting the leaf for `host` (made once, then cached). */
  #secureContext(host: string): Promise<tls.SecureContext> {
    return this.#contexts.get(host, async () => {
      const leaf = await this.#opts.leafFor(host);
      return tls.createSecureContext({ cert: leaf.cert, key: leaf.key });
    });
  }

  /** Closes every bumped connection. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#contexts.clear();
    for (const socket of this.#sockets) socket.destroy();
    await Promise.resolve();
  }

  /** Logs a request a server refused on its own (malformed, oversized). */
  #logRefusal(ctx: ConnContext, r: Refusal): void {
    const url = r.target === null
      ? null
      : r.target.startsWith("/")
      ? `https://${authorityOf(ctx)}${r.target}`
      : r.target;
    this.#opts.log({
      time: logTime(),
      method: r.method,
      scheme: "https",
      host: ctx.host,
      port: ctx.port,
      url,
      decision: "blocked",
      rule: r.why.includes("unsafe body framing") ? "bad-framing" : "bad-request",
      status: r.status,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: 0,
      reason: r.why,
    });
    this.#opts.debug?.(`ssl-bump: refused ${url ? maskUrlSecrets(url) : "a request"}: ${r.why}`);
  }

  /** One request, from either server. */
  #answer(ctx: ConnContext, req: BumpRequest): Promise<BumpReply> {
    const verdict = this.#judge(ctx, req.method, req.url, performance.now());
    if (!("target" in verdict)) {
      req.body?.cancel().catch(() => {});
      return Promise.resolve(verdict);
    }
    const upgrade = req.upgrade?.toLowerCase() === "websocket" ? "websocket" : undefined;
    return this.#forward(ctx, verdict, req, upgrade);
  }

  /**
   * The policy for one request: the reply when it is blocked (already
   * logged), else where it goes.
   */
  #judge(ctx: ConnContext, method: string, url: string, started: number): BumpReply | Allowed {
    const raw = splitRawUrl(url);
    const sentUrl = `https://${authorityOf(ctx)}${raw.path}${
      raw.query === "" ? "" : `?${raw.query}`
    }`;
    const entry = (
      decision: "allowed" | "blocked",
      rule: string,
      status: number | null,
      extra: Partial<BumpLogEntry> = {},
    ): BumpLogEntry => ({
      time: logTime(),
      method,
      scheme: "https",
      host: ctx.host,
      port: ctx.port,
      url: sentUrl,
      decision,
      rule,
      status,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: Math.round(performance.now() - started),
      ...extra,
    });

    if (!expectedAuthority(ctx.host, ctx.port).includes(raw.authority)) {
      this.#opts.log(
        entry("blocked", "host-mismatch", 403, { reason: `authority ${raw.authority}` }),
      );
      return ownReply(
        403,
        "Forbidden",
        `Blocked by forgekit: request for host "${raw.authority}" on a connection to ` +
          `"${ctx.host}" (the Host header or :authority must equal the CONNECT host)\n`,
        "blocked-by-host-mismatch",
      );
    }

    const decision = decideUrl(this.#opts.patterns, {
      host: ctx.host,
      port: ctx.port,
      path: raw.path,
      query: raw.query,
    });
    if (!decision.allowed) {
      this.#opts.log(entry("blocked", decision.rule, 403, {
        reason: decision.normalisedPath === null ? "unsafe path" : undefined,
      }));
      return ownReply(
        403,
        "Forbidden",
        urlBlockMessage(sentUrl, ctx.host, decision),
        "blocked-by-url-policy",
      );
    }
    // A blocked request's access-log line is printed at once (debug); an
    // allowed one's only once it ends, so its decision is printed now.
    this.#opts.debug?.(
      `ssl-bump: allow ${maskUrlSecrets(sentUrl)}: ${decision.rule} (sent to the origin)`,
    );
    return {
      // Forward what was decided on: the normalised path.
      target: `${decision.normalisedPath ?? raw.path}${raw.query === "" ? "" : `?${raw.query}`}`,
      sentUrl,
      rule: decision.rule,
      pattern: decision.pattern?.source,
      entry: (status, extra) => entry("allowed", decision.rule, status, extra),
    };
  }

  /** Sends an allowed request to the origin; a failure is a logged 502. */
  async #forward(
    ctx: ConnContext,
    allowed: Allowed,
    { method, headers, body, signal, http2, trailers }: BumpRequest,
    upgrade?: string,
  ): Promise<BumpReply> {
    let bytesOut = 0;
    let upstream: OriginResponse;
    const bodies = this.#opts.bodyLog;
    const sent = bodies?.capture();
    if (sent && body) body = tapStream(body, sent);
    // The bodies log's line, written with the access log's.
    const logBodies = bodies &&
      ((status: number | null, response: LoggedBody | null, reason?: string) =>
        bodies.write({
          time: logTime(),
          method,
          url: allowed.sentUrl,
          status,
          request: loggedBody(headers, sent!, trailers?.() ?? null),
          response,
          ...(reason === undefined ? {} : { reason }),
        }));
    try {
      upstream = await this.#opts.origins.request({
        host: ctx.host,
        port: ctx.port,
        method,
        target: allowed.target,
        headers: forwardHeaders(headers),
        body,
        onBodyBytes: (n) => bytesOut = n,
        upgrade,
        signal,
        // HTTP/2 clients may be answered over HTTP/2; `te: trailers` goes with them then.
        http2: http2
          ? { te: headers.some(([k, v]) => k === "te" && v === "trailers"), trailers }
          : undefined,
      });
    } catch (e) {
      if (e instanceof RequestCancelled) {
        this.#opts.log(allowed.entry(null, {
          pattern: allowed.pattern,
          reason: "cancelled by the client",
          bytes_out: bytesOut,
        }));
        logBodies?.(null, null, "cancelled by the client");
        return ownReply(499, "Client Closed Request", "", "cancelled");
      }
      if (e instanceof RequestBodyError) {
        const reason = `bad request body: ${e.message}`;
        this.#opts.log(
          allowed.entry(400, { pattern: allowed.pattern, reason, bytes_out: bytesOut }),
        );
        logBodies?.(400, null, reason);
        return ownReply(400, "Bad Request", `Bad request: ${e.message}\n`);
      }
      logBodies?.(502, null, `upstream error: ${(e as Error).message}`);
      return this.#upstreamError(allowed, e, bytesOut);
    }
    const { pattern } = allowed;
    const received = bodies && tapResponse(upstream, bodies.capture());
    upstream.onEnd((bytesIn, whole, relayedOut) => {
      const reason = whole ? undefined : "the response did not reach the client whole";
      this.#opts.log(
        allowed.entry(upstream.status, {
          pattern,
          bytes_in: bytesIn,
          bytes_out: relayedOut ?? bytesOut,
          ...(reason === undefined ? {} : { reason }),
        }),
      );
      // A streamed body may still be on its way to the client (the origin's
      // side reads ahead): its line waits until all of it has passed the tap.
      received?.passed.then(() =>
        logBodies?.(
          upstream.status,
          loggedBody(upstream.headers, received, upstream.trailers?.() ?? null),
          reason,
        )
      );
    });
    return upstream;
  }

  #upstreamError(allowed: Allowed, e: unknown, bytesOut: number): BumpReply {
    const message = (e as Error).message;
    this.#opts.log(allowed.entry(502, {
      pattern: allowed.pattern,
      reason: `upstream error: ${message}`,
      bytes_out: bytesOut,
    }));
    const hint = untrustedCertificate(message)
      ? ` (forgekit did not trust the server's certificate: ${UPSTREAM_CA_HINT})`
      : "";
    return ownReply(
      502,
      "Bad Gateway",
      `Upstream error for ${allowed.sentUrl}: ${message}${hint}\n`,
      "upstream-error",
    );
  }
}

/** Waits for the TLS handshake: false when the client went away or took too long. */
async function handshake(socket: tls.TLSSocket, closed: Promise<void>, ms: number) {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const done = await Promise.race([
    new Promise<boolean>((resolve) => socket.once("secure", () => resolve(true))),
    closed.then(() => false),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), ms)),
  ]);
  clearTimeout(timer);
  return done;
}

function authorityOf(ctx: ConnContext): string {
  return expectedAuthority(ctx.host, ctx.port)[0];
}
