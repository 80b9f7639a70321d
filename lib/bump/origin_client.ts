/**
 * forgekit's own HTTP/1.1 client for bumped requests: kept-alive TLS
 * connections to each origin, pooled, verified against Deno's roots plus the
 * session's extra CAs, dialled directly or through the upstream proxy.
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
import { writeAll } from "./conn_io.ts";
import { latin1Decode, latin1Encode } from "./latin1.ts";
import { type BumpReply, RequestBodyError } from "./exchange.ts";

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
   * request fails.
   */
  signal?: AbortSignal;
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
   * After a `101` to a request with `upgrade`: the connection, now the
   * caller's, and any bytes the origin sent after the head.
   */
  tunnel?: BumpReply["tunnel"];
  /**
   * A body of known length too large to come whole: its first bytes
   * (`buffered`) and the connection the rest is read from (the caller's
   * from then on, read with gathered reads and closed; `body` is null).
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
  /** An idle connection is closed after this long. */
  idleMs?: number;
  /** Origin connections open at once, in all (default {@linkcode MAX_ORIGIN_CONNECTIONS}). */
  maxConnections?: number;
}

/**
 * Origin connections open at once, in use, idle or being opened. Each
 * HTTP/2 stream of a client needs one of its own (origins are spoken to in
 * HTTP/1.1), so without a bound a workload could make forgekit open 100
 * per client connection and run the process out of file descriptors. A
 * parallel build keeps a few dozen requests in flight; past this bound a
 * request waits for a connection to close (or its client to give up).
 */
export const MAX_ORIGIN_CONNECTIONS = 512;
/**
 * Connections opened ahead of a request ({@linkcode OriginClient.warm}) at
 * once: they only save a little time, and a workload sending CONNECTs to
 * many hosts without using them must not make forgekit dial each one.
 */
export const MAX_WARMING = 16;

/** The largest response body passed on as one piece rather than streamed. */
const WHOLE_BODY_LIMIT = 64 * 1024;
const READ_SIZE = 64 * 1024;

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

  constructor(options: OriginClientOptions) {
    this.#opts = options;
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
    }
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
    if (this.#closed || this.#warming.has(key) || (this.#idle.get(key)?.length ?? 0) > 0) return;
    if (this.#warming.size >= MAX_WARMING || this.#waiting.length > 0 || !this.#trySlot()) return;
    const pending = this.#dial(host, port, key).then(async (oc) => {
      try {
        await oc.conn.handshake();
      } catch (err) {
        oc.close(); // gives its slot back
        throw err;
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

  /** Sends a request and returns the response head with its body. */
  async request(req: OriginRequest): Promise<OriginResponse> {
    const key = `${req.host.toLowerCase()}:${req.port}`;
    // A pooled connection the origin has since closed fails before any
    // response byte: a body-less request is then retried once on a new one.
    for (let attempt = 0;; attempt++) {
      const pooled = attempt === 0
        ? this.#takeIdle(key) ?? await this.#takeWarming(key)
        : undefined;
      const { signal } = req;
      const oc: OriginConn = pooled ?? await this.#connect(req.host, req.port, key, signal);
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

  /** Closes every idle connection; later requests fail. */
  close(): void {
    this.#closed = true;
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

  async #takeWarming(key: string): Promise<OriginConn | undefined> {
    const pending = this.#warming.get(key);
    if (pending === undefined) return undefined;
    this.#warming.delete(key);
    return (await pending) ?? undefined;
  }

  #takeIdle(key: string): OriginConn | undefined {
    const list = this.#idle.get(key);
    const limit = performance.now() - (this.#opts.idleMs ?? 30_000);
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
      const every = (this.#opts.idleMs ?? 30_000) / 2;
      this.#sweeper = setInterval(() => this.#sweep(), every);
      Deno.unrefTimer(this.#sweeper);
    }
  }

  /** Closes connections idle longer than idleMs. */
  #sweep(): void {
    const limit = performance.now() - (this.#opts.idleMs ?? 30_000);
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
    let tcp: Deno.TcpConn | undefined;
    try {
      if (this.#closed) throw new Error("the origin client is closed");
      tcp = await dialTunnel(this.#opts.upstream, host, port) as Deno.TcpConn;
      tcp.setNoDelay?.(true);
      const tls = await Deno.startTls(tcp, {
        hostname: host,
        caCerts: this.#opts.caCerts,
        alpnProtocols: ["http/1.1"],
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
      return new OriginConn(tls, key);
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
      // Never pooled: the caller reads the body and closes the connection.
      res.sized = {
        conn: oc.conn,
        length: framing.length,
        buffered: oc.take(oc.buffered),
        ended: (delivered) => notify(delivered, delivered === framing.length),
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
