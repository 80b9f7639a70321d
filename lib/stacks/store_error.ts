/** Failures of the storage itself, which the API answers as 503 or 507, not 500. */

/**
 * What kept the database from doing what was asked:
 * - `busy`: another connection or process holds the write lock;
 * - `full`: the disk (or the database's size limit) is full;
 * - `readonly`: the database file cannot be written;
 * - `io`: the operating system failed a read or a write;
 * - `schema`: a newer forgekit upgraded the database while this one ran.
 */
export type StoreFailure = "busy" | "full" | "readonly" | "io" | "schema";

/**
 * A storage failure that is no fault of the request: the transaction was
 * rolled back, nothing was changed, and the same request may succeed later.
 * Any {@linkcode Store} throws it for these; the app turns it into a response.
 *
 * @example
 * ```ts
 * throw new StoreError("busy", "Database is locked by another connection", { cause: err });
 * ```
 */
export class StoreError extends Error {
  readonly failure: StoreFailure;
  constructor(failure: StoreFailure, message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "StoreError";
    this.failure = failure;
  }
}
