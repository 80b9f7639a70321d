/** Errors of the REST API, shaped as GitHub shapes them. */
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";

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
  constructor(
    status: ContentfulStatusCode,
    message: string,
    options: { errors?: ErrorEntry[]; cause?: unknown } = {},
  ) {
    super(status, { message, cause: options.cause });
    this.errors = options.errors;
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
