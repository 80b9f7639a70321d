/**
 * A Node socket (here: a server `tls.TLSSocket`) as promise-returning reads
 * and writes: reads are buffered with backpressure (the socket is paused
 * while too much is queued), writes wait for `drain`.
 *
 * @module
 */
import type { Duplex } from "node:stream";
import { closeQuietly, HALF_CLOSED_LINGER_MS, Linger, writeAll } from "./conn_io.ts";

/** Bytes queued before the socket is paused. */
const HIGH_WATER = 256 * 1024;

/**
 * Reading on the connection under a socket, where pausing the socket alone
 * does not stop it: Deno's server-side `node:tls` socket goes on reading
 * its TCP connection while paused, and holds all the peer sends.
 */
export interface InputControl {
  pause(): void;
  resume(): void;
}

/** Reads and writes on one socket. */
export class SocketIo {
  #queue: Uint8Array[] = [];
  #queued = 0;
  #paused = false;
  #ended = false;
  #failure: Error | null = null;
  #wake: (() => void) | null = null;
  #expired = false;

  #listeners: [string, (arg: never) => void][];
  #gone = new AbortController();
  #stallMs: number;
  #input: InputControl | undefined;

  /**
   * `stallMs`: how long a write may wait for room (the peer reads nothing)
   * before the socket is destroyed; by default for ever. `input`: paused
   * and resumed with the socket.
   */
  constructor(
    readonly socket: Duplex,
    options: { stallMs?: number; input?: InputControl } = {},
  ) {
    this.#stallMs = options.stallMs ?? Infinity;
    this.#input = options.input;
    // Each write waiting for room adds a drain listener: many streams may wait at once.
    socket.setMaxListeners(0);
    this.#listeners = [
      ["data", (b: Uint8Array) => {
        this.#queue.push(new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
        this.#queued += b.byteLength;
        if (this.#queued >= HIGH_WATER && !this.#paused) {
          this.#paused = true;
          socket.pause();
          this.#input?.pause();
        }
        this.#notify();
      }],
      ["end", () => {
        this.#ended = true;
        this.#gone.abort(new Error("the client closed its side of the connection"));
        this.#notify();
      }],
      ["error", (e: Error) => {
        this.#failure ??= e;
        this.#notify();
      }],
      ["close", () => {
        this.#ended = true;
        this.#gone.abort(new Error("the client connection closed"));
        this.#notify();
      }],
    ];
    for (const [event, fn] of this.#listeners) socket.on(event, fn as (arg: unknown) => void);
  }

  /**
   * Hands the socket back: reading stops, and bytes received but not read
   * yet are put back into the socket's own stream (for a new reader, such
   * as a TLS server). Must not be called with a read pending.
   */
  detach(): Duplex {
    for (const [event, fn] of this.#listeners) this.socket.off(event, fn as (arg: unknown) => void);
    this.socket.pause();
    for (const chunk of this.#queue.reverse()) this.socket.unshift(chunk);
    this.#queue = [];
    this.#queued = 0;
    return this.socket;
  }

  /**
   * Aborted when the client has closed its side (end of input) or the
   * socket has closed: like nginx, forgekit takes the end of a client's
   * input while its request is with the origin as giving the request up.
   */
  get signal(): AbortSignal {
    return this.#gone.signal;
  }

  /** Whether the socket can no longer be written to. */
  get closed(): boolean {
    return this.socket.destroyed || this.socket.writableEnded;
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  /**
   * The next bytes received (at most `max`), null at the end of input, or
   * "expired" when {@linkcode SocketIo.expire} was called while waiting. A
   * failed socket's error is thrown.
   */
  async read(max = Infinity): Promise<Uint8Array | null | "expired"> {
    while (this.#queue.length === 0) {
      if (this.#failure) throw this.#failure;
      if (this.#ended) return null;
      if (this.#expired) {
        this.#expired = false;
        return "expired";
      }
      await new Promise<void>((resolve) => this.#wake = resolve);
    }
    let chunk = this.#queue.shift()!;
    if (chunk.byteLength > max) {
      this.#queue.unshift(chunk.subarray(max));
      chunk = chunk.subarray(0, max);
    }
    this.#queued -= chunk.byteLength;
    if (this.#paused && this.#queued < HIGH_WATER / 2) {
      this.#paused = false;
      this.#input?.resume();
      this.socket.resume();
    }
    return chunk;
  }

  /**
   * Ends a wait: the read waiting now, or else the next one that has to
   * wait, returns "expired" (a time limit, kept by the caller).
   */
  expire(): void {
    this.#expired = true;
    this.#notify();
  }

  /** Forgets an expiry that no read has seen. */
  unexpire(): void {
    this.#expired = false;
  }

  /** Puts bytes back in front of the input. */
  unread(bytes: Uint8Array): void {
    if (bytes.byteLength === 0) return;
    this.#queue.unshift(bytes);
    this.#queued += bytes.byteLength;
  }

  /**
   * Writes bytes, waiting while the socket's buffer is full. The socket
   * keeps a reference: the bytes must not be changed afterwards. `onSent`
   * is called once these bytes have left the socket's buffer (or failed to).
   */
  async write(bytes: Uint8Array, onSent?: () => void): Promise<void> {
    if (this.closed) throw new Error("the client connection is closed");
    if (this.socket.write(bytes, onSent)) return;
    await new Promise<void>((resolve, reject) => {
      // A peer that reads nothing for this long is not coming back.
      const timer = Number.isFinite(this.#stallMs)
        ? setTimeout(() => this.socket.destroy(), this.#stallMs)
        : undefined;
      const done = () => {
        clearTimeout(timer);
        this.socket.off("drain", done);
        this.socket.off("close", done);
        if (this.socket.destroyed) reject(new Error("the client connection closed"));
        else resolve();
      };
      this.socket.on("drain", done);
      this.socket.on("close", done);
    });
  }

  /** Half-closes: no more writes (what was written is still sent). */
  end(): void {
    if (!this.closed) this.socket.end();
  }

  /** Closes at once. */
  destroy(): void {
    this.socket.destroy();
  }
}

/** The most bytes gathered into one socket write. */
const GATHER = 256 * 1024;
/** A read this long came back full (a whole TLS record): more is probably waiting. */
const FULL_READ = 16 * 1024 - 64;

/**
 * Reads a connection (`limit` bytes, or to its end) in gathered pieces.
 * Every write downstream (a socket write, a response chunk) has a high
 * fixed cost, so reads that come back full are gathered into pieces of up
 * to 256 KiB. Nothing waits for data that may not come: a short read is
 * given at once, and gathered bytes are given when the next read has not
 * completed within a timer tick (a sender that waits for an answer, such as
 * HTTP/2 flow control, is never stalled). The pieces are never reused,
 * unless `reuse` is set: then a piece is only valid until the next one is
 * asked for (for a consumer that copies each piece before it asks again).
 */
export async function* gatheredReads(
  conn: Deno.Conn,
  limit = Infinity,
  reuse = false,
): AsyncGenerator<Uint8Array> {
  // Short reads land here and are given as copies; a big buffer is only
  // made once reads come back full.
  const scratch = new Uint8Array(64 * 1024);
  let kept: Uint8Array | null = null;
  let copied = 0;
  while (copied < limit) {
    const first = await conn.read(
      scratch.subarray(0, Math.min(scratch.byteLength, limit - copied)),
    );
    if (first === null) return;
    if (first < FULL_READ || copied + first >= limit) {
      copied += first;
      yield reuse ? scratch.subarray(0, first) : scratch.slice(0, first);
      continue;
    }
    const size = Math.min(GATHER, limit - copied);
    const buf: Uint8Array = reuse && kept !== null && kept.byteLength >= size
      ? kept.subarray(0, size)
      : new Uint8Array(size);
    if (reuse) kept ??= buf;
    buf.set(scratch.subarray(0, first));
    let filled = first;
    let given = 0;
    let pending: Promise<number | null> | null = null;
    let ended = false;
    // Gathered bytes wait at most one timer tick: one timer per piece, not per read.
    let tick: Tick | null = null;
    try {
      while (buf.byteLength - filled >= FULL_READ) {
        const reading: Promise<number | null> = pending ?? conn.read(buf.subarray(filled));
        pending = null;
        if (filled > given) tick ??= new Tick();
        const n = tick ? await Promise.race([reading, tick.late]) : await reading;
        if (n === "late") {
          // The read goes on into the rest of the buffer while this part is used.
          reading.catch(() => {}); // the consumer may stop here and close the connection
          pending = reading;
          tick = null;
          yield buf.subarray(given, filled);
          given = filled;
          continue;
        }
        if (n === null) {
          ended = true;
          break;
        }
        filled += n;
        if (n < FULL_READ) break;
      }
    } finally {
      tick?.cancel();
    }
    copied += filled;
    if (filled > given) yield buf.subarray(given, filled);
    if (ended) return;
  }
}

/** A promise that settles "late" after one timer tick, unless cancelled first. */
class Tick {
  readonly late: Promise<"late">;
  #timer: ReturnType<typeof setTimeout> | undefined;
  constructor() {
    this.late = new Promise((resolve) => this.#timer = setTimeout(() => resolve("late"), 0));
  }
  cancel(): void {
    clearTimeout(this.#timer);
  }
}

/**
 * Copies {@linkcode gatheredReads} of a connection to the socket; the bytes
 * copied. `progress` gets the running total after each write.
 */
export async function copyToSocket(
  conn: Deno.Conn,
  io: SocketIo,
  limit = Infinity,
  progress?: (copied: number) => void,
): Promise<number> {
  let copied = 0;
  for await (const piece of gatheredReads(conn, limit)) {
    await io.write(piece);
    copied += piece.byteLength;
    progress?.(copied);
  }
  return copied;
}

/**
 * Copies both ways between a socket and a connection until both directions
 * ended (each end is passed on as a half-close), or one has and the other
 * passes no bytes for `lingerMs`, then closes the connection. `buffered`:
 * bytes already read from the connection. Returns the bytes relayed each
 * way: `out` from the socket, `in` to it.
 */
export async function relay(
  io: SocketIo,
  conn: Deno.Conn,
  buffered: Uint8Array = new Uint8Array(0),
  lingerMs = HALF_CLOSED_LINGER_MS,
): Promise<{ out: number; in: number }> {
  let out = 0;
  let inn = 0;
  // As a spliced tunnel: a client gone from an origin that neither answers
  // nor closes (or the reverse) must not hold two sockets and an origin
  // connection's slot for ever. An idle relay with both sides open stays.
  const linger = new Linger(lingerMs, () => {
    io.destroy();
    closeQuietly(conn);
  });
  const toSocket = (async () => {
    try {
      if (buffered.byteLength) await io.write(buffered);
      inn = buffered.byteLength;
      await copyToSocket(conn, io, Infinity, (n) => {
        inn = buffered.byteLength + n;
        linger.moved();
      });
    } catch {
      // either side went away
    }
    io.end();
    linger.halfClosed();
  })();
  const toConn = (async () => {
    try {
      for (;;) {
        const chunk = await io.read();
        if (chunk === null || chunk === "expired") break;
        await writeAll(conn, chunk);
        out += chunk.byteLength;
        linger.moved();
      }
      await conn.closeWrite();
    } catch {
      // either side went away
    }
    linger.halfClosed();
  })();
  try {
    await Promise.all([toSocket, toConn]);
  } finally {
    linger.stop();
  }
  closeQuietly(conn);
  return { out, in: inn };
}
