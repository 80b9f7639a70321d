/**
 * The client side of an HTTP/2 connection (RFC 9113), sans-IO: bytes read
 * off the connection go in, frames to write come out, and each stream is
 * told what became of it (its response head, body bytes, trailers, or why
 * it failed). What the origin sends is checked as strictly as forgekit's
 * server checks its clients (`h2_response.ts`): a malformed response fails
 * its own stream only, a framing error the connection. An origin is held to
 * an allowance of frames that carry no response or data, as forgekit's
 * server holds its clients (`frame_allowance.ts`): one that floods them
 * (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA, interim heads,
 * unknown types, ...) gets GOAWAY ENHANCE_YOUR_CALM, and its streams fail
 * as on any connection error. The I/O around it is `origin_h2.ts`.
 *
 * @module
 */
import {
  DEFAULT_WINDOW,
  ErrorCode,
  errorName,
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
import { FrameAllowance, type FrameAllowanceOptions } from "./frame_allowance.ts";
import { bodiless, checkResponseFields } from "./h2_response.ts";
import { checkTrailerFields } from "./h2_request.ts";
import { concat } from "./conn_io.ts";

/**
 * Each stream's receive window: response body bytes held for one stream,
 * not yet read. It is reopened only as the client side reads, so a slow
 * client holds its origin stream back. Downloads are window-bound: on
 * loopback 256 KiB gave about 150 MB/s, 1 MiB about 330 MB/s.
 */
export const STREAM_WINDOW = 1024 * 1024;
/**
 * The connection's receive window: response body bytes held across all its
 * streams. It is given back as those bytes are read or let go, not as they
 * arrive, so a connection holds at most this much whatever its streams (as
 * forgekit's server holds request bodies, `h2_server.ts`). New streams go to
 * another connection while half of it is held.
 */
export const CONN_WINDOW = 4 * 1024 * 1024;
/** Connection window given back in one WINDOW_UPDATE, unless the origin has less left. */
const CONN_REFRESH = 128 * 1024;
/** Streams open at once on one origin connection at most (fewer when the origin says so). */
export const MAX_STREAMS = 100;
/** The largest decoded response header list accepted (a larger one is a 502). */
const MAX_HEADER_LIST = 64 * 1024;
/** The largest header block on the wire, frame headers included. */
const MAX_HEADER_BLOCK = 128 * 1024;
/** Stream ids remembered once closed, for frames the origin still sends on them (§5.1). */
const CLOSED_MEMORY = 1000;
/**
 * Answers (PING and SETTINGS acknowledgements) queued while earlier writes
 * are still unsent, past which the origin counts as flooding: it sends
 * control frames without reading what forgekit writes.
 */
const FLOOD_BYTES = 1024 * 1024;
/**
 * Bytes of frames other than request DATA (HEADERS, RST_STREAM,
 * WINDOW_UPDATE, GOAWAY, answers) taken to be written and not written yet,
 * past which the origin counts as not reading (`origin_h2.ts` gives the
 * connection up): streams that end or that clients give up would otherwise
 * be replaced by new ones whose HEADERS pile up unsent without bound.
 * Request DATA is not counted: each stream sends its next chunk only once
 * the last is written. It is above what 100 streams' HEADERS of 64 KiB take.
 */
export const UNSENT_LIMIT = 8 * 1024 * 1024;
/**
 * Frames an origin may send that carry no response head, trailers or body
 * bytes: PING, SETTINGS (and their ACKs), PRIORITY, WINDOW_UPDATE,
 * RST_STREAM, GOAWAY, unknown types, DATA that is empty or for no open
 * stream, interim (1xx) heads, heads for streams reset, and every
 * CONTINUATION (a head needs a few at most; endless small ones are a
 * flood). As on forgekit's server (`frame_allowance.ts`): 1,000 at once,
 * 10 more for each stream opened, 100 a second. Uploads are what make
 * origins send many: they give the windows back (Go's server every 4 KiB
 * read, some for each DATA frame) and grpc-go sends a PING with each read of
 * data for its BDP estimate. So each KiB of body sent or received pays for
 * one, and each DATA frame sent for four more: an upload pays several
 * times over for what it makes an origin send, in frames of any size.
 */
const ALLOWANCE: FrameAllowanceOptions = { bytesPerFrame: 1024, perFrameSent: 4 };
/** A final response head, checked. */
export interface ResponseHead {
  status: number;
  /** The regular fields, in order. */
  headers: [string, string][];
  /** `content-length`, when sent. */
  length: number | null;
}

/**
 * Whether a failed stream may be sent again: "refused" when the origin said
 * it did not process it (GOAWAY below it, REFUSED_STREAM), "unanswered" when
 * the connection ended before anything came for it; null otherwise.
 */
export type Retry = "refused" | "unanswered" | null;

/** What a session tells one stream. */
export interface StreamEvents {
  /** The final response head (interim 1xx heads are not passed on). */
  response(head: ResponseHead): void;
  /** Body bytes: a view of the read, to be copied before returning. */
  data(bytes: Uint8Array): void;
  /** The response ended, with its trailers (null: none). */
  end(trailers: [string, string][] | null): void;
  /** The stream failed; it is closed in the session already. */
  fail(error: Error, retry: Retry): void;
  /** The stream or connection send window may have opened. */
  window(): void;
}

interface SessionStream {
  id: number;
  events: StreamEvents;
  method: string;
  /** What the origin still lets us send. */
  sendWindow: number;
  /** What the origin may still send before we reopen the window. */
  recvWindow: number;
  /** Body bytes read since the window was last reopened. */
  consumed: number;
  /** Body bytes received, and the declared length. */
  received: number;
  length: number | null;
  /** The response has no content whatever its fields say (HEAD, 204, 304). */
  noBody: boolean;
  /** The final head has come. */
  head: boolean;
  /** Any frame has come for it. */
  heard: boolean;
  /** We ended our side (END_STREAM sent). */
  localClosed: boolean;
  /** The origin ended its side (END_STREAM received). */
  remoteClosed: boolean;
}

/** Options of {@linkcode H2ClientSession} (the defaults are the module's constants). */
export interface SessionOptions {
  streamWindow?: number;
  connWindow?: number;
  maxStreams?: number;
  /** Changes to the allowance of frames without responses or data (for tests). */
  allowance?: FrameAllowanceOptions;
}

/**
 * The client side of one HTTP/2 connection, without I/O: {@linkcode receive}
 * takes what was read, {@linkcode takeOutput} gives what to write.
 * Connection errors are thrown from `receive` as `H2ConnectionError` (or
 * `HpackError`); the caller then sends `goaway()` and ends with `fail()`.
 *
 * @example
 * ```ts
 * const session = new H2ClientSession();
 * session.start();
 * const id = session.open(
 *   [[":method", "GET"], [":scheme", "https"], [":authority", "x"], [":path", "/"]],
 *   true,
 *   events,
 *   "GET",
 * );
 * write(session.takeOutput()!); // preface, SETTINGS, HEADERS
 * session.receive(bytesRead); // events.response(...), events.data(...), events.end(...)
 * ```
 */
export class H2ClientSession {
  #encoder = new HpackEncoder();
  #decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: MAX_HEADER_LIST });
  #streams = new Map<number, SessionStream>();
  /** Streams closed lately: true when closed by a reset (late frames are dropped). */
  #closed = new Map<number, boolean>();
  #nextId = 1;
  #out: Uint8Array[] = [];
  #answers = 0;
  /** Bytes of frames other than request DATA in #out. */
  #control = 0;
  /** The start of a frame not yet whole. */
  #rest: Uint8Array | null = null;
  /** The origin's first frame (SETTINGS, §3.4) has come. */
  #settled = false;
  #block: { stream: number; endStream: boolean; parts: Uint8Array[]; size: number } | null = null;
  #peerWindow = DEFAULT_WINDOW;
  #peerFrameSize = MIN_FRAME_SIZE;
  #peerMaxStreams: number;
  #connSendWindow = DEFAULT_WINDOW;
  #connRecvWindow: number;
  /** DATA bytes read or let go and not yet given back to the connection window. */
  #connOwed = 0;
  #streamWindow: number;
  #connWindow: number;
  #maxStreams: number;
  /** The origin's GOAWAY: the last stream it processes. */
  #goaway: { last: number; code: number } | null = null;
  /** Our GOAWAY was sent or the connection ended: nothing more opens or is given back. */
  #ending = false;
  /** Frames without responses or data the origin may still send (see ALLOWANCE). */
  #frames: FrameAllowance;
  /** When the bytes being received came: the clock is read for their first frame without work only. */
  #readAt = -1;

  constructor(options: SessionOptions = {}) {
    this.#streamWindow = options.streamWindow ?? STREAM_WINDOW;
    this.#connWindow = options.connWindow ?? CONN_WINDOW;
    this.#maxStreams = options.maxStreams ?? MAX_STREAMS;
    this.#peerMaxStreams = this.#maxStreams;
    this.#connRecvWindow = this.#connWindow;
    this.#frames = new FrameAllowance(performance.now(), { ...ALLOWANCE, ...options.allowance });
  }

  /** Queues the connection preface: the magic, SETTINGS, and the connection window. */
  start(): void {
    this.#out.push(
      PREFACE,
      settingsFrame([
        [Setting.ENABLE_PUSH, 0],
        [Setting.INITIAL_WINDOW_SIZE, this.#streamWindow],
        [Setting.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST],
      ]),
    );
    if (this.#connWindow > DEFAULT_WINDOW) {
      this.#out.push(windowUpdateFrame(0, this.#connWindow - DEFAULT_WINDOW));
    }
  }

  /** The bytes to write now, or null. */
  takeOutput(): Uint8Array | null {
    return this.takeBatch()?.bytes ?? null;
  }

  /**
   * The bytes to write now, with how many of them are frames other than
   * request DATA (see {@linkcode UNSENT_LIMIT}); null when there are none.
   */
  takeBatch(): { bytes: Uint8Array; control: number } | null {
    if (this.#out.length === 0) return null;
    const bytes = concat(this.#out);
    const control = this.#control;
    this.#out = [];
    this.#control = 0;
    return { bytes, control };
  }

  /** Everything taken so far has been written (the origin reads what it is sent). */
  written(): void {
    this.#answers = 0;
  }

  /** Queues a frame other than request DATA. */
  #push(bytes: Uint8Array): void {
    this.#control += bytes.byteLength;
    this.#out.push(bytes);
  }

  /** Streams open (counted against the concurrency limit). */
  get streams(): number {
    return this.#streams.size;
  }

  /** The most streams open at once: ours, or the origin's SETTINGS_MAX_CONCURRENT_STREAMS. */
  get maxStreams(): number {
    return Math.min(this.#maxStreams, this.#peerMaxStreams);
  }

  /**
   * A new stream can be opened now: below the stream limit (one stream only
   * until the origin's SETTINGS have told it), and less than half the
   * connection window held by bodies not read yet (slow clients' streams
   * would hold a new one back).
   */
  get canOpen(): boolean {
    return !this.draining && this.#streams.size < (this.#settled ? this.maxStreams : 1) &&
      this.held < this.#connWindow / 2;
  }

  /** The origin's SETTINGS have come (its stream limit is known). */
  get settled(): boolean {
    return this.#settled;
  }

  /** Response body bytes received and not yet read or let go. */
  get held(): number {
    return this.#connWindow - this.#connRecvWindow - this.#connOwed;
  }

  /** No stream will ever open again: a GOAWAY either way, or the ids are used up. */
  get draining(): boolean {
    return this.#ending || this.#goaway !== null || this.#nextId > MAX_WINDOW;
  }

  /**
   * Opens a stream with the request's header list (pseudo-fields first);
   * `endStream` when it has no body. Returns its id.
   */
  open(
    fields: [string, string][],
    endStream: boolean,
    events: StreamEvents,
    method: string,
  ): number {
    if (!this.canOpen) throw new Error("no stream can be opened on this connection now");
    const id = this.#nextId;
    this.#nextId += 2;
    this.#streams.set(id, {
      id,
      events,
      method,
      sendWindow: this.#peerWindow,
      recvWindow: this.#streamWindow,
      consumed: 0,
      received: 0,
      length: null,
      noBody: false,
      head: false,
      heard: false,
      localClosed: endStream,
      remoteClosed: false,
    });
    this.#frames.opened();
    this.#push(headerFrames(id, this.#encoder.encode(fields), endStream, this.#peerFrameSize));
    return id;
  }

  /** Request body bytes the stream may send now; null when it can send no more. */
  sendable(id: number): number | null {
    const s = this.#streams.get(id);
    if (s === undefined || s.localClosed) return null;
    return Math.max(0, Math.min(s.sendWindow, this.#connSendWindow));
  }

  /** Queues request body bytes (at most {@linkcode sendable}), ending the stream with `end`. */
  data(id: number, bytes: Uint8Array, end: boolean): void {
    const s = this.#streams.get(id);
    if (s === undefined || s.localClosed) return;
    const n = bytes.byteLength;
    if (n > Math.min(s.sendWindow, this.#connSendWindow)) {
      throw new RangeError(`Cannot send ${n} bytes on stream ${id}: beyond the origin's window`);
    }
    const size = this.#peerFrameSize;
    const frames = Math.max(1, Math.ceil(n / size));
    const out = new Uint8Array(n + frames * FRAME_HEADER);
    let at = 0;
    let o = 0;
    for (let i = 0; i < frames; i++) {
      const part = Math.min(size, n - at);
      const flags = end && i === frames - 1 ? Flag.END_STREAM : 0;
      putFrameHeader(out, o, part, FrameType.DATA, flags, id);
      out.set(bytes.subarray(at, at + part), o + FRAME_HEADER);
      o += FRAME_HEADER + part;
      at += part;
    }
    s.sendWindow -= n;
    this.#connSendWindow -= n;
    this.#frames.bytes(n);
    this.#frames.framesSent(frames);
    this.#out.push(out);
    if (end) this.#endLocal(s);
  }

  /** Ends the request with trailers (a HEADERS frame with END_STREAM). */
  trailers(id: number, fields: [string, string][]): void {
    const s = this.#streams.get(id);
    if (s === undefined || s.localClosed) return;
    this.#push(headerFrames(id, this.#encoder.encode(fields), true, this.#peerFrameSize));
    this.#endLocal(s);
  }

  /** Resets a stream (RST_STREAM with `code`); its later frames are dropped. */
  reset(id: number, code: number): void {
    const s = this.#streams.get(id);
    if (s === undefined) return;
    this.#forget(s, true);
    this.#push(rstStreamFrame(id, code));
  }

  /**
   * Response body bytes of a stream were read (or let go): the connection
   * window gets them back, and the stream's reopens once half of it is read.
   */
  consumed(id: number, n: number): void {
    this.#giveBack(n);
    const s = this.#streams.get(id);
    if (s === undefined || s.remoteClosed) return;
    s.consumed += n;
    this.#reopen(s);
  }

  /** Says goodbye (GOAWAY with `code`): no stream opens any more. */
  goaway(code: number, debug = ""): void {
    if (this.#ending) return;
    this.#ending = true;
    this.#push(goawayFrame(0, code, debug));
  }

  /** The connection is over: every open stream fails with `error`. */
  fail(error: Error): void {
    this.#ending = true;
    const streams = [...this.#streams.values()];
    this.#streams.clear();
    for (const s of streams) s.events.fail(error, s.heard ? null : "unanswered");
  }

  /** Takes bytes read off the connection; throws on a connection error. */
  receive(bytes: Uint8Array): void {
    this.#readAt = -1;
    let buf = bytes;
    if (this.#rest !== null) {
      buf = concat([this.#rest, bytes]);
      this.#rest = null;
    }
    let at = 0;
    while (buf.byteLength - at >= FRAME_HEADER) {
      const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
      // No SETTINGS_MAX_FRAME_SIZE is sent: the default holds.
      if (length > MIN_FRAME_SIZE) {
        throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `frame of ${length} bytes`);
      }
      if (buf.byteLength - at < FRAME_HEADER + length) break;
      const type = buf[at + 3];
      const flags = buf[at + 4];
      const id = u31(buf, at + 5);
      const payload = buf.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length);
      at += FRAME_HEADER + length;
      this.#onFrame(type, flags, id, payload);
    }
    // A copy: the caller reads into its buffer again.
    if (at < buf.byteLength) this.#rest = buf.slice(at);
  }

  #onFrame(type: number, flags: number, id: number, payload: Uint8Array): void {
    if (!this.#settled) {
      if (type !== FrameType.SETTINGS || flags & Flag.ACK) {
        throw new H2ConnectionError(
          ErrorCode.PROTOCOL_ERROR,
          "the origin's connection preface must be SETTINGS",
        );
      }
      this.#settled = true;
    }
    if (this.#block !== null && (type !== FrameType.CONTINUATION || id !== this.#block.stream)) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block was interrupted");
    }
    // DATA and HEADERS cost only when they turn out to carry nothing (#onData, #onHeaderBlock).
    if (type !== FrameType.DATA && type !== FrameType.HEADERS) this.#idle();
    switch (type) {
      case FrameType.DATA:
        return this.#onData(flags, id, payload);
      case FrameType.HEADERS:
        return this.#onHeaders(flags, id, payload);
      case FrameType.CONTINUATION:
        if (this.#block === null) {
          throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        }
        return this.#addToBlock(payload, flags);
      case FrameType.PRIORITY:
        if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0");
        return;
      case FrameType.RST_STREAM:
        return this.#onReset(id, payload);
      case FrameType.SETTINGS:
        return this.#onSettings(flags, id, payload);
      case FrameType.PUSH_PROMISE:
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE with push disabled");
      case FrameType.PING:
        if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.byteLength !== 8) {
          throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PING not 8 bytes long");
        }
        if (!(flags & Flag.ACK)) this.#answer(frame(FrameType.PING, Flag.ACK, 0, payload));
        return;
      case FrameType.GOAWAY:
        return this.#onGoaway(id, payload);
      case FrameType.WINDOW_UPDATE:
        return this.#onWindowUpdate(id, payload);
      default:
        return; // unknown frame types are ignored (§4.1)
    }
  }

  /** A frame without a response or its data: it costs allowance, earned back by work. */
  #idle(): void {
    if (this.#readAt < 0) this.#readAt = performance.now();
    if (!this.#frames.idle(this.#readAt)) {
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        "the origin sends too many frames without responses or data",
      );
    }
  }

  /** Queues an answer the origin asked for; too many unread ones are a flood. */
  #answer(bytes: Uint8Array): void {
    this.#answers += bytes.byteLength;
    if (this.#answers > FLOOD_BYTES) {
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        "the origin sends PING or SETTINGS without reading the answers",
      );
    }
    this.#push(bytes);
  }

  /**
   * A frame on a stream that is not open. Throws for a stream never opened
   * (or one the origin would open: push is off) and for one that ended
   * normally; one that was reset, or is long forgotten, is dropped.
   */
  #notOpen(id: number, what: string): void {
    if (id % 2 === 0 || id >= this.#nextId) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `${what} on idle stream ${id}`);
    }
    if (this.#closed.get(id) === false) {
      throw new H2ConnectionError(ErrorCode.STREAM_CLOSED, `${what} on closed stream ${id}`);
    }
  }

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
    const size = payload.byteLength;
    // The connection window counts every DATA byte, padding and dropped frames included.
    this.#connRecvWindow -= size;
    if (this.#connRecvWindow < 0) {
      throw new H2ConnectionError(
        ErrorCode.FLOW_CONTROL_ERROR,
        "the origin overran the connection window",
      );
    }
    const data = this.#unpad(flags, payload);
    const s = this.#streams.get(id);
    // Padding pays for nothing; DATA that carries no bytes, or comes for no stream, costs one.
    this.#frames.bytes(data.byteLength);
    if (s === undefined || (data.byteLength === 0 && !(flags & Flag.END_STREAM))) this.#idle();
    if (s === undefined) {
      this.#giveBack(size);
      return this.#notOpen(id, "DATA");
    }
    s.heard = true;
    if (s.remoteClosed) {
      this.#giveBack(size);
      return this.#streamError(s, ErrorCode.STREAM_CLOSED, "DATA after the response ended");
    }
    s.recvWindow -= size;
    if (s.recvWindow < 0) {
      this.#giveBack(size);
      return this.#streamError(s, ErrorCode.FLOW_CONTROL_ERROR, "the origin overran the window");
    }
    s.received += data.byteLength;
    const why = !s.head
      ? "DATA before the response head"
      : s.noBody && data.byteLength > 0
      ? "DATA in a response that has no content"
      : s.length !== null && s.received > s.length
      ? "more DATA than its content-length"
      : null;
    if (why !== null) {
      this.#giveBack(size);
      return this.#malformed(s, why);
    }
    // Padding counts as read at once.
    const pad = size - data.byteLength;
    if (pad > 0) {
      this.#giveBack(pad);
      s.consumed += pad;
      this.#reopen(s);
    }
    if (data.byteLength > 0) s.events.data(data);
    if (flags & Flag.END_STREAM) this.#remoteEnd(s, null);
  }

  #onHeaders(flags: number, id: number, payload: Uint8Array): void {
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0");
    let block = this.#unpad(flags, payload);
    if (flags & Flag.PRIORITY) {
      if (block.byteLength < 5) {
        throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "short HEADERS");
      }
      block = block.subarray(5);
    }
    this.#block = { stream: id, endStream: (flags & Flag.END_STREAM) !== 0, parts: [], size: 0 };
    this.#addToBlock(block, flags);
  }

  #addToBlock(part: Uint8Array, flags: number): void {
    const block = this.#block!;
    block.size += FRAME_HEADER + part.byteLength;
    if (block.size > MAX_HEADER_BLOCK) {
      throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    }
    if (!(flags & Flag.END_HEADERS)) {
      // Kept past this read: a copy.
      block.parts.push(part.slice());
      return;
    }
    block.parts.push(part);
    this.#block = null;
    // Decoded even for a stream that is gone: the table must stay in step.
    const decoded = this.#decoder.decode(concat(block.parts));
    this.#onHeaderBlock(block.stream, block.endStream, decoded.fields);
  }

  /** A whole header block: the response head, an interim head, or trailers. */
  #onHeaderBlock(id: number, endStream: boolean, fields: [string, string][] | null): void {
    const s = this.#streams.get(id);
    if (s === undefined) {
      this.#idle();
      return this.#notOpen(id, "HEADERS");
    }
    s.heard = true;
    if (s.remoteClosed) {
      return this.#streamError(s, ErrorCode.STREAM_CLOSED, "HEADERS after the response ended");
    }
    if (fields === null) {
      return this.#malformed(s, `header fields larger than ${MAX_HEADER_LIST} bytes`);
    }
    if (s.head) {
      if (!endStream) return this.#malformed(s, "trailers without END_STREAM");
      const trailers = checkTrailerFields(fields);
      if (!trailers.ok) return this.#malformed(s, `trailers: ${trailers.why}`);
      return this.#remoteEnd(s, trailers.fields);
    }
    const head = checkResponseFields(fields);
    if (!head.ok) return this.#malformed(s, head.why);
    if (head.status < 200) {
      // 100 Continue, 103 Early Hints: not passed on.
      if (endStream) return this.#malformed(s, "an interim response ends the stream");
      return this.#idle();
    }
    s.head = true;
    s.noBody = bodiless(s.method, head.status);
    s.length = s.noBody ? null : head.length;
    s.events.response({ status: head.status, headers: head.headers, length: head.length });
    // The head's listener may have given the stream up.
    if (endStream && this.#streams.get(id) === s) this.#remoteEnd(s, null);
  }

  /** The origin ended the stream: its body must match its declared length. */
  #remoteEnd(s: SessionStream, trailers: [string, string][] | null): void {
    if (s.length !== null && s.received !== s.length) {
      return this.#malformed(s, "the body does not match its content-length");
    }
    s.remoteClosed = true;
    if (s.localClosed) this.#forget(s, false);
    s.events.end(trailers);
  }

  /** A malformed response (§8.1.1): a stream error, a 502 for that request only. */
  #malformed(s: SessionStream, why: string): void {
    this.#streamError(s, ErrorCode.PROTOCOL_ERROR, `malformed response: ${why}`);
  }

  #streamError(s: SessionStream, code: number, why: string): void {
    this.#forget(s, true);
    this.#push(rstStreamFrame(s.id, code));
    s.events.fail(new Error(why), null);
  }

  #onReset(id: number, payload: Uint8Array): void {
    if (payload.byteLength !== 4) {
      throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes");
    }
    if (id === 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0");
    const s = this.#streams.get(id);
    if (s === undefined) {
      if (id % 2 === 0 || id >= this.#nextId) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `RST_STREAM on idle stream ${id}`);
      }
      return;
    }
    const code = new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0);
    this.#forget(s, true);
    s.events.fail(
      new Error(`the origin reset the stream (${errorName(code)})`),
      code === ErrorCode.REFUSED_STREAM ? "refused" : null,
    );
  }

  #onSettings(flags: number, id: number, payload: Uint8Array): void {
    if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & Flag.ACK) {
      if (payload.byteLength !== 0) {
        throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      }
      return;
    }
    let delta = 0;
    for (const [key, value] of parseSettings(payload)) {
      if (key === Setting.INITIAL_WINDOW_SIZE) {
        delta += value - this.#peerWindow;
        this.#peerWindow = value;
      } else if (key === Setting.MAX_FRAME_SIZE) this.#peerFrameSize = value;
      else if (key === Setting.MAX_CONCURRENT_STREAMS) this.#peerMaxStreams = value;
      else if (key === Setting.ENABLE_PUSH && value !== 0) {
        throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH from a server");
      }
    }
    if (delta !== 0) {
      for (const s of this.#streams.values()) {
        s.sendWindow += delta;
        if (s.sendWindow > MAX_WINDOW) {
          throw new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window overflowed");
        }
      }
    }
    this.#answer(frame(FrameType.SETTINGS, Flag.ACK, 0));
    if (delta > 0) { for (const s of [...this.#streams.values()]) s.events.window(); }
  }

  #onGoaway(id: number, payload: Uint8Array): void {
    if (id !== 0) throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
    if (payload.byteLength < 8) {
      throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes");
    }
    const last = u31(payload, 0);
    const code = new DataView(payload.buffer, payload.byteOffset, 8).getUint32(4);
    // A later GOAWAY may only lower the last stream (§6.8).
    this.#goaway = { last: Math.min(last, this.#goaway?.last ?? last), code };
    for (const s of [...this.#streams.values()]) {
      if (s.id <= this.#goaway.last) continue;
      this.#forget(s, true);
      s.events.fail(
        new Error(`the origin is going away (GOAWAY ${errorName(code)}) without this stream`),
        "refused",
      );
    }
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
      for (const s of [...this.#streams.values()]) s.events.window();
      return;
    }
    const s = this.#streams.get(id);
    if (s === undefined) return this.#notOpenWindow(id);
    if (increment === 0) {
      return this.#streamError(s, ErrorCode.PROTOCOL_ERROR, "the origin sent a WINDOW_UPDATE of 0");
    }
    s.sendWindow += increment;
    if (s.sendWindow > MAX_WINDOW) {
      return this.#streamError(s, ErrorCode.FLOW_CONTROL_ERROR, "the stream window overflowed");
    }
    s.events.window();
  }

  /** WINDOW_UPDATE may still come on a stream that ended (§5.1): only an idle one is an error. */
  #notOpenWindow(id: number): void {
    if (id % 2 === 0 || id >= this.#nextId) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `WINDOW_UPDATE on idle stream ${id}`);
    }
  }

  #endLocal(s: SessionStream): void {
    s.localClosed = true;
    if (s.remoteClosed) this.#forget(s, false);
  }

  /** Closes a stream, remembering how (the oldest forgotten past CLOSED_MEMORY). */
  #forget(s: SessionStream, reset: boolean): void {
    this.#streams.delete(s.id);
    this.#closed.set(s.id, reset);
    if (this.#closed.size > CLOSED_MEMORY) this.#closed.delete(this.#closed.keys().next().value!);
  }

  /** Reopens a stream's window once half of it has been read. */
  #reopen(s: SessionStream): void {
    if (s.consumed >= this.#streamWindow / 2) {
      this.#push(windowUpdateFrame(s.id, s.consumed));
      s.recvWindow += s.consumed;
      s.consumed = 0;
    }
  }

  /**
   * Gives connection window back: in steps of CONN_REFRESH, or at once when
   * the origin has less left than is owed (it may be waiting for it).
   */
  #giveBack(n: number): void {
    this.#connOwed += n;
    const owed = this.#connOwed;
    if (owed === 0 || this.#ending || (owed < CONN_REFRESH && owed < this.#connRecvWindow)) return;
    this.#connRecvWindow += owed;
    this.#connOwed = 0;
    this.#push(windowUpdateFrame(0, owed));
  }
}

/**
 * A request's header list for HTTP/2: the pseudo-fields, then `headers`
 * (end-to-end fields, already without hop-by-hop ones and Host), then `te:
 * trailers` when the client sent it.
 *
 * @example
 * ```ts
 * requestFields({ method: "GET", authority: "x", target: "/a?b", headers: [["accept", "*\/*"]], te: true });
 * // [[":method", "GET"], [":scheme", "https"], [":authority", "x"], [":path", "/a?b"],
 * //  ["accept", "*\/*"], ["te", "trailers"]]
 * ```
 */
export function requestFields(req: {
  method: string;
  authority: string;
  target: string;
  headers: [string, string][];
  te: boolean;
}): [string, string][] {
  const fields: [string, string][] = [
    [":method", req.method],
    [":scheme", "https"],
    [":authority", req.authority],
    [":path", req.target],
  ];
  for (const [k, v] of req.headers) fields.push([k.toLowerCase(), v]);
  if (req.te) fields.push(["te", "trailers"]);
  return fields;
}
