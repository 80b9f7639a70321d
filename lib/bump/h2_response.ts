/**
 * Checking an HTTP/2 response's fields as forgekit's origin client
 * (`origin_h2.ts`) reads them off an origin, as strictly as `h2_request.ts`
 * checks a client's request. Pure: the decoded field list in, the response
 * head or the reason it is malformed out (RFC 9113 §8.1.1, §8.2, §8.3.2).
 *
 * @module
 */
import { fieldProblem } from "./h2_request.ts";
import { LENGTH_VALUE } from "./http_head.ts";

/** A response head, checked. */
export type H2ResponseFields =
  | {
    ok: true;
    status: number;
    /** The regular fields, in order. */
    headers: [string, string][];
    /** `content-length`, when sent. */
    length: number | null;
  }
  | { ok: false; why: string };

/**
 * Checks a response's decoded fields. Malformed: a missing, repeated,
 * invalid or late `:status`, any other pseudo-field, `:status` 101 (no
 * protocol switch in HTTP/2, §8.6), a field {@linkcode fieldProblem}
 * refuses, and an invalid or conflicting `content-length`. Informational
 * heads (1xx) are checked the same way.
 *
 * @example
 * ```ts
 * checkResponseFields([[":status", "200"], ["content-length", "3"]]);
 * // { ok: true, status: 200, headers: [["content-length", "3"]], length: 3 }
 * checkResponseFields([["server", "x"], [":status", "200"]]);
 * // { ok: false, why: "pseudo-field :status after a regular field" }
 * ```
 */
export function checkResponseFields(fields: [string, string][]): H2ResponseFields {
  let status: string | undefined;
  let length: number | null = null;
  let regular = false;
  const headers: [string, string][] = [];
  for (const [name, value] of fields) {
    if (name.charCodeAt(0) === 58) {
      if (regular) return { ok: false, why: `pseudo-field ${name} after a regular field` };
      if (name !== ":status") {
        return { ok: false, why: `unknown pseudo-field ${JSON.stringify(name)} in a response` };
      }
      if (status !== undefined) return { ok: false, why: "repeated :status" };
      status = value;
      continue;
    }
    regular = true;
    const why = fieldProblem(name, value);
    if (why !== null) return { ok: false, why };
    if (name === "content-length") {
      if (!LENGTH_VALUE.test(value) || (length !== null && Number(value) !== length)) {
        return { ok: false, why: `invalid content-length ${JSON.stringify(value)}` };
      }
      length = Number(value);
    }
    headers.push([name, value]);
  }
  if (status === undefined || !/^[1-5][0-9][0-9]$/.test(status)) {
    return { ok: false, why: "missing or invalid :status" };
  }
  if (status === "101") return { ok: false, why: ":status 101 (no protocol switch in HTTP/2)" };
  return { ok: true, status: Number(status), headers, length };
}

/**
 * Whether a response to `method` with `status` has no content whatever its
 * fields say (RFC 9110 §6.4.1): a response to HEAD, 204 and 304. Its
 * `content-length` describes the resource, not DATA.
 *
 * @example
 * ```ts
 * bodiless("HEAD", 200); // true
 * bodiless("GET", 304); // true
 * bodiless("GET", 200); // false
 * ```
 */
export function bodiless(method: string, status: number): boolean {
  return method === "HEAD" || status === 204 || status === 304;
}
