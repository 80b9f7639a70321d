/**
 * Reading an HTTP/1.1 request head for the bumped-connection server
 * (`h1_server.ts`). Pure: text in, a parsed head or the reason it is
 * refused out.
 *
 * @module
 */
import { requestFramingError } from "./http_head.ts";

/** A field name (RFC 9110 §5.1). */
export const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** A field value or reason phrase: no CR, LF, NUL or other control but HT. */
export const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A Host value: a name or an IP literal, with an optional port (RFC 9110 §7.2). */
export const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::\d{1,5})?$/;
/** Request targets: origin-form, or absolute-form with the scheme served. */
const TARGETS = {
  https: /^(?:\/[\x21-\x7e]*|https:\/\/[\x21-\x7e]+)$/,
  http: /^(?:\/[\x21-\x7e]*|http:\/\/[\x21-\x7e]+)$/,
};

/** A request head, parsed. */
export type ParsedHead =
  | {
    ok: true;
    method: string;
    target: string;
    version: "1.0" | "1.1";
    headers: [string, string][];
    /** How the body is delimited: its length, or "chunked". */
    body: number | "chunked";
  }
  | { ok: false; why: string };

/**
 * Parses a request head (the text up to the blank line, a byte string).
 * Refuses, with the reason: a malformed request line, a target other than
 * origin-form or an absolute-form of `scheme` (no fragment), malformed or folded fields,
 * control characters in values, unsafe body framing, and a missing or
 * repeated Host on HTTP/1.1.
 *
 * @example
 * ```ts
 * parseRequestHead("GET /a?b HTTP/1.1\r\nHost: x"); // { ok: true, method: "GET", … }
 * parseRequestHead("GET /a HTTP/1.1"); // { ok: false, why: "…Host…" }
 * ```
 */
export function parseRequestHead(text: string, scheme: "https" | "http" = "https"): ParsedHead {
  const lines = text.replace(/^(?:\r\n)+/, "").split("\r\n");
  const m = /^([^ ]+) ([^ ]+) HTTP\/1\.([01])$/.exec(lines[0]);
  if (!m || !TOKEN.test(m[1])) {
    return { ok: false, why: `malformed request line ${JSON.stringify(lines[0].slice(0, 80))}` };
  }
  const [, method, target, minor] = m;
  if (!TARGETS[scheme].test(target) || target.includes("#")) {
    return { ok: false, why: `unsupported request target ${JSON.stringify(target.slice(0, 80))}` };
  }
  const fields = lines.slice(1);
  const headers: [string, string][] = [];
  let framed = false;
  for (const line of fields) {
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon) : "";
    if (!TOKEN.test(name)) {
      // The framing check names what is wrong with a line that has no proper name.
      const framing = requestFramingError(fields);
      if (framing !== null) return { ok: false, why: `unsafe body framing: ${framing}` };
      return { ok: false, why: `malformed field name ${JSON.stringify(name)}` };
    }
    const raw = line.slice(colon + 1);
    if (!FIELD_VALUE.test(raw)) {
      return { ok: false, why: `a control character in the ${name} field` };
    }
    const key = name.toLowerCase();
    if (key === "content-length" || key === "transfer-encoding") framed = true;
    headers.push([key, raw.replace(/^[ \t]+|[ \t]+$/g, "")]);
  }
  if (framed) {
    const framing = requestFramingError(fields);
    if (framing !== null) return { ok: false, why: `unsafe body framing: ${framing}` };
  }
  const hosts = headers.filter(([k]) => k === "host");
  if (hosts.length > 1) return { ok: false, why: "more than one Host field" };
  if (minor === "1" && hosts.length === 0) return { ok: false, why: "no Host field" };
  if (hosts.length && !HOST.test(hosts[0][1])) {
    return { ok: false, why: `invalid Host ${JSON.stringify(hosts[0][1].slice(0, 80))}` };
  }
  const te = headers.some(([k]) => k === "transfer-encoding");
  const length = headers.find(([k]) => k === "content-length")?.[1].split(",")[0].trim();
  return {
    ok: true,
    method,
    target,
    version: minor === "1" ? "1.1" : "1.0",
    headers,
    body: te ? "chunked" : length === undefined ? 0 : Number(length),
  };
}
