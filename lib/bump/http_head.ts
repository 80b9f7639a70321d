/** Reading an HTTP/1.x message head off a connection. */
import { type ByteConn, readBefore } from "./conn_io.ts";
import { latin1Decode } from "./latin1.ts";

/** The largest head accepted. */
export const MAX_HEAD = 64 * 1024;

/** A head longer than {@linkcode MAX_HEAD} bytes. */
export class HeadTooLargeError extends Error {
  constructor() {
    super(`the message head exceeds ${MAX_HEAD} bytes`);
    this.name = "HeadTooLargeError";
  }
}

/** How long a whole head may take to arrive, by default. */
export const HEAD_TIMEOUT_MS = 30_000;

/** A head that did not arrive whole in time (`received`: the bytes that did). */
export class HeadTimeoutError extends Error {
  constructor(readonly ms: number, readonly received: number) {
    super(`no complete message head within ${ms / 1000} s`);
    this.name = "HeadTimeoutError";
  }
}

/**
 * Reads up to the blank line that ends an HTTP head. Returns the head text
 * (a byte string, without the blank line) and any bytes read after it, or null when the
 * connection ended first; throws {@linkcode HeadTooLargeError} past
 * {@linkcode MAX_HEAD} bytes and {@linkcode HeadTimeoutError} when the
 * head is not complete within `timeoutMs` (the connection stays open, for
 * an answer).
 */
export async function readHttpHead(
  conn: ByteConn,
  timeoutMs: number = HEAD_TIMEOUT_MS,
): Promise<{ head: string; rest: Uint8Array } | null> {
  // Grown by doubling: a head sent in tiny pieces costs no more to gather.
  let buf = new Uint8Array(4096);
  let size = 0;
  const chunk = new Uint8Array(16384);
  let scanned = 0;
  const deadline = performance.now() + timeoutMs;
  while (size < MAX_HEAD) {
    const n = await readBefore(conn, chunk, deadline);
    if (n === "expired") throw new HeadTimeoutError(timeoutMs, size);
    if (n === null) return null;
    if (size + n > buf.length) {
      const grown = new Uint8Array(Math.max(2 * buf.length, size + n));
      grown.set(buf.subarray(0, size));
      buf = grown;
    }
    buf.set(chunk.subarray(0, n), size);
    size += n;
    for (let i = Math.max(3, scanned); i < size; i++) {
      if (buf[i - 3] === 13 && buf[i - 2] === 10 && buf[i - 1] === 13 && buf[i] === 10) {
        // The limit holds however the head arrived (one read may bring more than it).
        if (i + 1 > MAX_HEAD) throw new HeadTooLargeError();
        return {
          head: latin1Decode(buf, 0, i - 3),
          rest: buf.slice(i + 1, size),
        };
      }
    }
    scanned = size;
  }
  throw new HeadTooLargeError();
}

/** Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1). */
export const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/** The longest chunk-size or trailer line read in a chunked body. */
export const MAX_CHUNK_LINE = 4096;

/** A well-formed Content-Length value (at most 15 digits: a safe integer). */
export const LENGTH_VALUE = /^\d{1,15}$/;

/**
 * The transfer codings (lower-case, in order) and the Content-Length values
 * of a head's fields, list values split; `headers` names are lower-case.
 */
export function framingFields(headers: [string, string][]): {
  codings: string[];
  lengths: string[];
} {
  const codings: string[] = [];
  const lengths: string[] = [];
  for (const [k, v] of headers) {
    if (k === "transfer-encoding") {
      codings.push(...v.split(",").map((c) => c.trim().toLowerCase()).filter(Boolean));
    } else if (k === "content-length") lengths.push(...v.split(",").map((l) => l.trim()));
  }
  return { codings, lengths };
}

/**
 * Why a request head's body framing is unsafe to forward (RFC 9112 §6.3),
 * or null when it is fine: a Transfer-Encoding together with a
 * Content-Length, a Transfer-Encoding other than a final `chunked`, or a
 * Content-Length that is not one decimal number. Ambiguous framing is how
 * requests are smuggled past a filter that reads a message differently
 * from the server behind it.
 *
 * @example
 * ```ts
 * requestFramingError(["Host: a", "Content-Length: 5"]); // null
 * requestFramingError(["Content-Length: 5", "Transfer-Encoding: chunked"]); // "…"
 * ```
 */
export function requestFramingError(headerLines: string[]): string | null {
  const headers: [string, string][] = [];
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    if (colon <= 0) return `a header line without a name: ${JSON.stringify(line.slice(0, 40))}`;
    const name = line.slice(0, colon);
    if (/\s/.test(name)) return `whitespace in the header name ${JSON.stringify(name)}`;
    headers.push([name.toLowerCase(), line.slice(colon + 1).trim()]);
  }
  const { codings, lengths } = framingFields(headers);
  const coded = headers.some(([k]) => k === "transfer-encoding"); // even an empty one
  if (coded && lengths.length) return "both Transfer-Encoding and Content-Length";
  if (coded && codings.at(-1) !== "chunked") {
    return `Transfer-Encoding ${codings.join(", ")} does not end in chunked`;
  }
  if (lengths.some((v) => !LENGTH_VALUE.test(v))) return `Content-Length ${lengths.join(", ")}`;
  if (new Set(lengths).size > 1) return `conflicting Content-Length values ${lengths.join(", ")}`;
  return null;
}

/**
 * The comma-separated tokens of a list field (`Connection`, `Expect`),
 * lower-case, over every line of it; `headers` names are lower-case.
 */
export function fieldTokens(headers: [string, string][], name: string): string[] {
  const out: string[] = [];
  for (const [k, v] of headers) {
    if (k === name) { for (const t of v.toLowerCase().split(",")) out.push(t.trim()); }
  }
  return out;
}

/** The size in a chunk-size line (extensions ignored), or null when it is malformed. */
export function chunkSize(line: string): number | null {
  const m = /^([0-9a-fA-F]{1,12})[ \t]*(?:;.*)?$/.exec(line);
  return m ? parseInt(m[1], 16) : null;
}

const enc = new TextEncoder();

/**
 * A complete plain-text answer of the proxy's own that closes the
 * connection, with `X-Proxy-Error` when given.
 */
export function errorResponse(
  status: number,
  reason: string,
  body: string,
  proxyError?: string,
): Uint8Array {
  const bytes = enc.encode(body);
  const tag = proxyError ? `X-Proxy-Error: ${proxyError}\r\n` : "";
  const head = enc.encode(
    `HTTP/1.1 ${status} ${reason}\r\n${tag}Content-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${bytes.length}\r\nConnection: close\r\n\r\n`,
  );
  const out = new Uint8Array(head.length + bytes.length);
  out.set(head);
  out.set(bytes, head.length);
  return out;
}
