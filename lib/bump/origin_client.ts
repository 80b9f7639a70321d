/**
 * forgekit's own client for bumped requests: kept-alive TLS connections to
 * each origin, pooled, verified against Deno's roots plus the session's
 * extra CAs, dialled directly or through the upstream proxy.
 *
 * Requests from HTTP/1.1 clients (and WebSocket handshakes) always go over
 * HTTP/1.1, and so do most requests from HTTP/2 clients: on loopback a small
 * request costs forgekit (and the origin) more over HTTP/2. An HTTP/2
 * client's request goes over HTTP/2 (`origin_h2.ts`) only when it needs to,
 * and the origin picks h2 offered h2 and http/1.1:
 *
 * - it carries `te: trailers` (gRPC always does): the client takes
 *   trailers, which only HTTP/2 carries through (both ways);
 * - the origin does not speak HTTP/1.1 (many gRPC servers offer h2 only):
 *   an HTTP/1.1-only handshake with it (the connection opened ahead at
 *   CONNECT) failed or agreed on no protocol.
 *
 * One HTTP/2 connection per origin carries many streams. What each origin
 * picked is remembered, so that one that picked http/1.1 goes straight to
 * the HTTP/1.1 pool.
 *
 * Why not fetch: on loopback, fetch through a Deno.HttpClient answers about
 * 2,000–6,000 requests per second (HTTP/2 or HTTP/1.1 upstream), a plain
 * kept-alive TLS connection about 19,000; the upstream leg was most of the
 * cost of a bumped request.
 *
 * Framing follows RFC 9112: no body for HEAD, 1xx, 204 and 304; a
 * Transfer-Encoding ending in chunked is decoded; a single Content-Length
 * is honoured; conflicting lengths are an error; anything else is read to
 * the end of the connection. A connection is reused only after a response
 * that was framed and read to its end.
 *
 * @module
 */
import { dialTunnel, type UpstreamProxyEnv } from "./upstream.ts";
import {
  chunkSize,
  fieldTokens,
  framingFields,
  HOP_BY_HOP,
  LENGTH_VALUE,
  MAX_CHUNK_LINE,
  MAX_HEAD,
} from "./http_head.ts";
import { closeQuietly, writeAll } from "./conn_io.ts";
import { latin1Decode, latin1Encode } from "./latin1.ts";
import { type BumpReply, RequestBodyError } from "./exchange.ts";
import {
  BodySource,
  H2Pool,
  IDLE_MS,
  OriginH2Connection,
  type OriginH2Stream,
} from "./origin_h2.ts";
import { requestFields } from "./h2_client_session.ts";
import { bodiless } from "./h2_response.ts";

/** A request to an origin. */
export interface OriginRequest {
  host: string;
  port: number;
  method: string;
  /** The request target: path and query. */
  target: string;
  /** End-to-end headers (no hop-by-hop headers, no Host). */
  headers: [string, string][];
  body: ReadableStream<Uint8Array> | null;
  /** Counts request body bytes as they are sent. */
  onBodyBytes?: (n: number) => void;
  /** Asks to switch protocols (`Upgrade`, e.g. "websocket"). */
  upgrade?: string;
  /**
   * Aborted when the client gave up on the request: until the response head
   * has come, the origin connection is then closed (not reused) and the
   * request fails. (Over HTTP/2, only its stream is reset.)
   */
  signal?: AbortSignal;
  /**
   * The client spoke HTTP/2: with `te`, the request goes over HTTP/2 when
   * the origin picks it (any request does when the origin does not speak
   * HTTP/1.1; else over HTTP/1.1).
   */
  http2?: {
    /** The client sent `te: trailers` (gRPC does): forwarded over HTTP/2. */
    te: boolean;
    /** The client's trailers, once its body has ended: forwarded over HTTP/2. */
    trailers?: () => [string, string][] | null;
  };
}

/** An origin's response. */
export interface OriginResponse {
  status: number;
  statusText: string;
  /** End-to-end headers (hop-by-hop and framing headers removed). */
  headers: [string, string][];
  /**
   * The body: bytes when it arrived whole with the head or fits one buffer,
   * a stream when its length is not known in advance, null when the
   * response has none or it is {@linkcode OriginResponse.sized}.
   */
  body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null;
  /** The body's length when known in advance (Content-Length). */
  length: number | null;
  /**
   * Called once the body has ended and the request body has settled: with
   * the body bytes passed on, and whether the body came whole.
   */
  onEnd(fn: (bytes: number, whole: boolean, relayedOut?: number) => void): void;
  /**
   * Over HTTP/2: the response's trailers, once its body has ended (null:
   * none). Over HTTP/1.1 a chunked body's trailers are dropped.
   */
  trailers?: () => [string, string][] | null;
  /**
   * After a `101` to a request with `upgrade`: the connection, now the
   * caller's, and any bytes the origin sent after the head.
   */
  tunnel?: BumpReply["tunnel"];
  /**
   * A body of known length too large to come whole: its first bytes
   * (`buffered`) and the connection the rest is read from, with gathered
   * reads (`body` is null). `ended` takes the connection back: to the pool
   * when the body went whole, else closed.
   */
  sized?: BumpReply["sized"];
}

/** Options of {@linkcode OriginClient}. */
export interface OriginClientOptions {
  /** Extra trusted CAs (PEM), beside Deno's roots. */
  caCerts: string[];
  /** How to reach origins: directly or through HTTPS_PROXY. */
  upstream: UpstreamProxyEnv;
  /** Idle connections kept per origin. */
  maxIdle?: number;
  /** Idle connections kept in all (the least recently used beyond it are closed). */
  maxIdleTotal?: number;
  /** An idle connection is closed after this long (default {@linkcode IDLE_MS}). */
  idleMs?: number;
  /** Origin connections open at once, in all (default {@linkcode MAX_ORIGIN_CONNECTIONS}). */
  maxConnections?: number;
  /**
   * How long a connection opened ahead ({@linkcode OriginClient.warm},
   * {@linkcode OriginClient.warmH2}) may take to finish its TLS handshake
   * (default {@linkcode WARM_TIMEOUT_MS}).
   */
  warmTimeoutMs?: number;
}

/**
 * Origin connections open at once, in use, idle or being opened. Each
 * HTTP/2 stream of a client needs one of its own when the origin is spoken
 * to in HTTP/1.1, so without a bound a workload could make forgekit open
 * 100 per client connection and run the process out of file descriptors. A
 * parallel build keeps a few dozen requests in flight; past this bound a
 * request waits for a connection to close (or its client to give up).
 */
export const MAX_ORIGIN_CONNECTIONS = 512;
/**
 * How long a connection opened ahead of its request may take to finish its
 * TLS handshake. An origin that accepts and never answers would otherwise
 * hold its slot and warm-up place for good: {@linkcode MAX_WARMING} of them
 * and nothing is opened ahead for any origin again.
 */
export const WARM_TIMEOUT_MS = 10_000;
/**
 * Connections opened ahead of a request ({@linkcode OriginClient.warm}) at
 * once: they only save a little time, and a workload sending CONNECTs to
 * many hosts without using them must not make forgekit dial each one.
 */
export const MAX_WARMING = 16;

/** The largest response body passed on as one piece rather than streamed. */
const WHOLE_BODY_LIMIT = 64 * 1024;
const READ_SIZE = 64 * 1024;
/** What an HTTP/1.1 client's request asks of HTTP/2: no trailers either way. */
const NO_TRAILERS: NonNullable<OriginRequest["http2"]> = { te: false };
/** The ALPN offer of HTTP/1.1 connections. */
const H1_ALPN = ["http/1.1"];
/** The ALPN offer of connections for HTTP/2 clients: h2 preferred. */
const H2_ALPN = ["h2", "http/1.1"];
/** Origins whose ALPN choice is remembered (the least recently dialled are forgotten). */
const MAX_REMEMBERED = 4096;
/** Times a request refused unprocessed (GOAWAY, REFUSED_STREAM) is sent again. */
const H2_RETRIES = 2;
/** Times a request looks for an HTTP/2 connection with room before it gives up. */
const MAX_ROUNDS = 16;
/** Response fields that are about forgekit's own hop, never passed on. */
const PROXY_FIELDS = new Set(["proxy-authenticate", "proxy-authorization"]);

const enc = new TextEncoder();

/** An error in what the origin sent (answered as 502). */
export class OriginProtocolError extends Error {
  override name = "OriginProtocolError";
}

type EndListener = Parameters<OriginResponse["onEnd"]>[0];

/** A response's end, told to every listener, also to those that come later. */
class ResponseEnd {
  #listeners: EndListener[] = [];
  #settled: Parameters<EndListener> | null = null;

  on(fn: EndListener): void {
    if (this.#settled) fn(...this.#settled);
    else this.#listeners.push(fn);
  }

  settle(...args: Parameters<EndListener>): void {
    this.#settled = args;
    for (const fn of this.#listeners.splice(0)) fn(...args);
  }
}

/** A TLS connection to an origin with a read buffer. */
class OriginConn {
  buf = new Uint8Array(READ_SIZE);
  start = 0;
  end = 0;
  /** When it was last put back in the pool (performance.now()). */
  idleSince = 0;
  /** A read started while idle: the next response's first bytes, or the origin's close. */
  #pending: Promise<number | null> | null = null;
  #watching = false;

  constructor(readonly conn: Deno.TlsConn, readonly key: string) {}

  /**
   * While the connection is idle in the pool, a read is kept waiting on it,
   * so that an origin closing it (or sending anything unasked) is seen at
   * once and `gone` is called, instead of the next request finding out.
   */
  watch(gone: () => void): void {
    this.#watching = true;
    let pending = this.#pending;
    if (pending === null) {
      this.start = this.end = 0;
      pending = this.#pending = this.conn.read(this.buf);
    }
    pending.then(() => {}, () => {}).then(() => {
      if (!this.#watching || this.#pending !== pending) return;
      this.#watching = false;
      gone();
    });
  }

  /** Taken out of the pool for a request: the waiting read becomes the response's first. */
  unwatch(): void {
    this.#watching = false;
  }

  get buffered(): number {
    return this.end - this.start;
  }

  /** Reads more bytes into the buffer; false at the end of the connection. */
  async fill(): Promise<boolean> {
    const pending = this.#pending;
    if (pending !== null) {
      // Started by watch() into the whole, empty buffer.
      this.#pending = null;
      const n = await pending;
      if (n === null) return false;
      this.end += n;
      return true;
    }
    if (this.start === this.end) this.start = this.end = 0;
    if (this.end === this.buf.length) {
      if (this.start > 0) {
        this.buf.copyWithin(0, this.start, this.end);
        this.end -= this.start;
        this.start = 0;
      } else {
        if (this.buf.length >= MAX_HEAD * 2) {
          throw new OriginProtocolError("response head too large");
        }
        const bigger = new Uint8Array(this.buf.length * 2);
        bigger.set(this.buf.subarray(0, this.end));
        this.buf = bigger;
      }
    }
    const n = await this.conn.read(this.buf.subarray(this.end));
    if (n === null) return false;
    this.end += n;
    return true;
  }

  /** Takes up to `max` buffered bytes (a copy). */
  take(max: number): Uint8Array<ArrayBuffer> {
    const n = Math.min(max, this.buffered);
    const out = this.buf.slice(this.start, this.start + n);
    this.start += n;
    return out;
  }

  /** Reads one CRLF-terminated line (for chunk sizes and trailers). */
  async line(limit = MAX_CHUNK_LINE): Promise<string> {
    let scanned = this.start;
    for (;;) {
      for (let i = scanned; i + 1 < this.end; i++) {
        if (this.buf[i] === 13 && this.buf[i + 1] === 10) {
          const text = latin1Decode(this.buf, this.start, i);
          this.start = i + 2;
          return text;
        }
      }
      if (this.buffered > limit) throw new OriginProtocolError("chunk header line too long");
      const offset = this.end - this.start;
      if (!await this.fill()) throw new OriginProtocolError("connection closed inside a chunk");
      scanned = this.start + Math.max(0, offset - 1);
    }
  }

  close(): void {
    this.#watching = false;
    try {
      this.conn.close();
    } catch {
      // already closed
    }
  }
}

interface Head {
  status: number;
  statusText: string;
  headers: [string, string][];
}

/** Parses a response head (status line and fields); throws on anything malformed. */
export function parseResponseHead(text: string): Head {
  const lines = text.split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0]);
  if (!m) throw new OriginProtocolError(`malformed status line: ${lines[0].slice(0, 80)}`);
  const headers: [string, string][] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(":");
    if (colon <= 0 || line[0] === " " || line[0] === "\t") {
      throw new OriginProtocolError(`malformed header line: ${line.slice(0, 80)}`);
    }
    const name = line.slice(0, colon);
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
      throw new OriginProtocolError(`malformed header name: ${name.slice(0, 80)}`);
    }
    headers.push([name.toLowerCase(), line.slice(colon + 1).trim()]);
  }
  return { status: Number(m[1]), statusText: m[2] ?? "", headers };
}

/** How a response body is delimited. */
export type Framing =
  | { kind: "none" }
  | { kind: "length"; length: number }
  | { kind: "chunked" }
  | { kind: "close" };

/** Decides how a response body is framed (RFC 9112 §6.3). */
export function responseFraming(method: string, status: number, headers: [string, string][]): {
  framing: Framing;
  reusable: boolean;
} {
  if (method === "HEAD" || status < 200 || status === 204 || status === 304) {
    return { framing: { kind: "none" }, reusable: !closes(headers) };
  }
  const { codings, lengths } = framingFields(headers);
  if (codings.length > 0) {
    if (codings.at(-1) === "chunked") {
      // A length beside a transfer coding is ignored, and the connection not reused.
      return { framing: { kind: "chunked" }, reusable: lengths.length === 0 && !closes(headers) };
    }
    return { framing: { kind: "close" }, reusable: false };
  }
  if (lengths.length > 0) {
    if (!lengths.every((l) => LENGTH_VALUE.test(l)) || new Set(lengths).size !== 1) {
      throw new OriginProtocolError(`invalid Content-Length: ${lengths.join(", ")}`);
    }
    return { framing: { kind: "length", length: Number(lengths[0]) }, reusable: !closes(headers) };
  }
  return { framing: { kind: "close" }, reusable: false };
}

function closes(headers: [string, string][]): boolean {
  return fieldTokens(headers, "connection").includes("close");
}

/** Pooled HTTP/1.1 connections to origins, for bumped requests. */
export class OriginClient {
  #opts: OriginClientOptions;
  #idle = new Map<string, OriginConn[]>();
  /** Every idle connection, least recently released first. */
  #idleOrder = new Set<OriginConn>();
  #warming = new Map<string, Promise<OriginConn | null>>();
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #closed = false;
  /** Connections open or being opened (each holds a slot until closed). */
  #open = 0;
  /** Requests waiting for a slot, first come first served. */
  #waiting: (() => void)[] = [];
  /** HTTP/2 connections, for HTTP/2 clients. */
  #h2: H2Pool;
  /** What each origin picked when offered h2 and http/1.1. */
  #alpn = new Map<string, "h2" | "http/1.1">();
  /** Origins whose HTTP/1.1-only handshake failed or agreed on no protocol: maybe h2 only. */
  #h1Refused = new Set<string>();
  /** HTTP/2 connections being opened ahead ({@linkcode warmH2}), bounded as {@linkcode warm}'s. */
  #warmingH2 = 0;
  /** How long a pooled connection may stay idle. */
  #idleMs: number;

  constructor(options: OriginClientOptions) {
    this.#opts = options;
    this.#idleMs = options.idleMs ?? IDLE_MS;
    this.#h2 = new H2Pool({ idleMs: this.#idleMs });
  }

  /** What the origin picked, offered h2 and http/1.1 (for HTTP/2 clients), if known. */
  protocolOf(host: string, port: number): "h2" | "http/1.1" | undefined {
    return this.#alpn.get(`${host.toLowerCase()}:${port}`);
  }

  /** Connections open or being opened now. */
  get openConnections(): number {
    return this.#open;
  }

  get #max(): number {
    return this.#opts.maxConnections ?? MAX_ORIGIN_CONNECTIONS;
  }

  /** Takes a slot at once when one is free (an idle connection is closed for it if needed). */
  #trySlot(): boolean {
    if (this.#open >= this.#max && this.#idleOrder.size > 0) {
      this.#drop(this.#idleOrder.values().next().value!);
    } else if (this.#open >= this.#max) this.#h2.closeIdle();
    if (this.#open >= this.#max) return false;
    this.#open++;
    return true;
  }

  /** Takes a slot, waiting for one while all are held; a request given up stops waiting. */
  async #slot(signal?: AbortSignal): Promise<void> {
    if (this.#waiting.length === 0 && this.#trySlot()) return;
    if (signal?.aborted) throw whyAborted(signal, signal.reason);
    await new Promise<void>((resolve, reject) => {
      const given = () => {
        signal?.removeEventListener("abort", abort);
        resolve();
      };
      const abort = () => {
        const at = this.#waiting.indexOf(given);
        if (at !== -1) this.#waiting.splice(at, 1);
        reject(whyAborted(signal!, signal!.reason));
      };
      this.#waiting.push(given);
      signal?.addEventListener("abort", abort, { once: true });
    });
  }

  /** Gives a slot back: to the first request waiting, else to the pool of free ones. */
  #freeSlot(): void {
    const next = this.#waiting.shift();
    if (next) return next();
    this.#open--;
  }

  /**
   * Opens a connection to an origin ahead of its first request (called when
   * a client's CONNECT to it is accepted), so that the upstream handshake
   * overlaps the client's. It also avoids a 40 ms stall: a TLS 1.3 server
   * sends its session tickets after the handshake, and a request written
   * together with the handshake's last message gets its response held back
   * by the server's Nagle algorithm until our delayed ACK of those tickets.
   */
  warm(host: string, port: number): void {
    const key = `${host.toLowerCase()}:${port}`;
    if (this.#closed || this.#warming.has(key) || this.#hasFreshIdle(key)) return;
    if (this.#warming.size >= MAX_WARMING || this.#waiting.length > 0 || !this.#trySlot()) return;
    const pending = this.#dial(host, port, key).then(async (oc) => {
      // Closing it ends the handshake (and frees its slot).
      const timer = setTimeout(() => oc.close(), this.#opts.warmTimeoutMs ?? WARM_TIMEOUT_MS);
      try {
        // What the origin agreed to, offered only http/1.1, tells HTTP/2
        // clients' requests whether it may speak nothing but h2.
        const { alpnProtocol } = await oc.conn.handshake();
        this.#noteH1(key, alpnProtocol === "http/1.1");
      } catch (err) {
        oc.close(); // gives its slot back
        this.#noteH1(key, false);
        throw err;
      } finally {
        clearTimeout(timer);
      }
      return oc;
    }).catch(() => null);
    this.#warming.set(key, pending);
    pending.then((oc) => {
      if (this.#warming.get(key) !== pending) return;
      this.#warming.delete(key);
      if (oc) this.#release(oc);
    });
  }

  /**
   * Sends a request and returns the response head with its body: over
   * HTTP/1.1, or over HTTP/2 when the origin does not speak HTTP/1.1 or, for
   * an HTTP/2 client's request (`http2`), it asks for trailers. A protocol
   * switch (`upgrade`) is only asked over HTTP/1.1.
   */
  request(req: OriginRequest): Promise<OriginResponse> {
    const h2 = req.http2 ?? NO_TRAILERS;
    // Most requests: straight to HTTP/1.1 (no turn spent on the choice).
    return req.upgrade !== undefined || (!h2.te && this.#takesH1(req))
      ? this.#requestH1(req)
      : this.#requestEither(req, h2);
  }

  /**
   * The origin is known to speak HTTP/1.1 (it answered on a kept connection,
   * or agreed to http/1.1 offered both), and no connection opened ahead may
   * still tell otherwise.
   */
  #takesH1(req: OriginRequest): boolean {
    const key = `${req.host.toLowerCase()}:${req.port}`;
    return !this.#warming.has(key) && !this.#h1Refused.has(key) &&
      ((this.#idle.get(key)?.length ?? 0) > 0 || this.#alpn.get(key) === "http/1.1");
  }

  /**
   * A request over HTTP/2 when it carries `te: trailers` (from an HTTP/2
   * client) or the origin may not speak HTTP/1.1; else over HTTP/1.1.
   */
  async #requestEither(
    req: OriginRequest,
    h2: NonNullable<OriginRequest["http2"]>,
  ): Promise<OriginResponse> {
    const key = `${req.host.toLowerCase()}:${req.port}`;
    if (h2.te) return this.#requestH2(req, h2);
    // The connection opened ahead tells whether the origin speaks HTTP/1.1.
    const warming = this.#warming.get(key);
    if (warming !== undefined) await untilSettled(warming, req.signal);
    if (this.#h1Refused.has(key)) return this.#requestH2(req, h2);
    if (this.#takesH1(req)) return this.#requestH1(req);
    // A new connection: nothing is sent on it before its handshake shows that
    // the origin agreed to http/1.1.
    const oc = await this.#connect(req.host, req.port, key, req.signal);
    let alpn: string | null = null;
    // An origin may never finish the handshake: a request given up closes
    // the connection (its slot is freed), and so does the time limit of
    // connections opened ahead.
    const { signal } = req;
    const cancel = () => oc.close();
    signal?.addEventListener("abort", cancel);
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      oc.close();
    }, this.#opts.warmTimeoutMs ?? WARM_TIMEOUT_MS);
    try {
      alpn = (await oc.conn.handshake()).alpnProtocol;
    } catch {
      // Refused (an h2-only origin may answer no_application_protocol); tried again offering h2.
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", cancel);
    }
    if (signal?.aborted) {
      oc.close();
      throw whyAborted(signal, signal.reason);
    }
    if (late) {
      throw new Error(
        `the TLS handshake with ${req.host}:${req.port} took longer than ${
          this.#opts.warmTimeoutMs ?? WARM_TIMEOUT_MS
        } ms`,
      );
    }
    this.#noteH1(key, alpn === "http/1.1");
    if (alpn === "http/1.1") return this.#requestH1(req, oc);
    oc.close();
    return this.#requestH2(req, h2);
  }

  /** Notes whether an HTTP/1.1-only handshake with an origin agreed on http/1.1. */
  #noteH1(key: string, agreed: boolean): void {
    if (agreed) return void this.#h1Refused.delete(key);
    this.#h1Refused.add(key);
    if (this.#h1Refused.size > MAX_REMEMBERED) {
      this.#h1Refused.delete(this.#h1Refused.values().next().value!);
    }
  }

  /** Over HTTP/1.1; `fresh`: a connection just opened for it. */
  async #requestH1(req: OriginRequest, fresh?: OriginConn): Promise<OriginResponse> {
    const key = `${req.host.toLowerCase()}:${req.port}`;
    // A pooled connection the origin has since closed fails before any
    // response byte: a body-less request is then retried once on a new one.
    for (let attempt = 0;; attempt++) {
      const { signal } = req;
      const pooled = attempt === 0 && fresh === undefined
        ? this.#takeIdle(key) ?? await this.#takeWarming(key, signal)
        : undefined;
      const oc: OriginConn = pooled ?? fresh ??
        await this.#connect(req.host, req.port, key, signal);
      fresh = undefined;
      if (signal?.aborted) {
        this.#release(oc);
        throw whyAborted(signal, signal.reason);
      }
      const cancel = () => oc.close();
      signal?.addEventListener("abort", cancel);
      try {
        return await this.#exchange(oc, req, pooled !== undefined);
      } catch (err) {
        oc.close();
        // A malformed body is the reason even when its stream was reset for it.
        if (err instanceof RequestBodyError) throw err;
        if (signal?.aborted) throw whyAborted(signal, err);
        if (pooled && req.body === null && err instanceof StaleConnection) continue;
        throw err instanceof StaleConnection ? err.cause : err;
      } finally {
        signal?.removeEventListener("abort", cancel);
      }
    }
  }

  /**
   * Over HTTP/2 when the origin picks h2; over HTTP/1.1 when it picked
   * http/1.1 (that connection is used for it, and later requests go
   * straight to the HTTP/1.1 pool).
   */
  async #requestH2(req: OriginRequest, h2: NonNullable<OriginRequest["http2"]>) {
    const key = `${req.host.toLowerCase()}:${req.port}`;
    if (this.#alpn.get(key) === "http/1.1") return this.#requestH1(req);
    const { signal } = req;
    const body = req.body === null ? null : new BodySource(req.body);
    // An IPv6 literal is written in brackets in :authority.
    const host = req.host.includes(":") ? `[${req.host}]` : req.host;
    const fields = requestFields({
      method: req.method,
      authority: req.port === 443 ? host : `${host}:${req.port}`,
      target: req.target,
      headers: req.headers,
      te: h2.te,
    });
    for (let attempt = 0;; attempt++) {
      let conn: OriginConn | OriginH2Connection | null;
      try {
        // Taking a connection and opening the stream on it happen in one
        // turn: across an await, other requests may have filled it.
        for (let round = 0;; round++) {
          conn = await this.#h2Connection(req, key);
          if (!(conn instanceof OriginH2Connection) || conn.available) break;
          if (round === MAX_ROUNDS) throw new Error("the origin takes no new HTTP/2 stream");
        }
      } catch (err) {
        body?.cancel(err);
        if (signal?.aborted) throw whyAborted(signal, err);
        throw err;
      }
      if (!(conn instanceof OriginH2Connection)) {
        return this.#requestH1(
          body === null ? req : { ...req, body: body.rest() },
          conn ?? undefined,
        );
      }
      if (signal?.aborted) {
        body?.cancel(signal.reason);
        throw whyAborted(signal, signal.reason);
      }
      const s = conn.open({
        method: req.method,
        fields,
        trailers: h2.trailers,
        onBodyBytes: req.onBodyBytes,
      }, body);
      try {
        return await this.#exchangeH2(s, req);
      } catch (err) {
        // A malformed body is the reason even when its stream was reset for it.
        if (err instanceof RequestBodyError) throw err;
        if (signal?.aborted) throw whyAborted(signal, err);
        // The chunk a refused stream had read is put back once its sending
        // stops. Only then: another failure is told at once, not once the
        // client sends more of its body (it may wait for the response).
        if (s.retry === "refused" && !(body?.started ?? false)) await s.sent;
        // Not processed: sent again if none of its body went out. Unanswered
        // on a connection used before (the origin may have closed it while
        // idle): a body-less one is sent again once, as over HTTP/1.1.
        const again = s.retry === "refused"
          ? !(body?.started ?? false) && attempt < H2_RETRIES
          : s.retry === "unanswered" && body === null && s.reused && attempt === 0;
        if (again) continue;
        body?.cancel(err);
        throw err;
      }
    }
  }

  /**
   * A connection for an HTTP/2 client's request: a kept HTTP/2 one with room,
   * the one a dial under way brings, or a new one (which may turn out
   * HTTP/1.1); null when the origin picked http/1.1 meanwhile (the HTTP/1.1
   * pool serves it then).
   */
  async #h2Connection(
    req: OriginRequest,
    key: string,
  ): Promise<OriginConn | OriginH2Connection | null> {
    for (;;) {
      const kept = this.#h2.take(key);
      if (kept !== undefined) return kept;
      const pending = this.#h2.pending(key);
      if (pending === undefined) break;
      // A request given up stops waiting (an origin may never send its SETTINGS).
      await untilSettled(pending, req.signal);
      // The origin picked http/1.1: its connection went to the request that opened it.
      if (this.#alpn.get(key) === "http/1.1") return null;
    }
    const dial = this.#slot(req.signal).then(() =>
      this.#dialAlpn(req.host, req.port, key, req.signal)
    );
    this.#h2.track(key, dial);
    return await dial;
  }

  /**
   * Opens a connection offering h2 and http/1.1 (a slot already taken) and
   * remembers the origin's choice: an HTTP/2 connection (kept in the pool),
   * or an HTTP/1.1 one.
   */
  async #dialAlpn(
    host: string,
    port: number,
    key: string,
    signal?: AbortSignal,
  ): Promise<OriginConn | OriginH2Connection> {
    const tls = await this.#dialTls(host, port, H2_ALPN);
    let alpn: string | null;
    // An origin may never finish the handshake: the request that dials
    // closes the connection (its slot is freed) once given up.
    const cancel = () => closeQuietly(tls);
    signal?.addEventListener("abort", cancel);
    try {
      if (signal?.aborted) throw whyAborted(signal, signal.reason);
      alpn = (await tls.handshake()).alpnProtocol;
    } catch (err) {
      closeQuietly(tls);
      throw signal?.aborted ? whyAborted(signal, err) : err;
    } finally {
      signal?.removeEventListener("abort", cancel);
    }
    if (this.#closed) {
      // Closed during the handshake: kept nowhere.
      closeQuietly(tls);
      throw new Error("the origin client is closed");
    }
    this.#alpn.delete(key);
    this.#alpn.set(key, alpn === "h2" ? "h2" : "http/1.1");
    if (this.#alpn.size > MAX_REMEMBERED) this.#alpn.delete(this.#alpn.keys().next().value!);
    // Offered both, it took http/1.1 (or agreed on nothing, without ALPN): it speaks it.
    if (alpn !== "h2") {
      this.#noteH1(key, true);
      return new OriginConn(tls, key);
    }
    const conn = new OriginH2Connection(tls, key, { onGone: (c) => this.#h2.remove(c) });
    this.#h2.add(conn);
    return conn;
  }

  /**
   * Opens an HTTP/2 connection to an origin ahead of its first request, when
   * an HTTP/2 client's ClientHello for it came (see {@linkcode warm}): only
   * for an origin that HTTP/2 clients' requests were sent to over HTTP/2
   * before (gRPC services), and none is kept or being opened.
   */
  warmH2(host: string, port: number): void {
    const key = `${host.toLowerCase()}:${port}`;
    if (this.#closed || this.#alpn.get(key) !== "h2") return;
    if (this.#h2.take(key) !== undefined || this.#h2.dialing(key) !== undefined) return;
    if (this.#warmingH2 >= MAX_WARMING || this.#waiting.length > 0 || !this.#trySlot()) return;
    this.#warmingH2++;
    const timeout = AbortSignal.timeout(this.#opts.warmTimeoutMs ?? WARM_TIMEOUT_MS);
    const dial = this.#dialAlpn(host, port, key, timeout);
    this.#h2.track(key, dial);
    // An HTTP/1.1 connection waits in that pool for the first request.
    dial.then((conn) => conn instanceof OriginConn && this.#release(conn), () => {})
      .finally(() => this.#warmingH2--);
  }

  /** One exchange on an HTTP/2 stream: the response head, and its body whole or as a stream. */
  async #exchangeH2(s: OriginH2Stream, req: OriginRequest): Promise<OriginResponse> {
    const { signal } = req;
    const cancel = () => s.cancel(new RequestCancelled(signal!.reason));
    signal?.addEventListener("abort", cancel);
    try {
      const head = await s.head;
      const noBody = bodiless(req.method, head.status);
      const end = new ResponseEnd();
      // Told once the request body has settled too, so that its byte count is final.
      const notify = (n: number, whole: boolean) => s.sent.then(() => end.settle(n, whole));
      const res: OriginResponse = {
        status: head.status,
        statusText: "",
        // Without content the length describes the resource: kept, as over HTTP/1.1.
        headers: head.headers.filter(([k]) =>
          !PROXY_FIELDS.has(k) && (k !== "content-length" || noBody)
        ),
        body: null,
        length: noBody ? 0 : head.length,
        onEnd: (fn) => end.on(fn),
        trailers: () => s.trailers(),
      };
      if (noBody || s.ended || (head.length !== null && head.length <= WHOLE_BODY_LIMIT)) {
        const body = await s.readAll();
        // A stream the head ended (gRPC's trailers-only answer) stays so: no
        // body, no trailers, END_STREAM on the HEADERS frame.
        if (!noBody && (body.byteLength > 0 || s.trailers() !== null || head.length !== null)) {
          res.body = body;
        }
        notify(body.byteLength, true);
        return res;
      }
      res.body = s.body(notify);
      return res;
    } catch (err) {
      if (signal?.aborted && !(err instanceof RequestBodyError)) throw whyAborted(signal, err);
      throw err;
    } finally {
      signal?.removeEventListener("abort", cancel);
    }
  }

  /** Closes every idle connection; later requests fail. */
  close(): void {
    this.#closed = true;
    this.#h2.close();
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    // Waiting requests get a slot, and fail to dial with it.
    for (const given of this.#waiting.splice(0)) {
      this.#open++;
      given();
    }
    for (const pending of this.#warming.values()) pending.then((oc) => oc?.close());
    this.#warming.clear();
    for (const list of this.#idle.values()) for (const oc of list) oc.close();
    this.#idle.clear();
    this.#idleOrder.clear();
  }

  /**
   * The connection being opened ahead for `key`, once ready. A request given
   * up meanwhile stops waiting at once; the connection then goes to the pool.
   */
  async #takeWarming(key: string, signal?: AbortSignal): Promise<OriginConn | undefined> {
    const pending = this.#warming.get(key);
    if (pending === undefined) return undefined;
    this.#warming.delete(key);
    try {
      await untilSettled(pending, signal);
    } catch (err) {
      pending.then((oc) => oc && this.#release(oc));
      throw err;
    }
    return (await pending) ?? undefined;
  }

  /**
   * Whether {@linkcode #takeIdle} would hand out a pooled connection: its
   * newest is not yet idle for idleMs. An older one is closed when taken
   * (the sweep may not have come yet), so it must not stop a warm-up.
   */
  #hasFreshIdle(key: string): boolean {
    const newest = this.#idle.get(key)?.at(-1);
    return newest !== undefined && newest.idleSince >= this.#staleBefore();
  }

  /** Pooled connections released before this time (performance.now()) are not used again. */
  #staleBefore(): number {
    return performance.now() - this.#idleMs;
  }

  #takeIdle(key: string): OriginConn | undefined {
    const list = this.#idle.get(key);
    const limit = this.#staleBefore();
    for (let oc = list?.pop(); oc !== undefined; oc = list!.pop()) {
      this.#idleOrder.delete(oc);
      if (list!.length === 0) this.#idle.delete(key);
      if (oc.idleSince >= limit) {
        oc.unwatch();
        return oc;
      }
      oc.close(); // idle too long: the origin may close it any moment
    }
    return undefined;
  }

  /** Takes a connection out of the idle pool and closes it. */
  #drop(oc: OriginConn): void {
    oc.close();
    this.#idleOrder.delete(oc);
    const list = this.#idle.get(oc.key);
    const at = list?.indexOf(oc) ?? -1;
    if (at === -1) return;
    list!.splice(at, 1);
    if (list!.length === 0) this.#idle.delete(oc.key);
  }

  #release(oc: OriginConn): void {
    // Bytes beyond the response: not reusable. A request waiting for a slot gets this one's.
    if (this.#closed || oc.buffered > 0 || this.#waiting.length > 0) return oc.close();
    let list = this.#idle.get(oc.key);
    if (!list) this.#idle.set(oc.key, list = []);
    if (list.length >= (this.#opts.maxIdle ?? 32)) return oc.close();
    oc.idleSince = performance.now();
    list.push(oc);
    this.#idleOrder.add(oc);
    oc.watch(() => this.#drop(oc));
    // Bounded in all, whatever the number of origins: the least recently used go first.
    if (this.#idleOrder.size > (this.#opts.maxIdleTotal ?? 256)) {
      this.#drop(this.#idleOrder.values().next().value!);
    }
    // One sweep timer per client, not one timer per request.
    if (this.#sweeper === undefined) {
      const every = this.#idleMs / 2;
      this.#sweeper = setInterval(() => this.#sweep(), every);
      Deno.unrefTimer(this.#sweeper);
    }
  }

  /** Closes connections idle longer than idleMs. */
  #sweep(): void {
    const limit = this.#staleBefore();
    for (const [key, list] of this.#idle) {
      const keep = list.filter((oc) =>
        oc.idleSince >= limit || (oc.close(), this.#idleOrder.delete(oc), false)
      );
      if (keep.length === 0) this.#idle.delete(key);
      else this.#idle.set(key, keep);
    }
  }

  /** Opens a connection once a slot is free. */
  async #connect(
    host: string,
    port: number,
    key: string,
    signal?: AbortSignal,
  ): Promise<OriginConn> {
    await this.#slot(signal);
    return await this.#dial(host, port, key);
  }

  /**
   * Opens a connection with a slot already taken; the slot is given back
   * when the connection closes, whoever closes it (a body or tunnel handed
   * to the caller included), or at once when the dial fails.
   */
  async #dial(host: string, port: number, key: string): Promise<OriginConn> {
    return new OriginConn(await this.#dialTls(host, port, H1_ALPN), key);
  }

  /** The TLS connection of {@linkcode #dial}, offering `alpn`; its slot is freed when it closes. */
  async #dialTls(host: string, port: number, alpn: string[]): Promise<Deno.TlsConn> {
    let tcp: Deno.TcpConn | undefined;
    try {
      if (this.#closed) throw new Error("the origin client is closed");
      tcp = await dialTunnel(this.#opts.upstream, host, port) as Deno.TcpConn;
      tcp.setNoDelay?.(true);
      const tls = await Deno.startTls(tcp, {
        hostname: host,
        caCerts: this.#opts.caCerts,
        alpnProtocols: alpn,
      });
      const close = tls.close.bind(tls);
      let open = true;
      tls.close = () => {
        if (open) {
          open = false;
          this.#freeSlot();
        }
        close();
      };
      return tls;
    } catch (err) {
      try {
        tcp?.close();
      } catch {
        // already closed
      }
      this.#freeSlot();
      throw err;
    }
  }

  /** `reused`: the connection came from the pool (the origin may have closed it since). */
  async #exchange(oc: OriginConn, req: OriginRequest, reused: boolean): Promise<OriginResponse> {
    const authority = req.port === 443 ? req.host : `${req.host}:${req.port}`;
    let head = `${req.method} ${req.target} HTTP/1.1\r\nhost: ${authority}\r\n`;
    if (req.upgrade !== undefined) head += `connection: upgrade\r\nupgrade: ${req.upgrade}\r\n`;
    let chunked = false;
    if (req.body !== null) {
      chunked = !req.headers.some(([k]) => k === "content-length");
      if (chunked) head += "transfer-encoding: chunked\r\n";
    }
    for (const [k, v] of req.headers) head += `${k}: ${v}\r\n`;
    head += "\r\n";
    // The response is awaited while the head is still being written (one
    // turn of the event loop less per request); a failed write closes the
    // connection, which fails the read (a stale reused connection: retried).
    const wrote = writeAll(oc.conn, latin1Encode(head));
    wrote.catch(() => oc.close());
    // The response may start before the request body ends (an early 413).
    const sending = req.body === null
      ? wrote
      : wrote.then(() => sendBody(oc.conn, req.body!, chunked, req.onBodyBytes));
    // A request body that fails (the client went away, or broke its
    // framing) ends the exchange: the origin sees it cut short.
    let bodyFailure: unknown = null;
    sending.catch((err) => {
      bodyFailure = err;
      oc.close();
    });
    let parsed: Head;
    try {
      parsed = await this.#readHead(oc, reused);
      // Interim responses (100 Continue, 103 Early Hints) are skipped.
      const switching = () => parsed.status === 101 && req.upgrade !== undefined;
      while (parsed.status >= 100 && parsed.status < 200 && !switching()) {
        parsed = await this.#readHead(oc, false);
      }
    } catch (err) {
      // The client's own malformed body, not the origin, is what failed.
      if (bodyFailure instanceof RequestBodyError) throw bodyFailure;
      throw err;
    }
    if (parsed.status === 101) {
      sending.catch(() => {});
      // Over once the relay is: the bytes relayed each way.
      const end = new ResponseEnd();
      return {
        status: 101,
        statusText: parsed.statusText,
        headers: parsed.headers.filter(([k]) => !HOP_BY_HOP.has(k)),
        body: null,
        length: 0,
        onEnd: (fn) => end.on(fn),
        tunnel: {
          conn: oc.conn,
          buffered: oc.take(oc.buffered),
          ended: (out, inn) => end.settle(inn, true, out),
        },
      };
    }
    const bodyDone = sending.then(() => true, () => false);
    const { framing, reusable } = responseFraming(req.method, parsed.status, parsed.headers);
    // The length is the client side's framing to set, except where there is
    // no body and it describes the resource (HEAD, 304).
    const listed = fieldTokens(parsed.headers, "connection");
    const headers = parsed.headers.filter(([k]) =>
      !HOP_BY_HOP.has(k) && (k !== "content-length" || framing.kind === "none") &&
      !listed.includes(k)
    );
    const end = new ResponseEnd();
    // Told once the request body has settled too, so that its byte count is final.
    const notify = (n: number, whole: boolean) => bodyDone.then(() => end.settle(n, whole));
    const ended = (n: number, ok: boolean) => {
      notify(n, ok);
      // Reused only when the request body also went out whole.
      if (ok && reusable && req.upgrade === undefined) {
        bodyDone.then((sent) => sent ? this.#release(oc) : oc.close());
      } else oc.close();
    };
    const res: OriginResponse = {
      status: parsed.status,
      statusText: parsed.statusText,
      headers,
      body: null,
      length: framing.kind === "length" ? framing.length : framing.kind === "none" ? 0 : null,
      onEnd: (fn) => end.on(fn),
    };
    if (framing.kind === "none") {
      ended(0, true);
      return res;
    }
    if (framing.kind === "length" && framing.length <= WHOLE_BODY_LIMIT) {
      while (oc.buffered < framing.length) {
        if (!await oc.fill()) throw new OriginProtocolError("connection closed inside the body");
      }
      res.body = oc.take(framing.length);
      ended(framing.length, true);
      return res;
    }
    if (framing.kind === "length" && oc.buffered <= framing.length) {
      // The caller reads the rest off the connection, then hands it back:
      // pooled again when the body went whole, as for any other body (a
      // download must not cost the next request a new connection).
      res.sized = {
        conn: oc.conn,
        length: framing.length,
        buffered: oc.take(oc.buffered),
        ended: (delivered) => ended(delivered, delivered === framing.length),
      };
      return res;
    }
    res.body = bodyStream(oc, framing, ended);
    return res;
  }

  async #readHead(oc: OriginConn, reused: boolean): Promise<Head> {
    let scanned = oc.start;
    for (;;) {
      for (let i = Math.max(scanned, oc.start + 3); i < oc.end; i++) {
        const b = oc.buf;
        if (b[i] === 10 && b[i - 1] === 13 && b[i - 2] === 10 && b[i - 3] === 13) {
          const text = latin1Decode(b, oc.start, i - 3);
          oc.start = i + 1;
          return parseResponseHead(text);
        }
      }
      if (oc.buffered > MAX_HEAD) throw new OriginProtocolError("response head too large");
      const offset = oc.end - oc.start;
      let more: boolean;
      try {
        more = await oc.fill();
      } catch (err) {
        if (reused && oc.buffered === 0) throw new StaleConnection(err);
        throw err;
      }
      if (!more) {
        const err = new OriginProtocolError("the origin closed the connection without a response");
        if (reused && oc.buffered === 0) throw new StaleConnection(err);
        throw err;
      }
      scanned = oc.start + Math.max(0, offset - 3);
    }
  }
}

/** The client gave up on the request ({@linkcode OriginRequest.signal}). */
export class RequestCancelled extends Error {
  constructor(cause: unknown) {
    super("the client cancelled the request", { cause });
  }
}

/**
 * Why a request whose signal aborted ended: its own malformed body (an
 * HTTP/2 stream reset for it), or else the client giving it up.
 */
function whyAborted(signal: AbortSignal, cause: unknown): Error {
  return signal.reason instanceof RequestBodyError ? signal.reason : new RequestCancelled(cause);
}

/** Waits for `pending` to settle, or rejects once `signal` aborts. */
function untilSettled(pending: Promise<unknown>, signal?: AbortSignal): Promise<void> {
  if (signal === undefined) return pending.then(() => {}, () => {});
  if (signal.aborted) return Promise.reject(whyAborted(signal, signal.reason));
  return new Promise<void>((resolve, reject) => {
    const abort = () => reject(whyAborted(signal, signal.reason));
    signal.addEventListener("abort", abort, { once: true });
    pending.then(() => {}, () => {}).then(() => {
      signal.removeEventListener("abort", abort);
      if (signal.aborted) reject(whyAborted(signal, signal.reason));
      else resolve();
    });
  });
}

/** A kept-alive connection that turned out to be closed; the request may be retried. */
class StaleConnection extends Error {
  constructor(cause: unknown) {
    super("stale connection", { cause });
  }
}

/** Streams a framed body off the connection; `ended(bytes, cleanly)` once at the end. */
function bodyStream(
  oc: OriginConn,
  framing: Framing,
  ended: (bytes: number, ok: boolean) => void,
): ReadableStream<Uint8Array> {
  let total = 0;
  let remaining = framing.kind === "length" ? framing.length : 0;
  let inChunk = false;
  let finished = false;
  const finish = (ok: boolean) => {
    if (finished) return;
    finished = true;
    ended(total, ok);
  };
  /** Up to `max` bytes: buffered ones first, then straight off the connection. */
  const read = async (max: number): Promise<Uint8Array | null> => {
    if (oc.buffered > 0) return oc.take(max);
    const chunk = new Uint8Array(Math.min(max, READ_SIZE));
    const n = await oc.conn.read(chunk);
    return n === null ? null : chunk.subarray(0, n);
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        if (framing.kind === "length") {
          if (remaining === 0) {
            controller.close();
            return finish(true);
          }
          const got = await read(remaining);
          if (got === null) throw new OriginProtocolError("connection closed inside the body");
          remaining -= got.byteLength;
          total += got.byteLength;
          controller.enqueue(got);
          if (remaining === 0) {
            controller.close();
            finish(true);
          }
          return;
        }
        if (framing.kind === "close") {
          const got = await read(READ_SIZE);
          if (got === null) {
            controller.close();
            return finish(false);
          }
          total += got.byteLength;
          controller.enqueue(got);
          return;
        }
        // chunked
        if (!inChunk) {
          const sizeLine = await oc.line();
          const size = chunkSize(sizeLine);
          if (size === null) {
            throw new OriginProtocolError(`invalid chunk size: ${sizeLine.slice(0, 40)}`);
          }
          remaining = size;
          if (remaining === 0) {
            // Trailers (dropped) up to the empty line.
            while ((await oc.line()) !== "");
            controller.close();
            return finish(true);
          }
          inChunk = true;
        }
        const got = await read(remaining);
        if (got === null) throw new OriginProtocolError("connection closed inside a chunk");
        remaining -= got.byteLength;
        total += got.byteLength;
        controller.enqueue(got);
        if (remaining === 0) {
          if ((await oc.line()) !== "") throw new OriginProtocolError("chunk not followed by CRLF");
          inChunk = false;
        }
      } catch (err) {
        finish(false);
        controller.error(err);
      }
    },
    cancel() {
      finish(false);
    },
  }, { highWaterMark: 4 });
}

async function sendBody(
  conn: Deno.Conn,
  body: ReadableStream<Uint8Array>,
  chunked: boolean,
  count?: (n: number) => void,
): Promise<void> {
  let sent = 0;
  for await (const chunk of body) {
    if (chunk.byteLength === 0) continue;
    if (chunked) {
      const size = enc.encode(`${chunk.byteLength.toString(16)}\r\n`);
      const framed = new Uint8Array(size.length + chunk.byteLength + 2);
      framed.set(size);
      framed.set(chunk, size.length);
      framed.set([13, 10], size.length + chunk.byteLength);
      await writeAll(conn, framed);
    } else await writeAll(conn, chunk);
    sent += chunk.byteLength;
    count?.(sent);
  }
  if (chunked) await writeAll(conn, enc.encode("0\r\n\r\n"));
}
