/**
 * forgekit's HTTP/2 client towards origins (RFC 9113), for requests that
 * came to forgekit over HTTP/2 when the origin chose h2 in ALPN. gRPC needs
 * HTTP/2 end to end, trailers both ways included, and many gRPC servers
 * speak nothing else. `OriginClient` (`origin_client.ts`) decides when it is
 * used; this module does the I/O around the protocol
 * (`h2_client_session.ts`):
 *
 * - {@linkcode OriginH2Connection}: a TLS connection running a session.
 *   Request bodies are sent within the origin's windows; response bodies
 *   are streams whose windows reopen only as they are read, so a slow
 *   client slows its origin stream down and memory stays bounded.
 * - {@linkcode H2Pool}: the connections kept per origin, each carrying up to
 *   `MAX_STREAMS` streams (fewer when the origin says so).
 *
 * @module
 */
import { connectionErrorCode, ErrorCode } from "./h2_frames.ts";
import {
  H2ClientSession,
  type ResponseHead,
  type Retry,
  type SessionOptions,
  type StreamEvents,
  UNSENT_LIMIT,
} from "./h2_client_session.ts";
import { type ByteConn, closeQuietly, concat, writeAll } from "./conn_io.ts";

/** Response body frames are gathered into buffers of up to this size. */
const GATHER = 64 * 1024;
/**
 * The most response body bytes handed on as one piece. Every write to the
 * client has a high fixed cost, so while the origin's data comes in full
 * reads, pieces are gathered up to this size (as `gatheredReads` does for
 * HTTP/1.1 origins); they wait at most one timer tick for it.
 */
const PIECE = 256 * 1024;
/** A read this long came back full (a whole TLS record): more is probably waiting. */
const FULL_READ = 16 * 1024 - 64;
const READ_SIZE = 64 * 1024;
const EMPTY = new Uint8Array(0);

/** A request for {@linkcode OriginH2Connection.open}. */
export interface H2Request {
  method: string;
  /** The header list, pseudo-fields first (`requestFields` in `h2_client_session.ts`). */
  fields: [string, string][];
  /** The request's trailers, asked for once its body has ended. */
  trailers?: () => [string, string][] | null;
  /** Counts request body bytes as they are sent. */
  onBodyBytes?: (n: number) => void;
}

/**
 * A request body read once across the attempts of one request: a chunk read
 * for a stream the origin refused before any of it went out is sent again
 * by the next attempt.
 *
 * @example
 * ```ts
 * const body = new BodySource(req.body);
 * const chunk = await body.next(); // the stream was refused: put it back
 * if (chunk !== null) body.unread(chunk);
 * ```
 */
export class BodySource {
  /** Some of the body went out. */
  started = false;
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #back: Uint8Array | null = null;

  constructor(body: ReadableStream<Uint8Array>) {
    this.#reader = body.getReader();
  }

  /** The next chunk (never empty), or null at the end. */
  async next(): Promise<Uint8Array | null> {
    if (this.#back !== null) {
      const chunk = this.#back;
      this.#back = null;
      return chunk;
    }
    for (;;) {
      const r = await this.#reader.read();
      if (r.done) return null;
      if (r.value.byteLength > 0) return r.value;
    }
  }

  /** Puts a chunk back, for the next attempt. */
  unread(chunk: Uint8Array): void {
    this.#back = chunk;
  }

  /** What is left, as a stream (for an attempt over HTTP/1.1). */
  rest(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        const chunk = await this.next();
        if (chunk === null) controller.close();
        else controller.enqueue(chunk);
      },
      cancel: (reason) => this.cancel(reason),
    }, { highWaterMark: 0 });
  }

  /** Gives the body up. */
  cancel(reason?: unknown): void {
    this.#reader.cancel(reason).catch(() => {});
  }
}

/** One stream of an {@linkcode OriginH2Connection}: the request going out, the response coming in. */
export class OriginH2Stream implements StreamEvents {
  id = 0;
  /** The final response head; rejects with the stream's failure. */
  readonly head: Promise<ResponseHead>;
  /** Settles once the request body went out whole (true) or was given up (false). */
  sent: Promise<boolean> = Promise.resolve(true);
  /** How a failed stream may be sent again. */
  retry: Retry = null;
  /** Its connection had carried other streams before (the origin may have closed it since). */
  reused = false;
  #conn: OriginH2Connection;
  #gotHead = false;
  #resolveHead!: (head: ResponseHead) => void;
  #rejectHead!: (error: Error) => void;
  #queue: Uint8Array<ArrayBuffer>[] = [];
  #queued = 0;
  /** Room left in the queue's last buffer. */
  #spare = 0;
  /** Body bytes still to come by the declared length. */
  #left: number | null = null;
  #ended = false;
  #trailers: [string, string][] | null = null;
  #failure: Error | null = null;
  #wake: (() => void) | null = null;
  #windowWake: (() => void) | null = null;

  constructor(conn: OriginH2Connection) {
    this.#conn = conn;
    this.head = new Promise<ResponseHead>((resolve, reject) => {
      this.#resolveHead = resolve;
      this.#rejectHead = reject;
    });
    // Not every stream's head is awaited (a stream failed while being opened).
    this.head.catch(() => {});
  }

  /** The response arrived whole (END_STREAM). */
  get ended(): boolean {
    return this.#ended;
  }

  /** The stream failed (or was cancelled). */
  get failed(): boolean {
    return this.#failure !== null;
  }

  /** The response's trailers, once it has ended (null: none). */
  trailers(): [string, string][] | null {
    return this.#trailers;
  }

  response(head: ResponseHead): void {
    this.#gotHead = true;
    this.#left = head.length;
    this.#resolveHead(head);
  }

  data(bytes: Uint8Array): void {
    this.#queued += bytes.byteLength;
    if (this.#left !== null) this.#left -= bytes.byteLength;
    const queue = this.#queue;
    let rest = bytes;
    if (this.#spare > 0) {
      // The last buffer is filled first, so that only it has room to spare.
      const last = queue[queue.length - 1];
      const n = Math.min(this.#spare, rest.byteLength);
      const grown = new Uint8Array(last.buffer, last.byteOffset, last.byteLength + n);
      grown.set(rest.subarray(0, n), last.byteLength);
      queue[queue.length - 1] = grown;
      this.#spare -= n;
      rest = rest.subarray(n);
    }
    if (rest.byteLength > 0) {
      const size = Math.max(
        rest.byteLength,
        Math.min(GATHER, rest.byteLength + (this.#left ?? GATHER)),
      );
      const buf = new Uint8Array(size);
      buf.set(rest);
      queue.push(buf.subarray(0, rest.byteLength));
      this.#spare = size - rest.byteLength;
    }
    this.#notify();
  }

  end(trailers: [string, string][] | null): void {
    this.#ended = true;
    this.#trailers = trailers;
    this.#notify();
    // The request body may still be going (an early answer): it goes on.
  }

  fail(error: Error, retry: Retry): void {
    if (this.#failure !== null) return;
    this.#windowWake?.();
    // After a whole response, only the request body stops (RST_STREAM NO_ERROR, §8.1).
    if (this.#ended) return;
    this.#failure = error;
    this.retry = retry;
    if (!this.#gotHead) this.#rejectHead(error);
    this.#drop();
    this.#notify();
  }

  window(): void {
    this.#windowWake?.();
  }

  /**
   * Gives the stream up (the client went away, its request body failed):
   * RST_STREAM CANCEL to the origin for this stream only.
   */
  cancel(reason: Error): void {
    if (this.#failure !== null) return;
    this.#failure = reason;
    this.#conn.reset(this.id, ErrorCode.CANCEL);
    if (!this.#gotHead) this.#rejectHead(reason);
    this.#drop();
    this.#notify();
    this.#windowWake?.();
  }

  /** Waits for the whole body (it is small): its bytes. */
  async readAll(): Promise<Uint8Array<ArrayBuffer>> {
    while (!this.#ended) {
      if (this.#failure !== null) throw this.#failure;
      await this.#wait();
    }
    if (this.#failure !== null) throw this.#failure;
    const out = this.#queue.length === 1
      ? this.#queue[0]
      : concat(this.#queue) as Uint8Array<ArrayBuffer>;
    this.#conn.consumed(this.id, this.#queued);
    this.#queue = [];
    this.#queued = 0;
    this.#spare = 0;
    return out;
  }

  /**
   * The body as a stream, its windows reopened as it is read; `ended` is
   * told once, with the bytes passed on and whether the body came whole.
   */
  body(ended: (bytes: number, whole: boolean) => void): ReadableStream<Uint8Array> {
    let total = 0;
    let done = false;
    const finish = (whole: boolean) => {
      if (done) return;
      done = true;
      ended(total, whole);
    };
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        while (this.#queue.length === 0) {
          if (this.#failure !== null) {
            finish(false);
            throw this.#failure;
          }
          if (this.#ended) {
            controller.close();
            return finish(true);
          }
          await this.#wait();
        }
        await this.#gather();
        if (this.#failure !== null) {
          finish(false);
          throw this.#failure;
        }
        const chunk = this.#take();
        this.#conn.consumed(this.id, chunk.byteLength);
        total += chunk.byteLength;
        controller.enqueue(chunk);
        if (this.#queue.length === 0 && this.#ended && this.#failure === null) {
          controller.close();
          finish(true);
        }
      },
      cancel: (reason) => {
        finish(false);
        this.cancel(reason instanceof Error ? reason : new Error("the response was given up"));
      },
    }, { highWaterMark: 0 });
  }

  /**
   * While the origin's data comes in full reads, waits (one timer tick at
   * most) for a piece of PIECE bytes; a short read (the origin paused, as a
   * stream of events does) or the end hands on what there is at once.
   */
  async #gather(): Promise<void> {
    if (this.#queued >= PIECE || this.#ended || !this.#conn.reading) return;
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      this.#notify();
    }, 0);
    try {
      while (!late && this.#queued < PIECE && !this.#ended && this.#failure === null) {
        if (!this.#conn.reading) break;
        await this.#wait();
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /** Takes up to PIECE queued bytes as one piece. */
  #take(): Uint8Array<ArrayBuffer> {
    const queue = this.#queue;
    let n = queue[0].byteLength;
    let count = 1;
    while (count < queue.length && n + queue[count].byteLength <= PIECE) {
      n += queue[count++].byteLength;
    }
    const parts = queue.splice(0, count);
    if (queue.length === 0) this.#spare = 0;
    this.#queued -= n;
    return count === 1 ? parts[0] : concat(parts) as Uint8Array<ArrayBuffer>;
  }

  /** Waits until the send window may have opened, or the stream failed. */
  waitForWindow(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#windowWake = () => {
        this.#windowWake = null;
        resolve();
      };
    });
  }

  /** Lets the queued body go: the connection gets its window back. */
  #drop(): void {
    if (this.#queued > 0) this.#conn.consumed(this.id, this.#queued);
    this.#queue = [];
    this.#queued = 0;
    this.#spare = 0;
  }

  #wait(): Promise<void> {
    return new Promise<void>((resolve) => this.#wake = resolve);
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }
}

/** Options of {@linkcode OriginH2Connection}. */
export interface OriginH2Options {
  /** Told once, when the connection is over (closed, failed, or drained after a GOAWAY). */
  onGone?: (conn: OriginH2Connection) => void;
  /** The session's windows and stream limit (for tests). */
  session?: SessionOptions;
}

/**
 * One HTTP/2 connection to an origin (TLS with ALPN h2 done): runs an
 * {@linkcode H2ClientSession} over it, carrying many requests at once.
 *
 * @example
 * ```ts
 * const conn = new OriginH2Connection(tls, "api.example:443");
 * const s = conn.open({ method: "GET", fields: requestFields(req) }, null);
 * const head = await s.head; // then s.readAll() or s.body(ended), and s.trailers()
 * ```
 */
export class OriginH2Connection {
  /** The origin, `host:port`. */
  readonly key: string;
  /** When its last stream ended (performance.now()). */
  idleSince: number = performance.now();
  #conn: ByteConn;
  #session: H2ClientSession;
  #backlog: Uint8Array[] = [];
  /**
   * Bytes of frames other than request DATA in the backlog, and in the
   * write under way: bounded by `UNSENT_LIMIT` (an origin that reads
   * nothing).
   */
  #backlogControl = 0;
  #writingControl = 0;
  #writing: Promise<void> | null = null;
  #over: Error | null = null;
  #busy = false;
  #opened = 0;
  #reading = false;
  #onGone: OriginH2Options["onGone"];
  #settle_: (() => void) | null = null;
  /** Settles once the origin's SETTINGS came (or the connection ended). */
  readonly settled: Promise<void>;

  constructor(conn: ByteConn, key: string, options: OriginH2Options = {}) {
    this.#conn = conn;
    this.key = key;
    this.#onGone = options.onGone;
    this.#session = new H2ClientSession(options.session);
    this.settled = new Promise((resolve) => this.#settle_ = resolve);
    this.#session.start();
    this.#flush();
    this.#read();
  }

  /** Whether the origin's SETTINGS have come, so its stream limit is known. */
  get ready(): boolean {
    return this.#settle_ === null;
  }

  /** A stream can be opened on it now. */
  get available(): boolean {
    return this.#over === null && this.#session.canOpen;
  }

  /** Streams open on it. */
  get streams(): number {
    return this.#session.streams;
  }

  /** The connection has ended. */
  get over(): boolean {
    return this.#over !== null;
  }

  /** The last read came back full: more of what the origin sends is probably on its way. */
  get reading(): boolean {
    return this.#reading;
  }

  /**
   * Sends a request (only while {@linkcode available}); its body, when it
   * has one, goes out within the origin's windows.
   */
  open(req: H2Request, body: BodySource | null): OriginH2Stream {
    const s = new OriginH2Stream(this);
    s.id = this.#session.open(req.fields, body === null, s, req.method);
    s.reused = this.#opened++ > 0;
    this.#busy = true;
    this.#flush();
    if (body !== null) s.sent = this.#send(s, body, req);
    return s;
  }

  /** Response body bytes of stream `id` were read or let go. */
  consumed(id: number, n: number): void {
    if (this.#over !== null) return;
    this.#session.consumed(id, n);
    this.#flush();
  }

  /** Resets one stream. */
  reset(id: number, code: number): void {
    if (this.#over !== null) return;
    this.#session.reset(id, code);
    this.#flush();
    this.#settle();
  }

  /**
   * Closes the connection with GOAWAY NO_ERROR: the socket once that is
   * written (at most a second later), or at once with `now`. Streams still
   * open fail.
   */
  close(now = false): void {
    if (this.#over !== null) return;
    this.#session.goaway(ErrorCode.NO_ERROR, "idle");
    const written = this.#flush();
    this.#end(new Error("the connection to the origin was closed"), now ? undefined : written);
  }

  async #read(): Promise<void> {
    const buf = new Uint8Array(READ_SIZE);
    let why: Error;
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) {
          why = new Error("the origin closed the connection");
          break;
        }
        this.#reading = n >= FULL_READ;
        this.#session.receive(buf.subarray(0, n));
        if (this.#settle_ !== null && this.#session.settled) this.#ready();
        this.#flush();
        this.#settle();
        if (this.#over !== null) return;
      }
    } catch (e) {
      if (this.#over !== null) return;
      const message = (e as Error).message;
      const code = connectionErrorCode(e);
      if (code !== null) {
        this.#session.goaway(code, message);
        return this.#end(new Error(`the origin broke HTTP/2: ${message}`), this.#flush());
      }
      why = new Error(`reading from the origin failed: ${message}`, { cause: e });
    }
    this.#end(why);
  }

  /** Ends the connection: its streams fail with `why`; the socket closes after `written`. */
  #end(why: Error, written?: Promise<void>): void {
    if (this.#over !== null) return;
    this.#over = why;
    this.#ready();
    this.#session.fail(why);
    this.#onGone?.(this);
    if (written === undefined) return closeQuietly(this.#conn);
    const timer = setTimeout(() => closeQuietly(this.#conn), 1000);
    written.finally(() => {
      clearTimeout(timer);
      closeQuietly(this.#conn);
    });
  }

  #ready(): void {
    this.#settle_?.();
    this.#settle_ = null;
  }

  /** After streams ended: notes when it became idle, and closes it once drained after a GOAWAY. */
  #settle(): void {
    if (this.#over !== null || this.#session.streams > 0) return;
    if (this.#busy) {
      this.#busy = false;
      this.idleSince = performance.now();
    }
    if (this.#session.draining) this.close();
  }

  /** Writes what the session queued; resolves once everything queued so far is written. */
  #flush(): Promise<void> {
    const out = this.#session.takeBatch();
    if (out !== null) {
      this.#backlog.push(out.bytes);
      this.#backlogControl += out.control;
      if (this.#backlogControl + this.#writingControl > UNSENT_LIMIT && this.#over === null) {
        // It would never be written: the socket is closed at once.
        this.#backlog = [];
        this.#end(new Error("the origin does not read what forgekit sends it"));
        return Promise.resolve();
      }
    }
    if (this.#writing === null && this.#backlog.length > 0) this.#writing = this.#drain();
    return this.#writing ?? Promise.resolve();
  }

  async #drain(): Promise<void> {
    try {
      while (this.#backlog.length > 0) {
        const out = concat(this.#backlog);
        this.#backlog = [];
        this.#writingControl = this.#backlogControl;
        this.#backlogControl = 0;
        await writeAll(this.#conn, out);
        this.#writingControl = 0;
      }
      this.#session.written();
    } catch (e) {
      this.#end(new Error(`writing to the origin failed: ${(e as Error).message}`, { cause: e }));
    } finally {
      this.#writing = null;
    }
  }

  /**
   * Sends a request body within the windows, then its trailers (or an empty
   * DATA with END_STREAM). True once it went out whole.
   */
  async #send(s: OriginH2Stream, body: BodySource, req: H2Request): Promise<boolean> {
    let sent = 0;
    try {
      for (;;) {
        const chunk = await body.next();
        if (s.failed) {
          if (chunk !== null && !body.started) body.unread(chunk);
          return this.#giveUp(s, body);
        }
        if (chunk === null) break;
        for (let at = 0; at < chunk.byteLength;) {
          const room = await this.#room(s);
          if (room === null) {
            if (at === 0 && !body.started) body.unread(chunk);
            return this.#giveUp(s, body);
          }
          const n = Math.min(room, chunk.byteLength - at);
          this.#session.data(s.id, chunk.subarray(at, at + n), false);
          body.started = true;
          at += n;
          sent += n;
          req.onBodyBytes?.(sent);
          // The next chunk is read once this one is written: backpressure to the client.
          await this.#flush();
        }
      }
      const trailers = req.trailers?.();
      if (trailers) this.#session.trailers(s.id, trailers);
      else this.#session.data(s.id, EMPTY, true);
      this.#flush();
      this.#settle();
      return true;
    } catch (err) {
      // The client's body failed (it broke its framing, or went away): the
      // origin sees the stream cancelled, never a body cut short as if whole.
      s.cancel(err instanceof Error ? err : new Error(String(err)));
      return false;
    }
  }

  /** Stops sending: the body is given up unless the next attempt sends it. */
  #giveUp(s: OriginH2Stream, body: BodySource): false {
    if (s.retry !== "refused" || body.started) body.cancel();
    return false;
  }

  /** Waits for room in the windows: the bytes allowed, or null when the stream can send no more. */
  async #room(s: OriginH2Stream): Promise<number | null> {
    for (;;) {
      if (s.failed || this.#over !== null) return null;
      const room = this.#session.sendable(s.id);
      if (room === null || room > 0) return room;
      await s.waitForWindow();
    }
  }
}

/** How long a pooled origin connection may stay idle, by default (HTTP/1.1 and HTTP/2 alike). */
export const IDLE_MS = 30_000;

/**
 * The HTTP/2 connections kept per origin (`host:port`), and the dials under
 * way, so that a burst of requests to a new origin shares one connection.
 * A connection without streams is closed after `idleMs`.
 *
 * @example
 * ```ts
 * const pool = new H2Pool({ idleMs: 30_000 });
 * const conn = pool.take("api.example:443") ?? await dialAndAdd(pool);
 * ```
 */
export class H2Pool {
  #conns = new Map<string, OriginH2Connection[]>();
  #dialing = new Map<string, Promise<unknown>>();
  #idleMs: number;
  #sweeper: ReturnType<typeof setInterval> | undefined;

  constructor(options: { idleMs?: number } = {}) {
    this.#idleMs = options.idleMs ?? IDLE_MS;
  }

  /** A connection to `key` with room for one more stream. */
  take(key: string): OriginH2Connection | undefined {
    const list = this.#conns.get(key);
    if (list === undefined) return undefined;
    for (const conn of list) {
      if (!conn.available) continue;
      // Idle too long: the origin may close it any moment (as the HTTP/1.1 pool does).
      if (conn.streams === 0 && conn.idleSince < performance.now() - this.#idleMs) {
        conn.close(); // leaves the list
        return this.take(key);
      }
      return conn;
    }
    return undefined;
  }

  /** Keeps a new connection (it leaves by itself once over: `onGone` → {@linkcode remove}). */
  add(conn: OriginH2Connection): void {
    let list = this.#conns.get(conn.key);
    if (list === undefined) this.#conns.set(conn.key, list = []);
    list.push(conn);
    if (this.#sweeper === undefined) {
      this.#sweeper = setInterval(() => this.#sweep(), this.#idleMs / 2);
      Deno.unrefTimer(this.#sweeper);
    }
  }

  remove(conn: OriginH2Connection): void {
    const list = this.#conns.get(conn.key);
    const at = list?.indexOf(conn) ?? -1;
    if (at === -1) return;
    list!.splice(at, 1);
    if (list!.length === 0) this.#conns.delete(conn.key);
  }

  /** The dial to `key` under way, if any. */
  dialing(key: string): Promise<unknown> | undefined {
    return this.#dialing.get(key);
  }

  /**
   * What to wait for before opening another connection to `key`: a dial
   * under way, or a connection whose SETTINGS (its stream limit) have not
   * come yet; undefined when there is nothing to wait for.
   */
  pending(key: string): Promise<unknown> | undefined {
    const dial = this.#dialing.get(key);
    if (dial !== undefined) return dial;
    return this.#conns.get(key)?.find((conn) => !conn.ready && !conn.over)?.settled;
  }

  /** Notes a dial to `key` until it settles. */
  track(key: string, dial: Promise<unknown>): void {
    this.#dialing.set(key, dial);
    const done = () => {
      if (this.#dialing.get(key) === dial) this.#dialing.delete(key);
    };
    dial.then(done, done);
  }

  /** Closes the connection without streams idle longest (for a slot): true when there was one. */
  closeIdle(): boolean {
    let oldest: OriginH2Connection | undefined;
    for (const list of this.#conns.values()) {
      for (const conn of list) {
        if (conn.streams === 0 && (oldest === undefined || conn.idleSince < oldest.idleSince)) {
          oldest = conn;
        }
      }
    }
    oldest?.close(true);
    return oldest !== undefined;
  }

  /** Closes every connection. */
  close(): void {
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
    for (const list of [...this.#conns.values()]) for (const conn of [...list]) conn.close(true);
    this.#conns.clear();
  }

  #sweep(): void {
    const limit = performance.now() - this.#idleMs;
    for (const list of [...this.#conns.values()]) {
      for (const conn of [...list]) {
        if (conn.streams === 0 && conn.idleSince < limit) conn.close();
      }
    }
  }
}
