/**
 * HTTP/2 frames (RFC 9113 §4, §6): the frame header, the types, flags,
 * settings and error codes, and building frames to send. Pure.
 *
 * @module
 */
import { HpackError } from "./hpack.ts";

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** The frame header's size. */
export const FRAME_HEADER = 9;

/** Frame types. */
export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** Frame flags. */
export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

/** Error codes (RFC 9113 §7). */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

/** Setting identifiers (RFC 9113 §6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The largest flow-control window (2^31 - 1). */
export const MAX_WINDOW = 0x7fffffff;
/** The window every stream and the connection start with. */
export const DEFAULT_WINDOW = 65535;
/** The smallest and largest SETTINGS_MAX_FRAME_SIZE. */
export const MIN_FRAME_SIZE = 16384;
export const MAX_FRAME_SIZE_LIMIT = 16777215;

/** A connection error: the connection ends with GOAWAY and this code. */
export class H2ConnectionError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
    this.name = "H2ConnectionError";
  }
}

/**
 * The GOAWAY code a failure ends an HTTP/2 connection with: its own for a
 * connection error, COMPRESSION_ERROR for a header block HPACK could not
 * decode; null for any other failure (the connection broke: no GOAWAY).
 */
export function connectionErrorCode(e: unknown): number | null {
  if (e instanceof H2ConnectionError) return e.code;
  return e instanceof HpackError ? ErrorCode.COMPRESSION_ERROR : null;
}

/** Writes a frame header at `at` in `out`. */
export function putFrameHeader(
  out: Uint8Array,
  at: number,
  length: number,
  type: number,
  flags: number,
  stream: number,
): void {
  out[at] = length >>> 16;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out[at + 5] = (stream >>> 24) & 0x7f;
  out[at + 6] = (stream >>> 16) & 0xff;
  out[at + 7] = (stream >>> 8) & 0xff;
  out[at + 8] = stream & 0xff;
}

/**
 * A whole frame.
 *
 * @example
 * ```ts
 * frame(FrameType.PING, Flag.ACK, 0, new Uint8Array(8)); // 17 bytes
 * ```
 */
export function frame(
  type: number,
  flags: number,
  stream: number,
  payload?: Uint8Array,
): Uint8Array {
  const length = payload?.byteLength ?? 0;
  const out = new Uint8Array(FRAME_HEADER + length);
  putFrameHeader(out, 0, length, type, flags, stream);
  if (payload) out.set(payload, FRAME_HEADER);
  return out;
}

/** A 32-bit big-endian payload (WINDOW_UPDATE increment, RST_STREAM code). */
function u32(n: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, n);
  return out;
}

/** A SETTINGS frame with these values. */
export function settingsFrame(values: [number, number][]): Uint8Array {
  const payload = new Uint8Array(values.length * 6);
  const view = new DataView(payload.buffer);
  values.forEach(([id, value], i) => {
    view.setUint16(i * 6, id);
    view.setUint32(i * 6 + 2, value);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

/** A WINDOW_UPDATE frame. */
export function windowUpdateFrame(stream: number, increment: number): Uint8Array {
  return frame(FrameType.WINDOW_UPDATE, 0, stream, u32(increment));
}

/** An RST_STREAM frame. */
export function rstStreamFrame(stream: number, code: number): Uint8Array {
  return frame(FrameType.RST_STREAM, 0, stream, u32(code));
}

/** A GOAWAY frame naming the last stream processed, with a debug text. */
export function goawayFrame(lastStream: number, code: number, debug = ""): Uint8Array {
  const text = new TextEncoder().encode(debug);
  const payload = new Uint8Array(8 + text.byteLength);
  const view = new DataView(payload.buffer);
  view.setUint32(0, lastStream & MAX_WINDOW);
  view.setUint32(4, code);
  payload.set(text, 8);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

/**
 * Parses a SETTINGS payload into [id, value] pairs, checking the values
 * RFC 9113 §6.5.2 bounds (a connection error otherwise).
 */
export function parseSettings(payload: Uint8Array): [number, number][] {
  if (payload.byteLength % 6 !== 0) {
    throw new H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6");
  }
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const out: [number, number][] = [];
  for (let i = 0; i < payload.byteLength; i += 6) {
    const id = view.getUint16(i);
    const value = view.getUint32(i + 2);
    if (id === Setting.ENABLE_PUSH && value > 1) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH above 1");
    }
    if (id === Setting.INITIAL_WINDOW_SIZE && value > MAX_WINDOW) {
      throw new H2ConnectionError(
        ErrorCode.FLOW_CONTROL_ERROR,
        "SETTINGS_INITIAL_WINDOW_SIZE too large",
      );
    }
    if (id === Setting.MAX_FRAME_SIZE && (value < MIN_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT)) {
      throw new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
    }
    out.push([id, value]);
  }
  return out;
}

/**
 * A header block as frames: a HEADERS frame, then as many CONTINUATION
 * frames as `maxFrame` needs; END_HEADERS on the last, END_STREAM (when
 * asked) on the first.
 *
 * @example
 * ```ts
 * headerFrames(1, new HpackEncoder().encode([[":status", "200"]]), true, MIN_FRAME_SIZE);
 * ```
 */
export function headerFrames(
  stream: number,
  block: Uint8Array,
  endStream: boolean,
  maxFrame: number,
): Uint8Array {
  const count = Math.max(1, Math.ceil(block.byteLength / maxFrame));
  const out = new Uint8Array(block.byteLength + count * FRAME_HEADER);
  let at = 0;
  for (let i = 0; i < count; i++) {
    const part = block.subarray(i * maxFrame, (i + 1) * maxFrame);
    const flags = (i === count - 1 ? Flag.END_HEADERS : 0) |
      (i === 0 && endStream ? Flag.END_STREAM : 0);
    putFrameHeader(
      out,
      at,
      part.byteLength,
      i === 0 ? FrameType.HEADERS : FrameType.CONTINUATION,
      flags,
      stream,
    );
    out.set(part, at + FRAME_HEADER);
    at += FRAME_HEADER + part.byteLength;
  }
  return out;
}

/** The 31-bit number (a stream id, a window increment) at `at`; the reserved bit is ignored. */
export function u31(bytes: Uint8Array, at: number): number {
  return ((bytes[at] & 0x7f) << 24 | bytes[at + 1] << 16 | bytes[at + 2] << 8 | bytes[at + 3]) >>>
    0;
}

/**
 * An error code's name (RFC 9113 §7), or its number in hex when unknown.
 *
 * @example
 * ```ts
 * errorName(ErrorCode.REFUSED_STREAM); // "REFUSED_STREAM"
 * errorName(0x77); // "0x77"
 * ```
 */
export function errorName(code: number): string {
  for (const [name, value] of Object.entries(ErrorCode)) if (value === code) return name;
  return `0x${code.toString(16)}`;
}
