/**
 * Ending on a signal: the exit code a shell expects (128 + the signal's
 * number), and cleanup that must run before it.
 */

/** Signal numbers for exit codes (128 + n). */
const SIGNO: Partial<Record<Deno.Signal, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGKILL: 9,
  SIGTERM: 15,
};

/** The signals that end a command: Ctrl-C, `kill`, a closed terminal. */
export const TERMINATION_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * The exit code for ending on a signal: 128 + its number.
 *
 * @example
 * ```ts
 * signalExitCode("SIGINT"); // 130
 * ```
 */
export function signalExitCode(signal: Deno.Signal): number {
  return 128 + (SIGNO[signal] ?? 1);
}

/**
 * Until the returned function is called, SIGINT, SIGTERM and SIGHUP (on
 * Windows, SIGINT) run `cleanup` (synchronously: nothing after it is
 * awaited) and then end the process with {@linkcode signalExitCode}.
 *
 * @example
 * ```ts
 * const stop = onTerminationSignal(() => Deno.removeSync(tmp));
 * try {
 *   await download(tmp);
 * } finally {
 *   stop();
 * }
 * ```
 */
export function onTerminationSignal(cleanup: () => void): () => void {
  // Windows delivers only Ctrl-C (and Ctrl-Break) to a listener.
  const signals = Deno.build.os === "windows" ? (["SIGINT"] as const) : TERMINATION_SIGNALS;
  const handlers = signals.map((sig) => {
    const handler = () => {
      try {
        cleanup();
      } finally {
        Deno.exit(signalExitCode(sig));
      }
    };
    Deno.addSignalListener(sig, handler);
    return [sig, handler] as const;
  });
  return () => {
    for (const [sig, handler] of handlers) Deno.removeSignalListener(sig, handler);
  };
}
