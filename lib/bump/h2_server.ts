/**
 * forgekit's own HTTP/2 server side, for bumped connections whose TLS was
 * terminated on the client's connection (ALPN h2): reads the frames off
 * the socket, hands each stream's request to the handler on its own, and
 * writes the replies as HEADERS and DATA within the client's flow-control
 * windows (RFC 9113).
 *
 * Malformed requests (`h2_request.ts`) get a 400 and are never handed on.
 * Request bodies are streamed. A stream's window is only reopened as its
 * body is read, and the connection's as the bodies of all its streams are
 * read or let go, so a connection holds at most 2 MiB of unread bytes
 * however many streams it has (copied, so that small frames cost their
 * bytes). Limits:
 * 100 concurrent streams, 64 KiB of header list, 128 KiB of header block
 * on the wire. A client that resets streams as fast as it opens them
 * (CVE-2023-44487), or makes the server reset them (CVE-2025-8671), floods
 * control frames without reading the answers, or sends more frames without
 * requests or data than its requests and responses pay for (empty DATA,
 * PRIORITY, PING, SETTINGS, WINDOW_UPDATE, ...; `frame_allowance.ts`) gets
 * GOAWAY ENHANCE_YOUR_CALM.
 *
 * @module
 */
import {
  connectionErrorCode,
  DEFAULT_WINDOW,
  ErrorCode,
  Flag,
  frame,
  FRAME_HEADER,
  FrameType,
  goawayFrame,
  H2ConnectionError,
  headerFrames,
  MAX_WINDOW,
  MIN_FRAME_SIZE,
  parseSettings,
  PREFACE,
  putFrameHeader,
  rstStreamFrame,
  Setting,
  settingsFrame,
  u31,
  windowUpdateFrame,
} from "./h2_frames.ts";
import { HpackDecoder, HpackEncoder } from "./hpack.ts";
import { FrameAllowance } from "./frame_allowance.ts";
import {
  checkRequestFields,
  checkTrailerFields,
  CONNECTION_SPECIFIC,
  LOWER_TOKEN,
} from "./h2_request.ts";
import { FIELD_VALUE } from "./request_head.ts";
import { gatheredReads, type SocketIo } from "./socket_io.ts";
import { closeQuietly, concat } from "./conn_io.ts";
import { HEAD_TIMEOUT_MS } from "./http_head.ts";
import {
  type BumpHandler,
  type BumpReply,
  ownReply,
  RequestBodyError,
  type ServeOptions,
  STALL_TIMEOUT_MS,
} from "./exchange.ts";

/** The most streams a client may have open at once. */
export const MAX_STREAMS = 100;
/** Each stream's receive window: unread request body bytes held per stream. */
const STREAM_WINDOW = 256 * 1024;
/**
 * The connection's receive window: unread request body bytes held across all
 * its streams. It is given back only as those bytes are read or let go, not
 * as they arrive, so 100 streams to origins that read slowly hold this much,
 * not 100 stream windows (Go's http2 server and Kestrel hold 1 MiB). Eight
 * stream windows: one upload is only ever paced by its own.
 */
const CONN_WINDOW = 2 * 1024 * 1024;
/**
 * The connection window given back in one WINDOW_UPDATE, unless the client
 * has less than that left (then at once: it may be waiting for it).
 */
const CONN_REFRESH = STREAM_WINDOW / 2;
/** The largest decoded header list accepted (a larger one gets 431). */
const MAX_HEADER_LIST = 64 * 1024;
/**
 * The largest header block (HEADERS plus CONTINUATION frames, their 9-byte
 * frame headers included, so that empty frames count too) read at all.
 */
const MAX_HEADER_BLOCK = 128 * 1024;
/** Streams the client may reset before the ratio to streams opened is checked. */
const RESET_ALLOWANCE = 100;
/**
 * Control answers (PING and SETTINGS acknowledgements, RST_STREAM,
 * WINDOW_UPDATE) still in the socket's buffer past which the client counts
 * as flooding: it sends control frames without reading the answers.
 */
const FLOOD_BYTES = 1024 * 1024;
/**
 * After the server's GOAWAY, what the client still sends is read and
 * dropped, so that it gets the GOAWAY rather than a reset, for this long and
 * up to this many bytes; a client that sends more is cut off (an error
 * GOAWAY must close the connection, RFC 9113 §5.4.1, and a socket left
 * unread still takes in all the client sends).
 */
const LINGER_MS = 2000;
const LINGER_BYTES = 1024 * 1024;
/** Stream ids remembered once closed, for the frames the client may still send on them (§5.1). */
const CLOSED_MEMORY = 1000;
/** Request body frames are gathered into buffers of this size (a copy each, not a view). */
const GATHER = 16 * 1024;

/** An HPACK dynamic table size update to 0. */
const TABLE_SIZE_ZERO = new Uint8Array([0x20]);

/** One stream's state. */
interface Stream {
  id: number;
  /** What the client still lets us send. */
  sendWindow: number;
  /** What the client may still send before we reopen the window. */
  recvWindow: number;
  /** Body bytes read by the handler since the window was last reopened. */
  consumed: number;
  /** Response body bytes queued for the client so far. */
  bodySent: number;
  /** Request body bytes received so far, and the declared length. */
  received: number;
  length: number | null;
  queue: Uint8Array[];
  /** The bytes in `queue`: held against the connection's window. */
  held: number;
  /** Room left in the buffer of the queue's last chunk, for the next small frame. */
  spare: number;
  /** Nothing will read the body: its DATA is dropped as it comes. */
  unread: boolean;
  /** The client ended its side (END_STREAM). */
  remoteClosed: boolean;
  /** The trailers that ended the request, when it had any. */
  trailers: [string, string][] | null;
  /** Our side ended (END_STREAM or RST_STREAM sent, or reset by the client). */
  localClosed: boolean;
  reset: boolean;
  /** Why the request body failed (a reset, a length mismatch). */
  failure: Error | null;
  wake: (() => void) | null;
  /** Stops the response being produced (a reset). */
  onReset: (() => void) | null;
  /** Aborted when the stream is reset: the handler's work is not wanted any more. */
  cancel: AbortController;
}

/** Serves one HTTP/2 connection until it ends; never throws. */
export async function serveH2(
  io: SocketIo,
  handler: BumpHandler,
  options: ServeOptions = {},
): Promise<void> {
  await new H2Connection(io, handler, options).serve();
}

class H2Connection {
  #io: SocketIo;
  #handler: BumpHandler;
  #timeout: number;
  /** How long a stream may wait for the client's window or request body. */
  #stall: number;
  #decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: MAX_HEADER_LIST });
  #encoder = new HpackEncoder();
  #streams = new Map<number, Stream>();
  #tasks = new Set<Promise<void>>();
  /** The highest stream the client opened. */
  #lastStream = 0;
  #opened = 0;
  #resets = 0;
  /** A header block being read: HEADERS then CONTINUATION frames. */
  #block: {
    stream: number;
    endStream: boolean;
    /** The HEADERS frame's priority names its own stream (§5.3.1). */
    selfDependent: boolean;
    parts: Uint8Array[];
    size: number;
  } | null = null;
  /** The first frame (SETTINGS, §3.4) has come. */
  #settled = false;
  #peerWindow = DEFAULT_WINDOW;
  #peerFrameSize = MIN_FRAME_SIZE;
  #connSendWindow = DEFAULT_WINDOW;
  /** What the client may still send on the connection (our first WINDOW_UPDATE counted at once). */
  #connRecvWindow = CONN_WINDOW;
  /** DATA bytes no longer held (read, let go, never queued) and not yet given back. */
  #connOwed = 0;
  /** The connection is over: nothing more is given back. */
  #over = false;
  #flushQueued = false;
  #windowWaiters = new Set<() => void>();
  /** Control frames answered while reading one chunk, written together. */
  #pending: Uint8Array[] = [];
  /** Bytes of control frames written but not yet sent (response DATA does not count). */
  #controlUnsent = 0;
  #goingAway = false;
  #idleSince: number | null = performance.now();
  /**
   * Frames without a request or its data (PING, SETTINGS, PRIORITY,
   * WINDOW_UPDATE, RST_STREAM, GOAWAY, empty DATA, unknown types) the client
   * may still send, earned back by streams opened, response bytes sent, and
   * time (`frame_allowance.ts`, its defaults).
   */
  #frames = new FrameAllowance(performance.now());
  /** When the chunk being read came: the clock is read for its first frame without a request only. */
  #readAt = -1;
  /**
   * Streams closed lately, oldest first: true when this server reset them
   * (frames the client sent before it saw the RST_STREAM are dropped), false
   * when they ended or the client reset them (a frame on them is an error).
   */
  #closed = new Map<number, boolean>();

  #onRefused: ServeOptions["onRefused"];

  constructor(io: SocketIo, handler: BumpHandler, options: ServeOptions) {
    this.#io = io;
    this.#handler = handler;
    this.#timeout = options.headTimeoutMs ?? HEAD_TIMEOUT_MS;
    this.#stall = options.stallTimeoutMs ?? STALL_TIMEOUT_MS;
    this.#onRefused = options.onRefused;
  }

  /** Answers a stream on the server's own, and says so (for the log). */
  #refuse(
    stream: Stream,
    fields: [string, string][] | null,
    reply: BumpReply,
    why: string,
  ): void {
    const field = (name: string) => fields?.find(([k]) => k === name)?.[1];
    const method = field(":method") ?? "?";
    const path = field(":path") ?? "";
    this.#onRefused?.({
      method: LOWER_TOKEN.test(method.toLowerCase()) ? method : "?",
      target: /^\/[\x21-\x7e]*$/.test(path) ? path : null,
      status: reply.status,
      why,
    });
    // No handler reads this stream's body.
    stream.unread = true;
    this.#start(stream, reply);
  }

  async serve(): Promise<void> {
    const watch = setInterval(() => {
      if (this.#idleSince !== null && performance.now() - this.#idleSince >= this.#timeout) {
        this.#io.expire();
      }
    }, Math.min(1000, this.#timeout / 4));
    try {
      if (!await this.#readPreface()) return;
      this.#pending.push(
        settingsFrame([
          [Setting.MAX_CONCURRENT_STREAMS, MAX_STREAMS],
          [Setting.INITIAL_WINDOW_SIZE, STREAM_WINDOW],
          [Setting.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST],
        ]),
        windowUpdateFrame(0, CONN_WINDOW - DEFAULT_WINDOW),
      );
      await this.#readFrames();
    } catch (e) {
      const code = connectionErrorCode(e);
      if (code !== null) {
        this.#pending.push(goawayFrame(this.#lastStream, code, (e as Error).message));
      }
    } finally {
      clearInterval(watch);
      this.#flush();
      this.#goingAway = true;
      this.#over = true;
      for (const stream of this.#streams.values()) {
        this.#abort(stream, new Error("the connection ended"));
      }
      await Promise.allSettled([...this.#tasks]);
      this.#flush();
      this.#io.end();
      await this.#linger();
    }
  }

  /** Reads and drops what the client sends after the end, within LINGER_MS and LINGER_BYTES. */
  async #linger(): Promise<void> {
    this.#io.unexpire();
    const timer = setTimeout(() => this.#io.expire(), LINGER_MS);
    let left = LINGER_BYTES;
    try {
      for (;;) {
        const chunk = await this.#io.read();
        if (chunk === null) return;
        if (chunk === "expired" || (left -= chunk.byteLength) < 0) return this.#io.destroy();
      }
    } catch {
      // The socket failed: there is nothing left to read.
    } finally {
      clearTimeout(timer);
    }
  }

  async #readPreface(): Promise<boolean> {
    let got: Uint8Array = new Uint8Array(0);
    while (got.byteLength < PREFACE.byteLength) {
      const chunk = await this.#io.read();
      if (chunk === null || chunk === "expired") return false;
      got = concat([got, chunk]);
      const n = Math.min(got.byteLength, PREFACE.byteLength);
      for (let i = 0; i < n; i++) {
        if (got[i] !== PREFACE[i]) {
          throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "invalid connection preface");
        }
      }
    }
    this.#io.unread(got.subarray(PREFACE.byteLength));
    return true;
  }

  /** Reads and handles frames until the client ends, goes idle, or errs. */
  async #readFrames(): Promise<void> {
    let buf: Uint8Array = new Uint8Array(0);
    for (;;) {
      this.#flush();
      if (this.#goingAway && this.#streams.size === 0) return;
      const chunk = await this.#io.read();
      if (chunk === "expired") {
        this.#pending.push(goawayFrame(this.#lastStream, ErrorCode.NO_ERROR, "idle"));
        return;
      }
      if (chunk === null) return;
      this.#readAt = -1;
      buf = buf.byteLength ? concat([buf, chunk]) : chunk;
      let at = 0;
      while (buf.byteLength - at >= FRAME_HEADER) {
        const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
        if (length > MIN_FRAME_SIZE) {
          throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} bytes`);
        }
        if (buf.byteLength - at < FRAME_HEADER + length) break;
        const type = buf[at + 3];
        const flags = buf[at + 4];
        const stream = u31(buf, at + 5);
        const payload = buf.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length);
        at += FRAME_HEADER + length;
        this.#onFrame(type, flags, stream, payload);
      }
      buf = at === buf.byteLength ? new Uint8Array(0) : buf.subarray(at);
    }
  }

  #onFrame(type: number, flags: number, id: number, payload: Uint8Array): void {
    if (!this.#settled) {
      if (type !== FrameType.SETTINGS || flags & Flag.ACK) {
        throw new H2ConnectionError(
          ErrorCode.PROTOCOL_ERROR,
          "the connection preface must end with SETTINGS",
        );
      }
      this.#settled = true;
    }
    if (this.#block !== null && (type !== FrameType.CONTINUATION || id !== this.#block.stream)) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block was interrupted");
    }
    if (type !== FrameType.DATA && type !== FrameType.HEADERS && type !== FrameType.CONTINUATION) {
      this.#idleFrame();
    }
    switch (type) {
      case FrameType.DATA:
        return this.#onData(flags, id, payload);
      case FrameType.HEADERS:
        return this.#onHeaders(flags, id, payload);
      case FrameType.CONTINUATION: {
        if (this.#block === null) {
          throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        }
        return this.#addToBlock(payload, flags);
      }
      case FrameType.PRIORITY:
        if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0");
        if (payload.byteLength !== 5) return this.#streamError(id, ErrorCode.FRAME_SIZE_ERROR);
        if (u31(payload, 0) === id) return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
        return;
      case FrameType.RST_STREAM:
        return this.#onReset(id, payload);
      case FrameType.SETTINGS:
        return this.#onSettings(flags, id, payload);
      case FrameType.PUSH_PROMISE:
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client");
      case FrameType.PING:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.byteLength !== 8) {
          throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PING not 8 bytes long");
        }
        if (!(flags & Flag.ACK)) this.#control(frame(FrameType.PING, Flag.ACK, 0, payload));
        return;
      case FrameType.GOAWAY:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
        if (payload.byteLength < 8) {
          throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes");
        }
        this.#goingAway = true;
        return;
      case FrameType.WINDOW_UPDATE:
        return this.#onWindowUpdate(id, payload);
      default:
        return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  }

  /** A frame without a request or its data: it costs allowance, earned back by work. */
  #idleFrame(): void {
    if (this.#readAt < 0) this.#readAt = performance.now();
    if (!this.#frames.idle(this.#readAt)) {
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        "too many frames without requests or data",
      );
    }
  }

  /**
   * Queues a control answer; a client whose earlier answers are still unsent
   * (it does not read) is flooding. Response bodies queued for a client that
   * reads are not held against it.
   */
  #control(bytes: Uint8Array): void {
    if (this.#controlUnsent > FLOOD_BYTES) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "control frames not read");
    }
    this.#pending.push(bytes);
  }

  /** Flushes once the current turn is done (a frame loop flushes on its own meanwhile). */
  #flushSoon(): void {
    if (this.#flushQueued) return;
    this.#flushQueued = true;
    queueMicrotask(() => {
      this.#flushQueued = false;
      this.#flush();
    });
  }

  #flush(): void {
    if (this.#pending.length === 0 || this.#io.closed) return;
    const out = concat(this.#pending);
    this.#pending = [];
    this.#controlUnsent += out.byteLength;
    this.#io.write(out, () => this.#controlUnsent -= out.byteLength).catch(() => {});
  }

  /**
   * Writes a stream's frames. Once both sides have ended the stream (this
   * write carries our END_STREAM), it no longer counts against the
   * concurrency limit: the client sees it closed and may open another while
   * these bytes are still queued.
   */
  async #send(stream: Stream, bytes: Uint8Array): Promise<void> {
    const sending = this.#io.write(bytes);
    if (stream.localClosed && stream.remoteClosed) this.#close(stream);
    await sending;
  }

  /** Strips padding (RFC 9113 §6.1); the payload without it. */
  #unpad(flags: number, payload: Uint8Array): Uint8Array {
    if (!(flags & Flag.PADDED)) return payload;
    const pad = payload[0];
    if (payload.byteLength === 0 || pad >= payload.byteLength) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding longer than the frame");
    }
    return payload.subarray(1, payload.byteLength - pad);
  }

  #onData(flags: number, id: number, payload: Uint8Array): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0");
    if (id > this.#lastStream) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
    }
    // The connection window counts every DATA byte, padding and dropped frames included.
    this.#connRecvWindow -= payload.byteLength;
    if (this.#connRecvWindow < 0) {
      throw new H2ConnectionError(
        ErrorCode.FLOW_CONTROL_ERROR,
        "the connection window was overrun",
      );
    }
    // Window updates answer DATA: a client that sends without reading them floods.
    if (this.#controlUnsent > FLOOD_BYTES) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "control frames not read");
    }
    const data = this.#unpad(flags, payload);
    const end = (flags & Flag.END_STREAM) !== 0;
    if (data.byteLength === 0 && !end) this.#idleFrame();
    const stream = this.#streams.get(id);
    if (stream === undefined || stream.reset) {
      // Frames the client sent before it saw our RST_STREAM are dropped (§5.1).
      this.#giveBack(payload.byteLength);
      if (this.#closed.get(id) !== true) this.#streamError(id, ErrorCode.STREAM_CLOSED);
      return;
    }
    if (stream.remoteClosed) {
      this.#giveBack(payload.byteLength);
      return this.#streamError(id, ErrorCode.STREAM_CLOSED);
    }
    stream.recvWindow -= payload.byteLength;
    if (stream.recvWindow < 0) {
      throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, `stream ${id} window overrun`);
    }
    // Padding counts as read at once. A body nothing will read holds nothing
    // either, but its stream stays shut: it is being answered and ended.
    const kept = stream.unread ? 0 : data.byteLength;
    stream.consumed += payload.byteLength - data.byteLength;
    stream.received += data.byteLength;
    this.#giveBack(payload.byteLength - kept);
    if (kept) this.#queue(stream, data);
    if (end) stream.remoteClosed = true;
    if (
      stream.length !== null &&
      (stream.received > stream.length ||
        (stream.remoteClosed && stream.received !== stream.length))
    ) {
      this.#fail(
        stream,
        new RequestBodyError("the request body does not match its content-length"),
      );
      return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
    }
    // A window spent on padding is reopened here: no read will.
    this.#reopen(stream);
    stream.wake?.();
  }

  /**
   * Gives back connection window for DATA bytes no longer held: in steps of
   * CONN_REFRESH, or at once when the client has less than is owed left.
   */
  #giveBack(n: number): void {
    this.#connOwed += n;
    const owed = this.#connOwed;
    if (owed === 0 || this.#over || (owed < CONN_REFRESH && owed < this.#connRecvWindow)) return;
    this.#connRecvWindow += owed;
    this.#connOwed = 0;
    // Not #control: this may run outside the frame loop (a read, a reset), where
    // the loop's own check cannot catch a flood; #onData checks instead.
    this.#pending.push(windowUpdateFrame(0, owed));
    this.#flushSoon();
  }

  /**
   * Queues request body bytes as a copy (a view would keep the whole read it
   * came in alive), small frames gathered into one buffer: a body sent in
   * 1-byte frames costs about its bytes, not an object per frame.
   */
  #queue(stream: Stream, data: Uint8Array): void {
    stream.held += data.byteLength;
    const queue = stream.queue;
    const last = queue.length ? queue[queue.length - 1] : undefined;
    // The last buffer is filled up first, so that only it has room to spare:
    // a stream holds its bytes plus at most one part-filled buffer.
    let rest = data;
    if (last !== undefined && stream.spare > 0) {
      const n = Math.min(stream.spare, rest.byteLength);
      const grown = new Uint8Array(last.buffer, last.byteOffset, last.byteLength + n);
      grown.set(rest.subarray(0, n), last.byteLength);
      queue[queue.length - 1] = grown;
      stream.spare -= n;
      rest = rest.subarray(n);
    }
    if (rest.byteLength === 0) return;
    if (rest.byteLength >= GATHER) {
      queue.push(rest.slice());
      stream.spare = 0;
    } else {
      const buf = new Uint8Array(GATHER);
      buf.set(rest);
      queue.push(buf.subarray(0, rest.byteLength));
      stream.spare = GATHER - rest.byteLength;
    }
  }

  /** Lets the queued body go, its window given back to the connection; later DATA is dropped. */
  #letGo(stream: Stream): void {
    stream.unread = true;
    stream.queue = [];
    stream.spare = 0;
    const held = stream.held;
    stream.held = 0;
    this.#giveBack(held);
  }

  /** Reopens a stream's window once half of it has been read. */
  #reopen(stream: Stream): void {
    if (stream.consumed >= STREAM_WINDOW / 2 && !stream.remoteClosed && !stream.reset) {
      this.#control(windowUpdateFrame(stream.id, stream.consumed));
      stream.recvWindow += stream.consumed;
      stream.consumed = 0;
    }
  }

  #onHeaders(flags: number, id: number, payload: Uint8Array): void {
    if (id === 0 || id % 2 === 0) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    }
    let block = this.#unpad(flags, payload);
    let selfDependent = false;
    if (flags & Flag.PRIORITY) {
      if (block.byteLength < 5) {
        throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "short HEADERS");
      }
      selfDependent = u31(block, 0) === id;
      block = block.subarray(5);
    }
    this.#block = {
      stream: id,
      endStream: (flags & Flag.END_STREAM) !== 0,
      selfDependent,
      parts: [],
      size: 0,
    };
    this.#addToBlock(block, flags);
  }

  #addToBlock(part: Uint8Array, flags: number): void {
    const block = this.#block!;
    // Counted as on the wire: endless empty CONTINUATION frames end here too.
    block.size += FRAME_HEADER + part.byteLength;
    if (block.size > MAX_HEADER_BLOCK) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    }
    block.parts.push(part);
    if (!(flags & Flag.END_HEADERS)) return;
    this.#block = null;
    const decoded = this.#decoder.decode(concat(block.parts));
    this.#onHeaderBlock(block.stream, block.endStream, block.selfDependent, decoded.fields);
  }

  /** A whole header block: a new request, or trailers. */
  #onHeaderBlock(
    id: number,
    endStream: boolean,
    selfDependent: boolean,
    fields: [string, string][] | null,
  ): void {
    if (id <= this.#lastStream) {
      const existing = this.#streams.get(id);
      if (existing === undefined || existing.reset) {
        const ours = this.#closed.get(id);
        // Trailers the client sent before it saw our RST_STREAM are dropped (§5.1).
        if (ours === true) return;
        if (ours === false) {
          throw new H2ConnectionError(ErrorCode.STREAM_CLOSED, `HEADERS on closed stream ${id}`);
        }
        throw new H2ConnectionError(
          ErrorCode.PROTOCOL_ERROR,
          `HEADERS on stream ${id}, below stream ${this.#lastStream} already opened`,
        );
      }
      // Trailers: they end the stream, and go on with it (to an HTTP/2 origin).
      if (existing.remoteClosed) return this.#streamError(id, ErrorCode.STREAM_CLOSED);
      const trailers = fields === null
        ? { ok: false as const, why: `larger than ${MAX_HEADER_LIST} bytes` }
        : checkTrailerFields(fields);
      if (!endStream || selfDependent || !trailers.ok) {
        const why = trailers.ok ? "" : `: ${trailers.why}`;
        this.#fail(existing, new RequestBodyError(`malformed trailers${why}`));
        return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
      }
      existing.remoteClosed = true;
      if (trailers.fields.length > 0) existing.trailers = trailers.fields;
      if (existing.length !== null && existing.received !== existing.length) {
        this.#fail(
          existing,
          new RequestBodyError("the request body does not match its content-length"),
        );
        return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
      }
      existing.wake?.();
      return;
    }
    this.#lastStream = id;
    // No new streams after GOAWAY: the client may retry this one elsewhere.
    if (this.#goingAway) return this.#resetStream(id, ErrorCode.REFUSED_STREAM);
    this.#opened++;
    this.#frames.opened();
    // A stream cannot depend on itself (§5.3.1).
    if (selfDependent) return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
    if (this.#streams.size >= MAX_STREAMS) {
      // Reset streams hold their slots until their handlers end: a flood of
      // HEADERS and RST_STREAM lands here once the slots are full, so a
      // refused stream counts as a reset (and the client's own RST_STREAM
      // on it, which finds no stream, does not count again).
      this.#countReset();
      return this.#resetStream(id, ErrorCode.REFUSED_STREAM);
    }
    const stream: Stream = {
      id,
      sendWindow: this.#peerWindow,
      recvWindow: STREAM_WINDOW,
      consumed: 0,
      bodySent: 0,
      received: 0,
      length: null,
      queue: [],
      held: 0,
      spare: 0,
      unread: false,
      remoteClosed: endStream,
      trailers: null,
      localClosed: false,
      reset: false,
      failure: null,
      wake: null,
      onReset: null,
      cancel: new AbortController(),
    };
    this.#streams.set(id, stream);
    this.#idleSince = null;
    if (fields === null) {
      return this.#refuse(
        stream,
        null,
        ownReply(431, "", `Request header fields larger than ${MAX_HEADER_LIST} bytes\n`),
        `request header fields larger than ${MAX_HEADER_LIST} bytes`,
      );
    }
    const req = checkRequestFields(fields);
    if (!req.ok) {
      return this.#refuse(
        stream,
        fields,
        ownReply(400, "", `Bad request: ${req.why}\n`),
        `bad request: ${req.why}`,
      );
    }
    if (req.connect) {
      return this.#refuse(
        stream,
        fields,
        ownReply(
          405,
          "",
          "CONNECT is not supported inside a bumped connection\n",
          "connect-refused",
        ),
        "bad request: CONNECT inside a bumped connection",
      );
    }
    stream.length = req.length;
    if (endStream && req.length !== null && req.length !== 0) {
      const why = "the body is shorter than its content-length";
      return this.#refuse(
        stream,
        fields,
        ownReply(400, "", `Bad request: ${why}\n`),
        `bad request: ${why}`,
      );
    }
    const expects = req.headers.some(([k, v]) =>
      k === "expect" && v.toLowerCase() === "100-continue"
    );
    const body = endStream ? null : this.#requestBody(stream, expects);
    this.#start(
      stream,
      this.#handler.answer({
        method: req.method,
        url: `https://${req.authority}${req.path}`,
        headers: req.headers,
        body,
        upgrade: null,
        signal: stream.cancel.signal,
        http2: true,
        trailers: () => stream.trailers,
      }).catch((e) => ownReply(502, "", `Bad gateway: ${(e as Error).message}\n`)),
      req.method,
    );
  }

  /** Runs a stream's exchange: the reply once it is ready, then the stream's end. */
  #start(stream: Stream, reply: BumpReply | Promise<BumpReply>, method = "GET"): void {
    const task = (async () => {
      try {
        await this.#respond(stream, await reply, method);
        // Answered before the request ended: the rest is not wanted (RFC 9113 §8.1).
        if (!stream.remoteClosed) this.#resetStream(stream.id, ErrorCode.NO_ERROR);
      } catch {
        this.#resetStream(stream.id, ErrorCode.INTERNAL_ERROR);
      } finally {
        // Answered with body bytes still unread: they are not wanted, and a
        // read still to come fails rather than find the body ended early.
        if (stream.held > 0) this.#fail(stream, new Error("the response ended first"));
        this.#close(stream);
        this.#flush();
      }
    })();
    this.#tasks.add(task);
    task.finally(() => this.#tasks.delete(task));
  }

  #close(stream: Stream): void {
    if (this.#streams.get(stream.id) !== stream) return;
    this.#streams.delete(stream.id);
    if (!this.#closed.has(stream.id)) this.#remember(stream.id, false);
    if (this.#streams.size === 0) {
      this.#idleSince = performance.now();
      if (this.#goingAway) this.#io.expire(); // wakes the reading loop to end
    }
  }

  /** The request body: DATA frames as they come, the window reopened as they are read. */
  #requestBody(stream: Stream, expects: boolean): ReadableStream<Uint8Array> {
    let asked = false;
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        if (!asked) {
          asked = true;
          // The client waits for this before sending the body.
          if (expects) await this.#writeHead(stream, 100, [], false);
        }
        const since = performance.now();
        while (stream.queue.length === 0) {
          if (stream.failure) throw stream.failure;
          if (stream.remoteClosed) return controller.close();
          const left = this.#stall - (performance.now() - since);
          if (left <= 0) {
            // The client holds the origin connection and sends nothing.
            this.#fail(stream, new RequestBodyError(`no request body bytes for ${this.#stall} ms`));
            continue;
          }
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, left);
            stream.wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          stream.wake = null;
        }
        const chunk = stream.queue.shift()!;
        stream.held -= chunk.byteLength;
        stream.consumed += chunk.byteLength;
        this.#reopen(stream);
        this.#giveBack(chunk.byteLength);
        this.#flush();
        controller.enqueue(chunk);
      },
      cancel: () => this.#letGo(stream),
    }, { highWaterMark: 0 });
  }

  #fail(stream: Stream, error: Error): void {
    stream.failure ??= error;
    this.#letGo(stream);
    stream.wake?.();
  }

  /** Ends a stream at once: its body fails, its reply stops. */
  #abort(stream: Stream, error: Error): void {
    stream.reset = true;
    this.#fail(stream, error);
    stream.onReset?.();
    // The first failure is the reason (a malformed body, before the reset it caused).
    stream.cancel.abort(stream.failure);
    this.#notifyWindows();
  }

  #resetStream(id: number, code: number): void {
    const stream = this.#streams.get(id);
    if (stream) {
      if (stream.reset) return;
      stream.localClosed = true;
      this.#abort(stream, new Error(`stream ${id} was reset`));
    }
    this.#remember(id, true);
    this.#control(rstStreamFrame(id, code));
  }

  /**
   * A stream error the client caused (§5.4.2). It counts as a reset by the
   * client: resetting a stream costs the server its request all the same,
   * so a client that provokes resets is a rapid reset too (CVE-2025-8671).
   */
  #streamError(id: number, code: number): void {
    const stream = this.#streams.get(id);
    if (stream === undefined || stream.reset) {
      // Closed: its RST_STREAM answers this frame, once (later ones are dropped).
      if (this.#closed.get(id) === true) return;
      this.#countReset();
      this.#remember(id, true);
      return this.#control(rstStreamFrame(id, code));
    }
    this.#countReset();
    this.#resetStream(id, code);
  }

  /** Notes how a stream closed, forgetting the oldest past CLOSED_MEMORY. */
  #remember(id: number, reset: boolean): void {
    this.#closed.set(id, reset);
    if (this.#closed.size > CLOSED_MEMORY) this.#closed.delete(this.#closed.keys().next().value!);
  }

  #onReset(id: number, payload: Uint8Array): void {
    if (payload.byteLength !== 4) {
      throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes");
    }
    if (id === 0 || id > this.#lastStream) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `RST_STREAM on idle stream ${id}`);
    }
    const stream = this.#streams.get(id);
    if (stream === undefined || stream.reset) return;
    this.#countReset();
    stream.localClosed = true;
    stream.remoteClosed = true;
    this.#remember(id, false);
    this.#abort(stream, new Error(`stream ${id} was reset by the client`));
  }

  /** Resetting streams as fast as they are opened costs us work and them nothing. */
  #countReset(): void {
    if (++this.#resets > RESET_ALLOWANCE && this.#resets * 2 > this.#opened) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many streams reset");
    }
  }

  #onSettings(flags: number, id: number, payload: Uint8Array): void {
    if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & Flag.ACK) {
      if (payload.byteLength !== 0) {
        throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      }
      return;
    }
    // Values apply in order (§6.5.3); a window is only checked against the
    // largest one, so a frame of many values costs one pass over the streams.
    let delta = 0;
    let largest = -Infinity;
    for (const [key, value] of parseSettings(payload)) {
      if (key === Setting.INITIAL_WINDOW_SIZE) {
        if (largest === -Infinity) {
          for (const stream of this.#streams.values()) {
            largest = Math.max(largest, stream.sendWindow);
          }
        }
        delta += value - this.#peerWindow;
        this.#peerWindow = value;
        if (largest + delta > MAX_WINDOW) {
          throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window overflowed");
        }
      } else if (key === Setting.MAX_FRAME_SIZE) this.#peerFrameSize = value;
    }
    if (delta !== 0) {
      for (const stream of this.#streams.values()) stream.sendWindow += delta;
    }
    this.#control(frame(FrameType.SETTINGS, Flag.ACK, 0));
    this.#notifyWindows();
  }

  #onWindowUpdate(id: number, payload: Uint8Array): void {
    if (payload.byteLength !== 4) {
      throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes");
    }
    const increment = u31(payload, 0);
    if (id === 0) {
      if (increment === 0) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
      }
      this.#connSendWindow += increment;
      if (this.#connSendWindow > MAX_WINDOW) {
        throw new H2ConnectionError(
          ErrorCode.FLOW_CONTROL_ERROR,
          "the connection window overflowed",
        );
      }
    } else {
      if (id > this.#lastStream) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `WINDOW_UPDATE on idle stream ${id}`);
      }
      const stream = this.#streams.get(id);
      if (stream === undefined || stream.localClosed) return;
      if (increment === 0) return this.#streamError(id, ErrorCode.PROTOCOL_ERROR);
      stream.sendWindow += increment;
      if (stream.sendWindow > MAX_WINDOW) {
        return this.#streamError(id, ErrorCode.FLOW_CONTROL_ERROR);
      }
    }
    this.#notifyWindows();
  }

  #notifyWindows(): void {
    const waiters = [...this.#windowWaiters];
    this.#windowWaiters.clear();
    for (const wake of waiters) wake();
  }

  /**
   * The response fields (or, with `status` null, trailers) as a header
   * block, split into HEADERS and CONTINUATION frames.
   */
  #headFrames(
    stream: Stream,
    status: number | null,
    headers: [string, string][],
    endStream: boolean,
  ): Uint8Array {
    const fields: [string, string][] = status === null ? [] : [[":status", String(status)]];
    for (const [k, v] of headers) {
      const name = k.toLowerCase();
      if (!CONNECTION_SPECIFIC.has(name) && LOWER_TOKEN.test(name) && FIELD_VALUE.test(v)) {
        fields.push([name, v]);
      }
    }
    // Every block starts with a table size update to 0: the encoder keeps no
    // table, and the client may lower its size at any time (RFC 7541 §4.2).
    const block = concat([TABLE_SIZE_ZERO, this.#encoder.encode(fields)]);
    return headerFrames(stream.id, block, endStream, this.#peerFrameSize);
  }

  async #writeHead(
    stream: Stream,
    status: number,
    headers: [string, string][],
    endStream: boolean,
  ) {
    if (stream.reset) throw new Error(`stream ${stream.id} was reset`);
    if (endStream) stream.localClosed = true;
    await this.#send(stream, this.#headFrames(stream, status, headers, endStream));
  }

  /** Ends a stream with trailers: a HEADERS frame with END_STREAM and no pseudo-field. */
  async #writeTrailers(stream: Stream, trailers: [string, string][]): Promise<void> {
    if (stream.reset) throw new Error(`stream ${stream.id} was reset`);
    stream.localClosed = true;
    await this.#send(stream, this.#headFrames(stream, null, trailers, true));
  }

  /**
   * Writes a reply: HEADERS, then the body as DATA within the flow-control
   * windows, then its trailers when it has any (else END_STREAM on DATA).
   */
  async #respond(stream: Stream, reply: BumpReply, method: string): Promise<void> {
    if (reply.tunnel || reply.status < 200) {
      // No protocol switch on HTTP/2 (RFC 9113 §8.6).
      if (reply.tunnel) {
        closeQuietly(reply.tunnel.conn);
        reply.tunnel.ended?.(0, 0);
      }
      reply = ownReply(502, "", "Bad gateway: the origin switched protocols\n");
    }
    const bodiless = method === "HEAD" || reply.status === 204 || reply.status === 304;
    // A body that came whole, or none, without a declared length (from an
    // HTTP/2 origin) is sent without one too, as the origin did.
    const length = reply.sized?.length ??
      (reply.body instanceof Uint8Array
        ? reply.length === null ? null : reply.body.byteLength
        : reply.length);
    // Without a body, a length describes the resource: the origin's own is kept.
    const headers = bodiless
      ? reply.headers
      : reply.headers.filter(([k]) => k !== "content-length");
    if (!bodiless && length !== null) headers.push(["content-length", String(length)]);
    // A body being read is cancelled through its reader (the stream itself
    // is locked then): a read waiting on a silent origin ends at once, and
    // the origin connection is closed.
    let reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
    /** A sized body's connection has been handed to its `ended`. */
    let handedBack = false;
    stream.onReset = () => {
      if (reply.sized) closeQuietly(reply.sized.conn);
      if (reader) reader.cancel().catch(() => {});
      else if (reply.body instanceof ReadableStream) reply.body.cancel().catch(() => {});
    };
    try {
      if (bodiless || (reply.body === null && !reply.sized)) {
        return await this.#writeHead(stream, reply.status, headers, true);
      }
      const head = this.#headFrames(stream, reply.status, headers, false);
      if (reply.body instanceof Uint8Array) {
        const trailers = reply.trailers?.();
        if (!trailers) return await this.#writeData(stream, reply.body, true, head);
        await this.#writeData(stream, reply.body, false, head);
        return await this.#writeTrailers(stream, trailers);
      }
      if (reply.sized) {
        const { conn, buffered, ended } = reply.sized;
        const rest = reply.sized.length - buffered.byteLength;
        try {
          await this.#writeData(stream, buffered, rest === 0, head);
          let sent = 0;
          // Each piece is copied into DATA frames before the next is read.
          for await (const piece of gatheredReads(conn, rest, true)) {
            sent += piece.byteLength;
            await this.#writeData(stream, piece, sent === rest);
          }
          if (sent !== rest) throw new Error("the body ended before its length");
        } finally {
          // The connection is ended's now: pooled again if the body went whole.
          handedBack = true;
          ended(stream.bodySent);
        }
        return;
      }
      await this.#io.write(head);
      // Each chunk goes out as it comes (a stream of events must not wait for the next).
      reader = (reply.body as ReadableStream<Uint8Array>).getReader();
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        if (r.value.byteLength) await this.#writeData(stream, r.value, false);
      }
      const trailers = reply.trailers?.();
      if (trailers) await this.#writeTrailers(stream, trailers);
      else await this.#writeData(stream, new Uint8Array(0), true);
    } finally {
      stream.onReset = null;
      if (reply.sized && !handedBack) {
        closeQuietly(reply.sized.conn);
        reply.sized.ended(bodiless ? reply.sized.length : 0);
      }
      // A body not read to its end (a write failed) is given up: its origin connection closes.
      if (reader) reader.cancel().catch(() => {});
      else if (reply.body instanceof ReadableStream) reply.body.cancel().catch(() => {});
    }
  }

  /**
   * Writes body bytes as DATA frames of at most the client's frame size,
   * waiting for window. `head` (HEADERS) goes out in the same write as the
   * first frames, or alone when there is no window yet.
   */
  async #writeData(
    stream: Stream,
    data: Uint8Array,
    end: boolean,
    head?: Uint8Array,
  ): Promise<void> {
    let prefix = head;
    if (prefix && (data.byteLength === 0 && !end || this.#room(stream) <= 0)) {
      await this.#io.write(prefix);
      prefix = undefined;
    }
    let at = 0;
    while (at < data.byteLength || (end && !stream.localClosed)) {
      const n = Math.min(await this.#window(stream, data.byteLength - at), data.byteLength - at);
      const size = this.#peerFrameSize;
      const frames = Math.max(1, Math.ceil(n / size));
      const lead = prefix?.byteLength ?? 0;
      const out = new Uint8Array(lead + n + frames * FRAME_HEADER);
      if (prefix) out.set(prefix);
      prefix = undefined;
      let o = lead;
      for (let i = 0; i < frames; i++) {
        const part = Math.min(size, n - i * size);
        const final = end && at + part === data.byteLength;
        if (final) stream.localClosed = true;
        putFrameHeader(out, o, part, FrameType.DATA, final ? Flag.END_STREAM : 0, stream.id);
        out.set(data.subarray(at, at + part), o + FRAME_HEADER);
        o += FRAME_HEADER + part;
        at += part;
      }
      stream.sendWindow -= n;
      this.#connSendWindow -= n;
      stream.bodySent += n;
      this.#frames.bytes(n);
      await this.#send(stream, out);
    }
  }

  #room(stream: Stream): number {
    return Math.min(stream.sendWindow, this.#connSendWindow);
  }

  /** Waits until the stream and the connection allow sending; the bytes allowed (0 for none wanted). */
  async #window(stream: Stream, wanted: number): Promise<number> {
    const since = performance.now();
    for (;;) {
      if (stream.reset) throw new Error(`stream ${stream.id} was reset`);
      if (this.#io.closed) throw new Error("the client connection is closed");
      const room = this.#room(stream);
      if (wanted === 0 || room > 0) return Math.max(0, room);
      const left = this.#stall - (performance.now() - since);
      if (left <= 0) {
        // The client takes nothing, and holds the origin connection meanwhile.
        this.#resetStream(stream.id, ErrorCode.CANCEL);
        throw new Error(`stream ${stream.id} opened no window for ${this.#stall} ms`);
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.#windowWaiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.#windowWaiters.add(wake);
      });
    }
  }
}
