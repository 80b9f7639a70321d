/**
 * One exchange on a bumped connection, as both of forgekit's servers
 * (`h1_server.ts`, `h2_server.ts`) hand it to the interceptor: the request
 * read off the client's connection, and the reply to write back.
 *
 * @module
 */

/** A request as read off the connection (HTTP/1.1, or one HTTP/2 stream). */
export interface BumpRequest {
  method: string;
  /** The URL: the absolute-form target, or `https://` + Host + the origin-form target. */
  url: string;
  /** Fields with lower-case names, in order. */
  headers: [string, string][];
  body: ReadableStream<Uint8Array> | null;
  /** The protocol asked for in `Upgrade` (with `Connection: upgrade`), or null. */
  upgrade: string | null;
  /**
   * Aborted when the client gave up on the request: its connection closed,
   * or (HTTP/2) it reset the stream.
   */
  signal?: AbortSignal;
  /** The request came over HTTP/2. */
  http2?: boolean;
  /**
   * HTTP/2: the trailers that ended the request (checked, lower-case
   * names), known once its body has ended; null when it had none.
   */
  trailers?: () => [string, string][] | null;
}

/**
 * The client's request body broke its own framing: a malformed chunk, a
 * body that does not match its Content-Length, a connection that ended
 * inside it. The exchange fails as the client's fault (400), never as the
 * origin's (502); the origin saw the body cut short, never completed.
 */
export class RequestBodyError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "RequestBodyError";
  }
}

/** A reply to write. */
export interface BumpReply {
  status: number;
  statusText: string;
  /** End-to-end fields; the server sets the framing fields itself. */
  headers: [string, string][];
  body: Uint8Array | ReadableStream<Uint8Array> | null;
  /**
   * The body's length when known in advance. With a body given whole, null
   * means none is declared (HTTP/2 only; HTTP/1.1 declares its length).
   */
  length: number | null;
  /**
   * HTTP/2: trailers to send after the body, asked for once the body has
   * ended; null when there are none.
   */
  trailers?: () => [string, string][] | null;
  /**
   * With a 101: the connection to relay to, and bytes it already sent. The
   * server calls `ended` with the bytes relayed each way once the relay is
   * over (or never began).
   */
  tunnel?: {
    conn: Deno.Conn;
    buffered: Uint8Array;
    ended?: (out: number, inn: number) => void;
  };
  /**
   * Instead of `body`: `length` bytes, `buffered` first, then read off
   * `conn` (never past `length`). The server calls `ended` once, with the
   * bytes it delivered, when it is done, whole or not, and `conn` is
   * `ended`'s from then on: a connection whose body went whole can carry
   * the origin's next response (it goes back to the pool). The server
   * closes `conn` itself only to stop a read when its client is gone.
   */
  sized?: {
    conn: Deno.Conn;
    length: number;
    buffered: Uint8Array;
    ended: (delivered: number) => void;
  };
}

/**
 * Answers a connection's requests, one `answer` call each. A failure
 * becomes a 502 (HTTP/1.1 then closes the connection; HTTP/2 answers on
 * that stream only).
 *
 * A method, not a closure made for each connection: V8's optimized code for
 * the servers' request loops is specialized on the function they call. A
 * closure belongs to one connection, so that code would be thrown away when
 * the connection ends, and the next connections would run slowly until it
 * was made again. A class's method is the same function for every connection.
 */
export interface BumpHandler {
  answer(req: BumpRequest): Promise<BumpReply>;
}

/**
 * A request a server refused on its own, before any handler saw it (a
 * malformed or oversized head, a CONNECT inside the connection): for the
 * access log. `method` and `target` are what could be read, else "?" and null.
 */
export interface Refusal {
  method: string;
  /** The request target as sent (origin or absolute form), when printable. */
  target: string | null;
  status: number;
  /** Why, e.g. `bad request: two Content-Length fields`. */
  why: string;
}

/**
 * How long a request in flight may make no progress on the client's side:
 * no request body byte comes, or the client takes no response byte (it
 * does not read, or, over HTTP/2, opens no window). Past it the request is
 * given up and its origin connection closed; otherwise a client could hold
 * origin connections for ever. As nginx's `client_body_timeout` and
 * `send_timeout` (60 s each).
 */
export const STALL_TIMEOUT_MS = 60_000;

/** Options both servers take. */
export interface ServeOptions {
  /** How long a request head may take. */
  headTimeoutMs?: number;
  /** How long a request may make no progress on the client's side ({@linkcode STALL_TIMEOUT_MS}). */
  stallTimeoutMs?: number;
  /** Told of each request the server refused on its own. */
  onRefused?: (refusal: Refusal) => void;
}

/**
 * A reply of forgekit's own (a refusal, an error): text, with
 * `X-Proxy-Error` when a reason is given. `statusText` is for HTTP/1.1.
 */
export function ownReply(
  status: number,
  statusText: string,
  text: string,
  proxyError?: string,
): BumpReply {
  const body = new TextEncoder().encode(text);
  const headers: [string, string][] = [["content-type", "text/plain; charset=utf-8"]];
  if (proxyError) headers.unshift(["x-proxy-error", proxyError]);
  return { status, statusText, headers, body, length: body.byteLength };
}
