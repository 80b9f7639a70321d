import { printable } from "./output.ts";

/**
 * Errors meant for people: a one-line message, an optional hint, an exit code.
 *
 * Exit codes follow one rule everywhere: 0 success, 1 the operation failed,
 * 2 usage or configuration error.
 */

/** Exit code for an operation that ran and failed. */
export const EXIT_FAILURE = 1;
/** Exit code for a usage or configuration error. */
export const EXIT_USAGE = 2;

/** Options of {@linkcode CliError}. */
export interface CliErrorOptions {
  /** What the user can do about it; printed in parentheses. */
  hint?: string;
  /** Process exit code; defaults to 1. */
  exitCode?: number;
  /** The underlying error. */
  cause?: unknown;
}

/**
 * An error whose message is fit to show to the user as is.
 *
 * @example
 * ```ts
 * throw new CliError("GET https://x/ returned 404 Not Found");
 * ```
 */
export class CliError extends Error {
  readonly hint?: string;
  readonly exitCode: number;

  constructor(message: string, options: CliErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "CliError";
    this.hint = options.hint;
    this.exitCode = options.exitCode ?? EXIT_FAILURE;
  }
}

/**
 * A usage or configuration error: exit code 2.
 *
 * @example
 * ```ts
 * throw usageError("Unknown option --frob", "run: forgekit fetch --help");
 * ```
 */
export function usageError(message: string, hint?: string, cause?: unknown): CliError {
  return new CliError(message, { hint, exitCode: EXIT_USAGE, cause });
}

/** Masks a secret for display: keeps at most the first 4 characters. */
export function maskSecret(secret: string): string {
  if (secret.length <= 8) return "****";
  return `${secret.slice(0, 4)}****`;
}

/**
 * Formats an error as the single line forgekit prints on stderr:
 * `error: <what>[: <cause>…] (<hint>)`. Line breaks become spaces, and any
 * other control character (which a server's message may hold) is escaped,
 * so the line is shown as it is and stays one line.
 */
export function formatError(err: unknown): string {
  const parts: string[] = [];
  let hint: string | undefined;
  let current: unknown = err;
  const seen = new Set<unknown>();
  while (current !== undefined && current !== null && !seen.has(current)) {
    seen.add(current);
    if (current instanceof Error) {
      const msg = current.message.trim();
      // A cause whose first sentence was already said adds only noise.
      const first = msg.split(/\.\s|\n/)[0].replace(/\.$/, "");
      if (msg && !parts.some((p) => p.includes(first || msg))) parts.push(msg);
      if (current instanceof CliError && current.hint && hint === undefined) hint = current.hint;
      current = current.cause;
    } else {
      parts.push(String(current));
      break;
    }
  }
  const line = `error: ${parts.join(": ") || "unknown error"}${hint ? ` (${hint})` : ""}`;
  return printable(line.replace(/\s*\n\s*/g, " "));
}

/** The exit code an error maps to. */
export function exitCodeOf(err: unknown): number {
  return err instanceof CliError ? err.exitCode : EXIT_FAILURE;
}

/** What went wrong reading or creating a path, without the system's error codes. */
export function fsProblem(err: unknown): string {
  if (err instanceof Deno.errors.NotFound) return "no such file or directory";
  if (err instanceof Deno.errors.PermissionDenied) return "permission denied";
  if (err instanceof Deno.errors.IsADirectory) return "it is a directory";
  const message = (err as Error).message ?? String(err);
  return message.replace(/ \(os error \d+\).*$/, "").toLowerCase();
}
