/**
 * The time limits of one `forgekit fetch`: `--max-time` for the whole
 * request and response, `--idle-timeout` for a server that sends nothing
 * (no response, or a body that stalls).
 */
import { CliError, usageError } from "../cli/mod.ts";

/** The longest limit a timer can hold (setTimeout's 2^31 - 1 ms), in whole seconds. */
const MAX_SECONDS = 2_147_483;

/**
 * Parses a number of seconds given to an option: a plain decimal such as
 * `30` or `0.5`; `0` only where it means "no limit". Pure.
 *
 * @example
 * ```ts
 * parseSeconds("--max-time", "2.5"); // 2.5
 * parseSeconds("--idle-timeout", "0", { zero: true }); // 0
 * ```
 */
export function parseSeconds(option: string, value: string, opts: { zero?: boolean } = {}): number {
  const n = /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN;
  const ok = n === 0 ? opts.zero === true : n >= 0.001 && n <= MAX_SECONDS;
  if (!ok) {
    throw usageError(
      `${option} must be a number of seconds from ${
        opts.zero ? "0 (no limit)" : "0.001"
      } to ${MAX_SECONDS} (got: ${JSON.stringify(value)})`,
      `e.g. ${option} 30`,
    );
  }
  return n;
}

/** The limits, in seconds; null for none. */
export interface TimeLimits {
  maxTime: number | null;
  idleTimeout: number | null;
}

/**
 * Aborts one transfer when a limit is reached. Its signal goes to fetch; the
 * idle limit runs only while forgekit waits for the server (between
 * {@linkcode TransferTimer.waiting} and {@linkcode TransferTimer.busy}), so a
 * slow reader of stdout never counts against the server.
 *
 * @example
 * ```ts
 * const timer = new TransferTimer("GET https://x/", { maxTime: 30, idleTimeout: 300 });
 * try {
 *   await timer.race(download(timer.signal));
 * } finally {
 *   timer.stop();
 * }
 * ```
 */
export class TransferTimer {
  readonly #controller = new AbortController();
  readonly #what: string;
  readonly #idleTimeout: number | null;
  #maxTimer: ReturnType<typeof setTimeout> | undefined;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  /** @param what the request, for messages: `GET https://host/path` (redacted) */
  constructor(what: string, limits: TimeLimits) {
    this.#what = what;
    this.#idleTimeout = limits.idleTimeout || null;
    const max = limits.maxTime;
    if (max !== null) {
      this.#maxTimer = setTimeout(() =>
        this.#abort(
          new CliError(`${what}: not finished within ${max} s`, {
            hint: `--max-time ${max}; raise it, or check the server and network`,
          }),
        ), max * 1000);
    }
  }

  /** Aborted when a limit is reached; its reason is the error to report. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** forgekit waits for the server (or sends to it): the idle limit starts again. */
  waiting(): void {
    const idle = this.#idleTimeout;
    if (idle === null || this.#stopped) return;
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() =>
      this.#abort(
        new CliError(`${this.#what}: nothing received for ${idle} s`, {
          hint:
            `--idle-timeout ${idle}; raise it, give 0 for no limit, or check the server and network`,
        }),
      ), idle * 1000);
  }

  /** forgekit is busy with what it received: the idle limit pauses. */
  busy(): void {
    clearTimeout(this.#idleTimer);
  }

  /** Ends both limits, for good. */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#maxTimer);
    clearTimeout(this.#idleTimer);
  }

  /**
   * Settles as `work` does, or rejects with the limit's error as soon as one
   * is reached, even when `work` waits on something the signal cannot abort
   * (a token command, a full pipe).
   */
  race<T>(work: Promise<T>): Promise<T> {
    work.catch(() => {}); // settling after the limit is no longer anyone's concern
    const signal = this.signal;
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
    });
  }

  #abort(reason: CliError): void {
    this.stop();
    this.#controller.abort(reason);
  }
}
