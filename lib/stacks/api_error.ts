/** Errors of the REST API, shaped as GitHub shapes them. */
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { StoreError } from "./store_error.ts";

/** Where every error points, as GitHub's `documentation_url`. */
export const DOCS_URL = "https://docs.github.com/rest";

/** One entry of a 422's `errors`. */
export interface ErrorEntry {
  resource: string;
  field: string;
  code: string;
  message?: string;
}

/**
 * An API error: status, message and, for 422, one entry per problem.
 *
 * @example
 * ```ts
 * throw new ApiError(404, "Not Found");
 * ```
 */
export class ApiError extends HTTPException {
  readonly errors?: ErrorEntry[];
  /** Headers the error response carries (e.g. `Retry-After`). */
  readonly headers?: Record<string, string>;
  constructor(
    status: ContentfulStatusCode,
    message: string,
    options: { errors?: ErrorEntry[]; headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(status, { message, cause: options.cause });
    this.errors = options.errors;
    this.headers = options.headers;
  }
}

/** Seconds a client is asked to wait before trying a request the database was too busy for. */
export const BUSY_RETRY_AFTER = 2;

/**
 * The API error for a storage failure: the request was fine and nothing was
 * changed, so it is never a 500. A lock held elsewhere is 503 with
 * `Retry-After`; a full disk 507 Insufficient Storage; a read-only file, a
 * disk error or a database upgraded by a newer forgekit 503.
 *
 * @example
 * ```ts
 * storeApiError(new StoreError("full", "Database or disk is full")).status; // 507
 * ```
 */
export function storeApiError(err: StoreError): ApiError {
  const cause = err;
  switch (err.failure) {
    case "busy":
      return new ApiError(
        503,
        "Service unavailable: the database is locked by another writer; nothing was changed, try again",
        { headers: { "Retry-After": String(BUSY_RETRY_AFTER) }, cause },
      );
    case "full":
      return new ApiError(
        507,
        "Insufficient storage: the server's disk is full; nothing was changed",
        { cause },
      );
    case "readonly":
      return new ApiError(
        503,
        "Service unavailable: the server's database is read-only; nothing was changed",
        { cause },
      );
    case "io":
      return new ApiError(
        503,
        "Service unavailable: the server cannot read or write its database (disk I/O error); nothing was changed",
        { cause },
      );
    case "schema":
      return new ApiError(
        503,
        "Service unavailable: a newer version of the server upgraded its database; nothing was changed",
        { cause },
      );
  }
}

/** A 422 Validation Failed with the given problems. */
export function validationFailed(
  resource: string,
  problems: { field: string; code: string; message?: string }[],
): ApiError {
  return new ApiError(422, "Validation Failed", {
    errors: problems.map((p) => ({ resource, ...p })),
  });
}

/** The JSON body of an error response. */
export function errorBody(status: number, message: string, errors?: ErrorEntry[]) {
  return {
    message,
    documentation_url: DOCS_URL,
    ...(errors ? { errors } : {}),
    status: String(status),
  };
}
