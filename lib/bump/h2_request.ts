/**
 * Checking an HTTP/2 request's fields for the bumped-connection server
 * (`h2_server.ts`). Pure: the decoded field list in, the request or the
 * reason it is malformed out (RFC 9113 §8.2, §8.3).
 *
 * @module
 */
import { FIELD_VALUE, HOST } from "./request_head.ts";
import { LENGTH_VALUE } from "./http_head.ts";

/** A field name as HTTP/2 sends it: a token in lower case. */
export const LOWER_TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
/** A `:path`: origin-form (or `*` for OPTIONS). */
const PATH = /^(?:\/[\x21-\x7e]*|\*)$/;
/**
 * Fields that belong to one HTTP/1.1 connection: a request carrying one is
 * malformed, and a response must not carry one (RFC 9113 §8.2.2).
 */
export const CONNECTION_SPECIFIC = new Set([
  "connection",
  "proxy-connection",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
]);

/** An HTTP/2 request, checked. */
export type H2RequestFields =
  | {
    ok: true;
    method: string;
    /** `:authority`, or Host when there is none. */
    authority: string;
    /** `:path`: path and query. */
    path: string;
    /** The regular fields; several `cookie` fields joined into one (§8.2.3). */
    headers: [string, string][];
    /** `content-length`, when sent. */
    length: number | null;
    /** The method is CONNECT (a tunnel request, which a bumped connection refuses). */
    connect: boolean;
  }
  | { ok: false; why: string };

/**
 * Checks a request's decoded fields. Malformed (RFC 9113 §8.1.1): an
 * unknown, repeated or late pseudo-field, a missing `:method`, `:scheme`
 * or `:path`, a scheme other than https, an upper-case or invalid name, a
 * control character or surrounding whitespace in a value, a
 * connection-specific field, `te` other than "trailers", a Host that
 * differs from `:authority`, and an invalid `content-length`.
 *
 * @example
 * ```ts
 * checkRequestFields([[":method", "GET"], [":scheme", "https"], [":authority", "x"], [":path", "/"]]);
 * // { ok: true, method: "GET", authority: "x", path: "/", headers: [], length: null, connect: false }
 * ```
 */
export function checkRequestFields(fields: [string, string][]): H2RequestFields {
  let method: string | undefined;
  let scheme: string | undefined;
  let authority: string | undefined;
  let path: string | undefined;
  let host: string | undefined;
  let length: number | null = null;
  const headers: [string, string][] = [];
  let cookies: string[] | null = null;
  let regular = false;
  for (const [name, value] of fields) {
    if (name.charCodeAt(0) === 58) {
      if (regular) return { ok: false, why: `pseudo-field ${name} after a regular field` };
      const seen = name === ":method"
        ? method
        : name === ":scheme"
        ? scheme
        : name === ":authority"
        ? authority
        : name === ":path"
        ? path
        : null;
      if (seen === null) return { ok: false, why: `unknown pseudo-field ${JSON.stringify(name)}` };
      if (seen !== undefined) return { ok: false, why: `repeated pseudo-field ${name}` };
      if (name === ":method") method = value;
      else if (name === ":scheme") scheme = value;
      else if (name === ":authority") authority = value;
      else path = value;
      continue;
    }
    regular = true;
    if (!LOWER_TOKEN.test(name)) {
      return { ok: false, why: `invalid field name ${JSON.stringify(name)}` };
    }
    if (!FIELD_VALUE.test(value) || /^[\t ]|[\t ]$/.test(value)) {
      return { ok: false, why: `invalid value in field ${name}` };
    }
    if (CONNECTION_SPECIFIC.has(name)) {
      return { ok: false, why: `connection-specific field ${name}` };
    }
    if (name === "te" && value !== "trailers") {
      return { ok: false, why: `te other than "trailers"` };
    }
    if (name === "host") {
      if (host !== undefined) return { ok: false, why: "repeated host field" };
      host = value;
      continue;
    }
    if (name === "content-length") {
      if (!LENGTH_VALUE.test(value) || (length !== null && Number(value) !== length)) {
        return { ok: false, why: `invalid content-length ${JSON.stringify(value)}` };
      }
      if (length !== null) continue;
      length = Number(value);
    }
    if (name === "cookie") {
      (cookies ??= []).push(value);
      continue;
    }
    headers.push([name, value]);
  }
  if (cookies) headers.push(["cookie", cookies.join("; ")]);
  if (method === undefined || !LOWER_TOKEN.test(method.toLowerCase())) {
    return { ok: false, why: "missing or invalid :method" };
  }
  const chosen = authority ?? host;
  if (chosen === undefined || !HOST.test(chosen)) {
    return { ok: false, why: "missing or invalid :authority" };
  }
  if (
    authority !== undefined && host !== undefined && host.toLowerCase() !== authority.toLowerCase()
  ) {
    return { ok: false, why: "the host field differs from :authority" };
  }
  if (method === "CONNECT") {
    return { ok: true, method, authority: chosen, path: "", headers, length, connect: true };
  }
  if (scheme !== "https") return { ok: false, why: `:scheme must be https (got: ${scheme})` };
  if (path === undefined || !PATH.test(path) || (path === "*" && method !== "OPTIONS")) {
    return { ok: false, why: "missing or invalid :path" };
  }
  return { ok: true, method, authority: chosen, path, headers, length, connect: false };
}

/**
 * Why a regular field is malformed in HTTP/2, or null (RFC 9113 §8.2):
 * an upper-case or invalid name, a control character or surrounding
 * whitespace in the value, a connection-specific field (`te` included:
 * outside a request's header section it is one too).
 *
 * @example
 * ```ts
 * fieldProblem("grpc-status", "0"); // null
 * fieldProblem("Grpc-Status", "0"); // 'invalid field name "Grpc-Status"'
 * ```
 */
export function fieldProblem(name: string, value: string): string | null {
  if (name.charCodeAt(0) === 58) return `pseudo-field ${JSON.stringify(name)} where none may be`;
  if (!LOWER_TOKEN.test(name)) return `invalid field name ${JSON.stringify(name)}`;
  if (!FIELD_VALUE.test(value) || /^[\t ]|[\t ]$/.test(value)) {
    return `invalid value in field ${name}`;
  }
  if (CONNECTION_SPECIFIC.has(name) || name === "te") return `connection-specific field ${name}`;
  return null;
}

/**
 * Checks a trailer section (a HEADERS block after the body), from a client or
 * from an origin: no pseudo-field, and every field well-formed
 * ({@linkcode fieldProblem}).
 *
 * @example
 * ```ts
 * checkTrailerFields([["grpc-status", "0"]]); // { ok: true, fields: [["grpc-status", "0"]] }
 * checkTrailerFields([[":status", "200"]]); // { ok: false, why: "pseudo-field \":status\" …" }
 * ```
 */
export function checkTrailerFields(
  fields: [string, string][],
): { ok: true; fields: [string, string][] } | { ok: false; why: string } {
  for (const [name, value] of fields) {
    const why = fieldProblem(name, value);
    if (why !== null) return { ok: false, why };
  }
  return { ok: true, fields };
}
