/**
 * The bodies log (`--log-bodies`, with `--ssl-bump`): what each inspected
 * exchange carried, headers and the first {@linkcode BODY_LOG_LIMIT} bytes
 * of each body, one JSON line per exchange in `bodies.jsonl` beside the
 * access log. Off by default: bodies hold whatever a workload sends and
 * gets. Credentials are masked as in the access log (best effort for
 * bodies: secret-named JSON fields and form fields, GitHub tokens, JWTs).
 *
 * Bodies are captured as they stream past, never held back: a capture
 * keeps copies of the first bytes only, and all captures in flight share
 * one budget ({@linkcode BODY_LOG_BUDGET}), so the log costs bounded memory
 * whatever the traffic.
 *
 * @module
 */
import { printableJson } from "../cli/output.ts";
import { isSecretParam, MASK, maskQuery, maskTokens, maskUrlSecrets } from "../cli/url_secrets.ts";
import { LineFile } from "./line_file.ts";
import type { BumpReply } from "./exchange.ts";
import { Buffer } from "node:buffer";

/** The most bytes of one body the log keeps. */
export const BODY_LOG_LIMIT = 64 * 1024;
/** The most body bytes all captures in flight hold at once. */
export const BODY_LOG_BUDGET = 64 * 1024 * 1024;

/** Body bytes held by captures in flight, against a limit. */
export class CaptureBudget {
  #left: number;
  constructor(bytes = BODY_LOG_BUDGET) {
    this.#left = bytes;
  }
  /** Takes `n` bytes of the budget: false (nothing taken) when they are not left. */
  take(n: number): boolean {
    if (n > this.#left) return false;
    this.#left -= n;
    return true;
  }
  give(n: number): void {
    this.#left += n;
  }
}

/** One body's first bytes, copied as they pass. */
export class BodyCapture {
  /** Every byte that passed, kept or not. */
  bytes = 0;
  #parts: Uint8Array[] = [];
  #kept = 0;
  #cut = false;
  #budget: CaptureBudget;
  #limit: number;
  #passed = Promise.withResolvers<void>();

  constructor(budget: CaptureBudget, limit = BODY_LOG_LIMIT) {
    this.#budget = budget;
    this.#limit = limit;
  }

  /**
   * Settled once no more of the body will pass: a tapped stream that ended,
   * failed or was cancelled, or a body captured whole ({@linkcode tapResponse}).
   */
  get passed(): Promise<void> {
    return this.#passed.promise;
  }

  /** Says that no more of the body will pass. */
  end(): void {
    this.#passed.resolve();
  }

  add(chunk: Uint8Array): void {
    this.bytes += chunk.byteLength;
    if (this.#cut) return;
    const room = Math.min(this.#limit - this.#kept, chunk.byteLength);
    if (room < chunk.byteLength) this.#cut = true;
    if (room === 0) return;
    if (!this.#budget.take(room)) {
      this.#cut = true;
      return;
    }
    this.#parts.push(chunk.slice(0, room));
    this.#kept += room;
  }

  /**
   * The kept bytes (their budget is given back), and whether bytes were left
   * out. Called once, when the exchange is over.
   */
  take(): { data: Uint8Array; truncated: boolean } {
    const data = new Uint8Array(this.#kept);
    let at = 0;
    for (const p of this.#parts) {
      data.set(p, at);
      at += p.byteLength;
    }
    this.#budget.give(this.#kept);
    this.#parts = [];
    this.#kept = 0;
    const truncated = this.#cut;
    // Bytes passing later (a body still flowing after a failure) are only counted.
    this.#cut = true;
    return { data, truncated };
  }
}

/** The stream, with what passes through it copied into `capture`. */
export function tapStream(
  stream: ReadableStream<Uint8Array>,
  capture: BodyCapture,
): ReadableStream<Uint8Array> {
  // Read only as the tapped stream is (not piped, which reads a chunk
  // ahead: a client's body would be asked for, and its 100 Continue sent,
  // before the origin wants it). Errors and cancellation pass as they are.
  const reader = stream.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch (e) {
        capture.end();
        throw e;
      }
      if (r.done) {
        capture.end();
        return controller.close();
      }
      capture.add(r.value);
      controller.enqueue(r.value);
    },
    cancel: (reason) => {
      capture.end();
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}

/** The connection, with what is read from it copied into `capture`. */
export function tapConn(conn: Deno.Conn, capture: BodyCapture): Deno.Conn {
  const read = async (p: Uint8Array) => {
    const n = await conn.read(p);
    if (n !== null) capture.add(p.subarray(0, n));
    return n;
  };
  return new Proxy(conn, {
    get(target, key) {
      if (key === "read") return read;
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/**
 * Taps a response's body, whichever way it comes: whole, as a stream, or
 * sized (its first bytes, then read off the origin connection). The
 * capture has passed at once unless the body is a stream: a sized body is
 * read off the connection before the response's end is told, but a stream
 * is read by the client's side after the origin's side has ended (the
 * origin stream reads ahead of it), so its last bytes pass later.
 */
export function tapResponse(
  response: { body: Uint8Array | ReadableStream<Uint8Array> | null; sized?: BumpReply["sized"] },
  capture: BodyCapture,
): BodyCapture {
  if (response.body instanceof Uint8Array) capture.add(response.body);
  else if (response.body) response.body = tapStream(response.body, capture);
  if (response.sized) {
    capture.add(response.sized.buffered);
    response.sized = { ...response.sized, conn: tapConn(response.sized.conn, capture) };
  }
  if (!(response.body instanceof ReadableStream)) capture.end();
  return capture;
}

/** Header fields whose values are credentials whatever their names say. */
const SECRET_HEADERS = new Set(["cookie", "set-cookie", "proxy-authorization"]);

/**
 * Header fields with credentials masked: `authorization` keeps its scheme
 * (`Bearer ****`), cookies their names (`session=****`), any field whose
 * name reads as a secret (`x-api-key`, `private-token`) becomes `****`.
 */
export function maskHeaders(headers: [string, string][]): [string, string][] {
  return headers.map(([name, value]) => {
    const n = name.toLowerCase();
    if (n === "authorization" || n === "proxy-authorization") {
      const scheme = /^\S+\s/.exec(value)?.[0] ?? "";
      return [name, `${scheme}${MASK}`];
    }
    if (n === "cookie") {
      return [name, value.split(";").map((c) => maskPair(c.trim())).join("; ")];
    }
    if (n === "set-cookie") {
      const semi = value.indexOf(";");
      return [
        name,
        semi === -1 ? maskPair(value) : `${maskPair(value.slice(0, semi))}${value.slice(semi)}`,
      ];
    }
    // `…-key` fields are keys (`x-functions-key`, `ocp-apim-subscription-key`);
    // a WebSocket handshake's nonce is not.
    const key = n.endsWith("-key") && n !== "sec-websocket-key";
    if (SECRET_HEADERS.has(n) || isSecretParam(n) || key) return [name, MASK];
    // A URL in a field (`location` to a presigned download, `referer` with
    // an OAuth code) is masked as the access log's URLs are.
    return [name, maskUrlSecrets(value)];
  });
}

/** `name=value` as `name=****`. */
function maskPair(pair: string): string {
  const eq = pair.indexOf("=");
  return eq === -1 ? pair : `${pair.slice(0, eq + 1)}${MASK}`;
}

/**
 * A text body with its credentials masked, as far as they can be told:
 * string fields of JSON whose names read as secrets (`"password": "****"`,
 * even in a body cut short), the fields of a form body
 * (`application/x-www-form-urlencoded`) likewise, and GitHub tokens and
 * JWTs anywhere.
 */
export function maskBodyText(text: string, contentType: string): string {
  let out = maskTokens(text);
  const type = contentType.trim();
  if (/^application\/x-www-form-urlencoded\b/i.test(type)) out = maskQuery(out);
  const boundary = /^multipart\/form-data\b.*;\s*boundary="?([^";]+)"?/i.exec(type)?.[1];
  if (boundary) out = maskMultipart(out, boundary);
  return maskJsonFields(out);
}

/**
 * The values of multipart form fields whose names read as secrets
 * (`curl -F password=…`), masked; one pass, split at the boundary.
 */
function maskMultipart(text: string, boundary: string): string {
  const delimiter = `--${boundary}`;
  return text.split(delimiter).map((part, i) => {
    const headEnd = part.indexOf("\r\n\r\n");
    if (i === 0 || headEnd === -1) return part;
    const name = /\bname="([^"]*)"/i.exec(part.slice(0, headEnd))?.[1];
    if (name === undefined || !isSecretParam(name)) return part;
    // The value runs to the line break before the next delimiter, or to the end of what was kept.
    const valueEnd = part.endsWith("\r\n") ? part.length - 2 : part.length;
    return `${part.slice(0, headEnd + 4)}${MASK}${part.slice(valueEnd)}`;
  }).join(delimiter);
}

/** What may come between a JSON field's name and its string value. */
const JSON_COLON = /\s*:\s*"/y;

/**
 * JSON string fields whose names read as secrets, masked (escapes kept as
 * written). One pass over the strings, each read once from its opening
 * quote: a regular expression restarting at every quote inside a long
 * string of escaped quotes (JSON inside JSON, or a hostile origin's body)
 * takes quadratic time, and this runs on the event loop for every logged
 * body. A value cut short by the end of the kept bytes is masked too.
 */
function maskJsonFields(text: string): string {
  let out = "";
  let copied = 0;
  for (let at = text.indexOf('"'); at !== -1;) {
    const nameEnd = stringEnd(text, at);
    if (nameEnd === -1) break;
    JSON_COLON.lastIndex = nameEnd + 1;
    if (!JSON_COLON.test(text)) {
      at = text.indexOf('"', nameEnd + 1);
      continue;
    }
    const valueStart = JSON_COLON.lastIndex - 1;
    const valueEnd = stringEnd(text, valueStart);
    if (isSecretParam(text.slice(at + 1, nameEnd))) {
      out += `${text.slice(copied, valueStart + 1)}${MASK}`;
      copied = valueEnd === -1 ? text.length : valueEnd;
    }
    at = valueEnd === -1 ? -1 : text.indexOf('"', valueEnd + 1);
  }
  return copied === 0 ? text : out + text.slice(copied);
}

/** The index of the quote that ends the JSON string opening at `start`, or -1. */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++; // a backslash: the next character is escaped
    else if (c === 0x22) return i;
  }
  return -1;
}

/** A body as logged. */
export interface LoggedBody {
  headers: [string, string][];
  /** The kept bytes: text (credentials masked), or base64 when they are not UTF-8 text. */
  body: string;
  body_encoding: "utf-8" | "base64";
  /** All the body's bytes that passed, kept or not. */
  body_bytes: number;
  /** Bytes were left out ({@linkcode BODY_LOG_LIMIT}, or the budget). */
  body_truncated: boolean;
  /**
   * The trailer fields that ended the body (HTTP/2: gRPC's status), masked
   * as headers; absent when none came.
   */
  trailers?: [string, string][];
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** UTF-8 text, allowing a character cut short at the end of a truncated body. */
function asText(data: Uint8Array, truncated: boolean): string | null {
  for (let cut = 0; cut <= (truncated ? 3 : 0) && cut <= data.byteLength; cut++) {
    try {
      return utf8.decode(data.subarray(0, data.byteLength - cut));
    } catch {
      // not text (yet)
    }
  }
  return null;
}

/**
 * How a body is logged: as masked text when it is UTF-8 and not
 * content-encoded (gzip and the like are logged as they went, base64),
 * with the trailers that ended it, if any.
 */
export function loggedBody(
  headers: [string, string][],
  capture: BodyCapture,
  trailers: [string, string][] | null = null,
): LoggedBody {
  const field = (name: string) => headers.find(([k]) => k.toLowerCase() === name)?.[1] ?? "";
  const { data, truncated } = capture.take();
  const coding = field("content-encoding").trim().toLowerCase();
  const text = coding === "" || coding === "identity" ? asText(data, truncated) : null;
  return {
    headers: maskHeaders(headers),
    body: text === null
      ? Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64")
      : maskBodyText(text, field("content-type")),
    body_encoding: text === null ? "base64" : "utf-8",
    body_bytes: capture.bytes,
    body_truncated: truncated,
    ...(trailers?.length ? { trailers: maskHeaders(trailers) } : {}),
  };
}

/** One line of the bodies log. */
export interface BodyLogRecord {
  time: string;
  method: string;
  url: string;
  /** The response's status, or forgekit's own (a 502 when the origin failed). */
  status: number | null;
  request: LoggedBody;
  /** Null when no response came from the origin. */
  response: LoggedBody | null;
  /**
   * As in the access log, when the exchange did not go through whole: the
   * client cancelled, its body broke its framing, the origin failed, or the
   * response did not reach the client whole.
   */
  reason?: string;
}

function bodyLine(r: BodyLogRecord): string {
  return printableJson(JSON.stringify({ ...r, url: maskUrlSecrets(r.url) }));
}

/** `bodies.jsonl`: one line per inspected exchange, written in batches. */
export class BodyLog {
  readonly budget = new CaptureBudget();
  #file: LineFile<BodyLogRecord>;

  constructor(path: string) {
    this.#file = new LineFile(path, bodyLine);
  }

  get path(): string {
    return this.#file.path;
  }

  /** A new capture for one body, sharing this log's budget. */
  capture(): BodyCapture {
    return new BodyCapture(this.budget);
  }

  write(record: BodyLogRecord): void {
    this.#file.push(record);
  }

  close(): void {
    this.#file.close();
  }
}
