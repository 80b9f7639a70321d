/** Which node:sqlite errors are storage failures ({@linkcode StoreError}), and of what kind. */
import { StoreError, type StoreFailure } from "./store_error.ts";

/** SQLite's primary result codes for the failures, and the messages it gives them. */
const FAILURES: { code: number; message: RegExp; failure: StoreFailure; text: string }[] = [
  { code: 5, message: /^database is locked\b/, failure: "busy", text: "Database is locked" },
  { code: 6, message: /^database table is locked\b/, failure: "busy", text: "Database is locked" },
  {
    code: 13,
    message: /^database or disk is full\b/,
    failure: "full",
    text: "Database or disk is full",
  },
  {
    code: 8,
    message: /^attempt to write a readonly database\b/,
    failure: "readonly",
    text: "Database is read-only",
  },
  {
    code: 10,
    message: /^disk I\/O error\b/,
    failure: "io",
    text: "Disk I/O error on the database",
  },
];

/**
 * The {@linkcode StoreError} an error of node:sqlite stands for, or null when
 * it is another error (a constraint, a bug). Node gives the result code as
 * `errcode`; Deno gives only SQLite's message, so both are read.
 *
 * @example
 * ```ts
 * sqliteFailure(new Error("database or disk is full"))?.failure; // "full"
 * sqliteFailure(new Error("UNIQUE constraint failed: users.login")); // null
 * ```
 */
export function sqliteFailure(err: unknown): StoreError | null {
  if (err instanceof StoreError) return err;
  if (!(err instanceof Error)) return null;
  const errcode = (err as { errcode?: unknown }).errcode;
  const hit = typeof errcode === "number"
    ? FAILURES.find((f) => f.code === (errcode & 0xff))
    : FAILURES.find((f) => f.message.test(err.message));
  return hit ? new StoreError(hit.failure, hit.text, { cause: err }) : null;
}
