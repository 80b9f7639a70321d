/** The `errors` of an API error response, as one line for people. */

/**
 * Joins the entries of an error body's `errors` into one line. GitHub sends
 * objects (`{resource, field, code, message?}`) and, on some endpoints, plain
 * strings: a string is used as is, an object by its `message`, else as
 * `field code`; anything else (null, numbers, empty objects) is left out.
 *
 * @example
 * ```ts
 * errorDetails(["Pull request #3 is locked", { field: "head", code: "invalid" }]);
 * // "Pull request #3 is locked; head invalid"
 * ```
 */
export function errorDetails(errors: unknown): string {
  if (!Array.isArray(errors)) return "";
  return errors.map(entryText).filter((s) => s !== "").join("; ");
}

function entryText(e: unknown): string {
  if (typeof e === "string") return e.trim();
  if (typeof e !== "object" || e === null || Array.isArray(e)) return "";
  const { message, field, code } = e as Record<string, unknown>;
  if (typeof message === "string" && message.trim()) return message.trim();
  return [field, code].filter((v) => typeof v === "string" && v !== "").join(" ");
}
