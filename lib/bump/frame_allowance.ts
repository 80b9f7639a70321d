/**
 * How many HTTP/2 frames that carry no work (PING, SETTINGS, PRIORITY,
 * WINDOW_UPDATE, RST_STREAM, empty DATA, unknown types, ...) a peer may
 * send. Each costs about as much to read as a DATA frame (about 1 µs), so
 * an endless stream of them holds a CPU with nothing to show for it. A
 * connection starts with an allowance of such frames and earns more back by
 * work: streams opened, body bytes moved, DATA frames sent (the window
 * updates and pings a peer answers them with), and time. A peer that spends
 * it all is flooding (GOAWAY ENHANCE_YOUR_CALM). Pure: the caller says what
 * happened and when.
 *
 * Both sides use it: `h2_server.ts` for what clients send, and
 * `h2_client_session.ts` for what origins send.
 *
 * @module
 */

/** Frames a connection may send at once, and the most it saves up. */
export const FRAME_ALLOWANCE = 1000;
/** What a stream opened pays for: its PRIORITY, a PING, a reset, window updates. */
export const FRAMES_PER_STREAM = 10;
/** Body bytes that pay for one frame (a peer acknowledging each 16 KiB DATA frame sends two). */
export const BYTES_PER_FRAME = 4096;
/** Such frames a connection may send per second regardless (keep-alive PINGs). */
export const FRAMES_PER_SECOND = 100;

/** Options of {@linkcode FrameAllowance} (the defaults are the module's constants). */
export interface FrameAllowanceOptions {
  /** Frames a connection may send at once, and the most it saves up. */
  frames?: number;
  /** What each stream opened pays for. */
  perStream?: number;
  /** Body bytes that pay for one frame. */
  bytesPerFrame?: number;
  /** What each DATA frame sent to the peer pays for (0 by default). */
  perFrameSent?: number;
  /** Frames earned per second regardless. */
  perSecond?: number;
}

/**
 * One connection's allowance of frames that carry no work. Each call is a
 * few arithmetic operations: it runs for frames on the hot path.
 *
 * @example
 * ```ts
 * const frames = new FrameAllowance(performance.now());
 * frames.opened(); // a stream: 10 more
 * frames.bytes(16384); // a 16 KiB response: 4 more
 * if (!frames.idle(performance.now())) {
 *   throw new H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many frames without work");
 * }
 * ```
 */
export class FrameAllowance {
  #max: number;
  #perStream: number;
  #perByte: number;
  #perFrameSent: number;
  #perMs: number;
  #left: number;
  #at: number;

  /** `now`: when the connection started (ms, `performance.now()`). */
  constructor(now: number, options: FrameAllowanceOptions = {}) {
    this.#max = options.frames ?? FRAME_ALLOWANCE;
    this.#perStream = options.perStream ?? FRAMES_PER_STREAM;
    this.#perByte = 1 / (options.bytesPerFrame ?? BYTES_PER_FRAME);
    this.#perFrameSent = options.perFrameSent ?? 0;
    this.#perMs = (options.perSecond ?? FRAMES_PER_SECOND) / 1000;
    this.#left = this.#max;
    this.#at = now;
  }

  /** Frames still allowed (negative once spent out). */
  get left(): number {
    return this.#left;
  }

  /**
   * A frame that carries no work came at `now` (ms, `performance.now()`):
   * spends one, after what the time since the last one earned. False once
   * the allowance is spent out: the peer is flooding.
   */
  idle(now: number): boolean {
    this.earn((now - this.#at) * this.#perMs);
    this.#at = now;
    return --this.#left >= 0;
  }

  /** Adds `frames` to the allowance, up to its maximum. */
  earn(frames: number): void {
    this.#left = Math.min(this.#max, this.#left + frames);
  }

  /** A stream was opened. */
  opened(): void {
    this.earn(this.#perStream);
  }

  /** `n` body bytes were sent or received. */
  bytes(n: number): void {
    this.earn(n * this.#perByte);
  }

  /** `frames` DATA frames were sent to the peer. */
  framesSent(frames: number): void {
    this.earn(frames * this.#perFrameSent);
  }
}
