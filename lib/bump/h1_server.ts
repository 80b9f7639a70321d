/**
 * forgekit's own HTTP/1.1 server side, for bumped connections whose TLS was
 * terminated on the client's connection (`NodeConn.startTls`): reads each
 * request off the socket, hands it to a handler, writes the handler's
 * reply. Requests on a kept-alive connection, pipelined ones included, are
 * read and answered one at a time, in order; each one goes through the
 * handler on its own.
 *
 * Request heads are read strictly (`request_head.ts`): a message the filter
 * and the origin might split differently is never forwarded. Bodies are
 * streamed both ways. A `101` reply carrying a tunnel (a WebSocket upgrade
 * the origin accepted) turns the connection into a raw relay.
 *
 * @module
 */
import {
  chunkSize,
  errorResponse,
  fieldTokens,
  HEAD_TIMEOUT_MS,
  MAX_CHUNK_LINE,
  MAX_HEAD,
} from "./http_head.ts";
import { FIELD_VALUE, type ParsedHead, parseRequestHead, TOKEN } from "./request_head.ts";
import { copyToSocket, relay, type SocketIo } from "./socket_io.ts";
import { closeQuietly, concat } from "./conn_io.ts";
import {
  type BumpHandler,
  type BumpReply,
  RequestBodyError,
  type ServeOptions,
  STALL_TIMEOUT_MS,
} from "./exchange.ts";
import { latin1Decode, latin1Encode } from "./latin1.ts";

const enc = new TextEncoder();

/** Reads up to the blank line; the bytes after it are put back. */
async function readHead(io: SocketIo): Promise<string | "idle" | "partial" | "too-large"> {
  // Grown by doubling: a head sent a byte at a time costs no more to gather.
  let acc: Uint8Array = new Uint8Array(0);
  let size = 0;
  let scanned = 0;
  for (;;) {
    const chunk = await io.read();
    if (chunk === "expired") return size ? "partial" : "idle";
    if (chunk === null) return "idle";
    if (size === 0) acc = chunk; // most heads come in one read: no copy (never written to)
    else {
      if (size + chunk.byteLength > acc.byteLength) {
        const grown = new Uint8Array(Math.max(2 * size, size + chunk.byteLength, 4096));
        grown.set(acc.subarray(0, size));
        acc = grown;
      }
      acc.set(chunk, size);
    }
    size += chunk.byteLength;
    for (let i = Math.max(3, scanned); i < size; i++) {
      if (acc[i] === 10 && acc[i - 1] === 13 && acc[i - 2] === 10 && acc[i - 3] === 13) {
        // The limit holds however the head arrived (one read may bring more than it).
        if (i + 1 > MAX_HEAD) return "too-large";
        io.unread(acc.subarray(i + 1, size));
        return latin1Decode(acc, 0, i - 3);
      }
    }
    if (size > MAX_HEAD) return "too-large";
    scanned = size;
  }
}

/** What a request body is read from. */
type BodyInput = Pick<SocketIo, "read" | "unread">;

/** Reads one CRLF-terminated line (chunk sizes, trailers). */
async function readLine(
  io: BodyInput,
  limit = MAX_CHUNK_LINE,
  tooLong = "a chunk line is too long",
): Promise<string> {
  let acc: Uint8Array = new Uint8Array(0);
  for (;;) {
    const chunk = await io.read();
    if (chunk === null || chunk === "expired") {
      throw new RequestBodyError("the request body ended early");
    }
    const from = Math.max(1, acc.byteLength);
    acc = concat([acc, chunk]);
    for (let i = from; i < acc.byteLength; i++) {
      if (acc[i] === 10 && acc[i - 1] === 13) {
        // The same limit whether the line came in one read or in many.
        if (i - 1 > limit) throw new RequestBodyError(tooLong);
        io.unread(acc.subarray(i + 1));
        return latin1Decode(acc, 0, i - 1);
      }
    }
    if (acc.byteLength > limit) {
      throw new RequestBodyError(tooLong);
    }
  }
}

/** The request body as a stream; `state.done` once it was read whole. */
function requestBody(
  io: BodyInput,
  framing: number | "chunked",
  state: { done: boolean },
  beforeFirstRead: () => Promise<void>,
): ReadableStream<Uint8Array> {
  let remaining = framing === "chunked" ? 0 : framing;
  let started = false;
  let inChunk = false;
  const next = async (): Promise<Uint8Array | null> => {
    if (framing !== "chunked") {
      if (remaining === 0) return null;
      const got = await io.read(remaining);
      if (got === null || got === "expired") {
        throw new RequestBodyError("the request body ended early");
      }
      remaining -= got.byteLength;
      return got;
    }
    if (!inChunk) {
      const line = await readLine(io);
      const size = chunkSize(line);
      if (size === null) {
        throw new RequestBodyError(`invalid chunk size ${JSON.stringify(line.slice(0, 40))}`);
      }
      remaining = size;
      if (remaining === 0) {
        while ((await readLine(io)) !== ""); // trailers, dropped
        return null;
      }
      inChunk = true;
    }
    const got = await io.read(remaining);
    if (got === null || got === "expired") {
      throw new RequestBodyError("the request body ended early");
    }
    remaining -= got.byteLength;
    if (remaining === 0) {
      const notCrlf = "a chunk not followed by CRLF";
      if ((await readLine(io, 2, notCrlf)) !== "") throw new RequestBodyError(notCrlf);
      inChunk = false;
    }
    return got;
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!started) {
        started = true;
        await beforeFirstRead();
      }
      const chunk = await next();
      if (chunk === null) {
        state.done = true;
        controller.close();
      } else controller.enqueue(chunk);
    },
    // Nothing is read (and no 100 Continue sent) before the body is asked for.
  }, { highWaterMark: 0 });
}

/** Writes a final answer of the server's own and closes (the client's input is dropped). */
async function refuse(
  io: SocketIo,
  status: number,
  reason: string,
  body: string,
  proxyError?: string,
): Promise<void> {
  try {
    await io.write(errorResponse(status, reason, body, proxyError));
  } catch {
    // the client went away
  }
  io.end();
}

/** Serves requests on one connection until it ends; never throws. */
export async function serveH1(
  io: SocketIo,
  handler: BumpHandler,
  options: ServeOptions = {},
): Promise<void> {
  const timeout = options.headTimeoutMs ?? HEAD_TIMEOUT_MS;
  const stall = options.stallTimeoutMs ?? STALL_TIMEOUT_MS;
  const refused = (head: string | null, status: number, why: string) => {
    const [method = "?", target = ""] = (head ?? "").split("\r\n", 1)[0].split(" ");
    options.onRefused?.({
      method: TOKEN.test(method) ? method : "?",
      target: /^(\/|https:\/\/)[\x21-\x7e]*$/.test(target) ? target : null,
      status,
      why,
    });
  };
  // One timer per connection, not one per request: it ends a head read
  // that has taken longer than the limit, or a body read that waited
  // longer than the stall limit.
  let deadline: number | null = null;
  const watch = setInterval(() => {
    if (deadline !== null && performance.now() >= deadline) io.expire();
  }, Math.min(1000, timeout / 4, stall / 4));
  const body: BodyInput = {
    read: async (max) => {
      io.unexpire();
      deadline = performance.now() + stall;
      try {
        const got = await io.read(max);
        if (got === "expired") {
          throw new RequestBodyError(`no request body bytes for ${stall} ms`);
        }
        return got;
      } finally {
        deadline = null;
      }
    },
    unread: (bytes) => io.unread(bytes),
  };
  try {
    for (;;) {
      io.unexpire();
      deadline = performance.now() + timeout;
      const head = await readHead(io);
      deadline = null;
      if (head === "idle") return;
      if (head === "partial") {
        return await refuse(
          io,
          408,
          "Request Timeout",
          "Request timeout: incomplete request head\n",
        );
      }
      if (head === "too-large") {
        refused(null, 431, `request head larger than ${MAX_HEAD} bytes`);
        return await refuse(
          io,
          431,
          "Request Header Fields Too Large",
          `Request head larger than ${MAX_HEAD} bytes\n`,
        );
      }
      const req = parseRequestHead(head);
      if (!req.ok) {
        refused(head, 400, `bad request: ${req.why}`);
        return await refuse(io, 400, "Bad Request", `Bad request: ${req.why}\n`);
      }
      if (!await exchange(io, body, req, handler, refused)) return;
    }
  } catch {
    // the connection failed
  } finally {
    clearInterval(watch);
    io.end();
  }
}

/** One request and its reply; whether the connection may carry another. */
async function exchange(
  io: SocketIo,
  input: BodyInput,
  req: Extract<ParsedHead, { ok: true }>,
  handler: BumpHandler,
  refused: (head: string, status: number, why: string) => void,
): Promise<boolean> {
  const host = req.headers.find(([k]) => k === "host")?.[1] ?? "";
  if (req.target.startsWith("https://")) {
    const authority = req.target.slice(8).split(/[/?]/)[0].toLowerCase();
    if (host !== "" && host.toLowerCase() !== authority) {
      refused(
        `${req.method} ${req.target}\r\n`,
        400,
        "bad request: the Host field differs from the target",
      );
      await refuse(io, 400, "Bad Request", "Bad request: the Host field differs from the target\n");
      return false;
    }
  }
  // As on the HTTP/2 server: an origin spoken to over HTTP/2 would get a
  // malformed request (a CONNECT has no :scheme or :path, RFC 9113 §8.5).
  if (req.method === "CONNECT") {
    refused(
      `${req.method} ${req.target}\r\n`,
      405,
      "bad request: CONNECT inside a bumped connection",
    );
    await refuse(
      io,
      405,
      "Method Not Allowed",
      "CONNECT is not supported inside a bumped connection\n",
      "connect-refused",
    );
    return false;
  }
  const connection = fieldTokens(req.headers, "connection");
  let keepAlive = req.version === "1.1"
    ? !connection.includes("close")
    : connection.includes("keep-alive");
  const body = { done: req.body === 0 };
  const expectsContinue = req.version === "1.1" &&
    fieldTokens(req.headers, "expect").includes("100-continue");
  const upgrade = connection.includes("upgrade")
    ? req.headers.find(([k]) => k === "upgrade")?.[1] ?? null
    : null;

  let reply: BumpReply;
  try {
    reply = await handler.answer({
      method: req.method,
      url: req.target.startsWith("https://") ? req.target : `https://${host}${req.target}`,
      headers: req.headers,
      body: req.body === 0 ? null : requestBody(input, req.body, body, async () => {
        if (expectsContinue) await io.write(enc.encode("HTTP/1.1 100 Continue\r\n\r\n"));
      }),
      upgrade,
      // The client may close while its request is with the origin.
      signal: io.signal,
    });
  } catch (e) {
    await refuse(io, 502, "Bad Gateway", `Bad gateway: ${(e as Error).message}\n`);
    return false;
  }

  if (reply.status === 101 && reply.tunnel) {
    const { conn, buffered, ended } = reply.tunnel;
    let relayed = { out: 0, in: 0 };
    try {
      await writeHead(io, reply, `connection: upgrade\r\nupgrade: ${upgrade ?? "websocket"}\r\n`);
      relayed = await relay(io, conn, buffered);
    } finally {
      closeQuietly(conn);
      ended?.(relayed.out, relayed.in);
    }
    return false;
  }

  const bodiless = req.method === "HEAD" || reply.status < 200 || reply.status === 204 ||
    reply.status === 304;
  let framing = "";
  let chunked = false;
  if (!bodiless) {
    if (reply.sized) framing = `content-length: ${reply.sized.length}\r\n`;
    else if (reply.body instanceof Uint8Array) {
      framing = `content-length: ${reply.body.byteLength}\r\n`;
    } else if (reply.body === null) framing = "content-length: 0\r\n";
    else if (reply.length !== null) framing = `content-length: ${reply.length}\r\n`;
    else if (req.version === "1.1") {
      framing = "transfer-encoding: chunked\r\n";
      chunked = true;
    } else keepAlive = false; // delimited by closing
  }
  const headers = bodiless
    ? reply.headers
    : reply.headers.filter(([k]) => k !== "content-length" && k !== "transfer-encoding");
  // A request body left unread would be taken for the next request.
  if (!body.done) keepAlive = false;
  const head = latin1Encode(
    headText({ ...reply, headers }, framing + (keepAlive ? "" : "connection: close\r\n")),
  );
  const content = bodiless ? null : reply.body;
  if (reply.sized) {
    const { conn, length, buffered } = reply.sized;
    let delivered = 0;
    // A client gone while the origin is silent: the read waiting on it ends now.
    const giveUp = () => closeQuietly(conn);
    if (io.signal.aborted) giveUp();
    io.signal.addEventListener("abort", giveUp);
    try {
      if (bodiless) {
        // The body is not read: the connection cannot carry another response.
        closeQuietly(conn);
        await io.write(head);
      } else {
        await io.write(concat([head, buffered]));
        delivered = buffered.byteLength;
        const rest = length - delivered;
        const copied = await copyToSocket(
          conn,
          io,
          rest,
          (n) => delivered = buffered.byteLength + n,
        );
        if (copied !== rest) throw new Error("the body ended before its length");
      }
    } finally {
      io.signal.removeEventListener("abort", giveUp);
      // The connection is ended's now: pooled again if the body went whole.
      reply.sized.ended(bodiless ? length : delivered);
    }
  } else if (content === null || content instanceof Uint8Array) {
    await io.write(content === null ? head : concat([head, content]));
  } else {
    let sent = 0;
    // Read through a reader, which can be cancelled while a read waits: a
    // client gone (or that ended its input, as nginx takes it) while the
    // origin is silent ends it, and the origin connection is closed at once.
    const reader = content.getReader();
    const giveUp = () => reader.cancel().catch(() => {});
    if (io.signal.aborted) giveUp();
    io.signal.addEventListener("abort", giveUp);
    try {
      // Inside: a head that cannot be written cancels the body too.
      await io.write(head);
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        let chunk = r.value;
        if (chunk.byteLength === 0) continue;
        // A sized body ends at its length (the stream may be the origin connection itself).
        if (reply.length !== null && sent + chunk.byteLength > reply.length) {
          chunk = chunk.subarray(0, reply.length - sent);
        }
        sent += chunk.byteLength;
        if (!chunked) {
          await io.write(chunk);
          if (sent === reply.length) break;
          continue;
        }
        const size = enc.encode(`${chunk.byteLength.toString(16)}\r\n`);
        const framed = new Uint8Array(size.byteLength + chunk.byteLength + 2);
        framed.set(size);
        framed.set(chunk, size.byteLength);
        framed.set([13, 10], size.byteLength + chunk.byteLength);
        await io.write(framed);
      }
    } finally {
      io.signal.removeEventListener("abort", giveUp);
      reader.cancel().catch(() => {}); // no-op once the body has ended
    }
    if (chunked) await io.write(enc.encode("0\r\n\r\n"));
    else if (reply.length !== null && sent !== reply.length) {
      throw new Error("the body ended before its length");
    }
  }
  return keepAlive && body.done;
}

function headText(reply: Pick<BumpReply, "status" | "statusText" | "headers">, extra: string) {
  const reason = FIELD_VALUE.test(reply.statusText) ? reply.statusText : "";
  let head = `HTTP/1.1 ${reply.status} ${reason}\r\n`;
  for (const [k, v] of reply.headers) {
    if (TOKEN.test(k) && FIELD_VALUE.test(v)) head += `${k}: ${v}\r\n`;
  }
  return head + extra + "\r\n";
}

async function writeHead(io: SocketIo, reply: BumpReply, extra: string): Promise<void> {
  await io.write(latin1Encode(headText(reply, extra)));
}
