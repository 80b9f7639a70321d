/**
 * TLS termination and per-request policy for `--ssl-bump`.
 *
 * Two routes, one policy. Clients that offer only HTTP/1.1 in ALPN (or no
 * ALPN) get TLS on the accepted connection itself (`NodeConn.startTls`)
 * and their requests read by forgekit's own HTTP/1.1 server
 * (`h1_server.ts`): no extra hop. Clients that offer h2 are served by an
 * internal TLS listener per bumped host on 127.0.0.1 (Deno.serve: ALPN h2
 * and http/1.1, each HTTP/2 stream handed over on its own):
 * {@linkcode Interceptor.intercept} connects to it, replays the ClientHello
 * the proxy already read, and splices. That listener serves only
 * connections `intercept()` made: their local ports are registered, and a
 * request from any other peer is refused before anything is forwarded.
 * A connection that is not a `NodeConn` (a `Deno.Conn`) always takes the
 * second route.
 *
 * Either way each request gets the same treatment: the Host (or
 * :authority) must be the CONNECT host, the URL must pass the patterns,
 * and allowed requests go to the origin through the pooled
 * {@linkcode OriginClient}.
 *
 * @module
 */
import { LeafCache } from "./leaf_cache.ts";
import type { Leaf } from "./ca.ts";
import { decideUrl, type UrlPattern } from "./url_pattern.ts";
import { type ByteConn, closeQuietly, pump, writeAll } from "./conn_io.ts";
import type { AccessLogEntry } from "./access_log.ts";
import { HOP_BY_HOP, type OriginClient, type OriginResponse } from "./origin_client.ts";
import { parseClientHello } from "./client_hello.ts";
import { NodeConn } from "./node_conn.ts";
import { SocketIo } from "./socket_io.ts";
import { type H1Reply, type H1Request, serveH1 } from "./h1_server.ts";
import tls from "node:tls";

/** One access-log line: the firewall's entry. */
export type BumpLogEntry = AccessLogEntry;

/** Options of {@linkcode Interceptor}. */
export interface InterceptorOptions {
  patterns: UrlPattern[];
  /** Signs (or returns the cached) leaf for a host. */
  leafFor: (host: string) => Promise<Leaf>;
  /** Upstream requests: pooled HTTP/1.1 connections to origins. */
  origins: OriginClient;
  /** The client for upstream WebSocket handshakes (trust and proxy). */
  client: Deno.HttpClient;
  log: (entry: BumpLogEntry) => void;
  debug: (line: string) => void;
  /** The most internal listeners kept (one per host). */
  capacity?: number;
  /** How long a request head may take on an adopted connection. */
  headTimeoutMs?: number;
}

interface ConnContext {
  host: string;
  port: number;
}

/** The request's end-to-end headers (names lower-case), as pairs for the origin. */
function forwardHeaders(headers: Iterable<[string, string]>): [string, string][] {
  const all = [...headers];
  const listed = all.filter(([k]) => k === "connection").flatMap(([, v]) =>
    v.toLowerCase().split(",").map((s) => s.trim())
  );
  return all.filter(([k]) => k !== "host" && !HOP_BY_HOP.has(k) && !listed.includes(k));
}

/** Where a request goes once the policy allowed it. */
interface Allowed {
  /** Path and query to send (the normalised path). */
  target: string;
  /** The URL as the client sent it, for logs. */
  sentUrl: string;
  rule: string;
  pattern?: string;
  /** A log entry for this request, with the given outcome. */
  entry(status: number | null, extra?: Partial<BumpLogEntry>): BumpLogEntry;
}

const enc = new TextEncoder();

/** A reply of forgekit's own (403, 502): text, with X-Proxy-Error. */
function ownReply(status: number, statusText: string, reason: string, text: string): H1Reply {
  const body = enc.encode(text);
  return {
    status,
    statusText,
    headers: [["x-proxy-error", reason], ["content-type", "text/plain; charset=utf-8"]],
    body,
    length: body.byteLength,
  };
}

/** A reply as a fetch Response (for the Deno.serve route). */
function toResponse(reply: H1Reply): Response {
  const body = reply.body as BodyInit | null;
  // A reason phrase Response rejects is dropped.
  try {
    return new Response(body, {
      status: reply.status,
      statusText: reply.statusText,
      headers: reply.headers,
    });
  } catch {
    return new Response(body, { status: reply.status, headers: reply.headers });
  }
}

/** Splits Deno's request URL into the authority and the raw path and query the client sent. */
export function splitRawUrl(url: string): { authority: string; path: string; query: string } {
  const rest = url.slice(url.indexOf("://") + 3);
  const slash = rest.search(/[/?]/);
  const authority = slash === -1 ? rest : rest.slice(0, slash);
  let target = slash === -1 ? "/" : rest.slice(slash);
  if (target.startsWith("?")) target = "/" + target;
  const q = target.indexOf("?");
  return {
    authority: authority.toLowerCase(),
    path: q === -1 ? target : target.slice(0, q),
    query: q === -1 ? "" : target.slice(q + 1),
  };
}

/** The authority a request for `host:port` must carry (the port only when not 443). */
export function expectedAuthority(host: string, port: number): string[] {
  const h = host.toLowerCase();
  return port === 443 ? [h, `${h}:443`] : [`${h}:${port}`];
}

interface Listener {
  port: number;
  server: Deno.HttpServer;
}

/**
 * Terminates TLS for bumped connections and applies the URL policy to every
 * request.
 */
export class Interceptor {
  #opts: InterceptorOptions;
  #conns = new Map<number, ConnContext>();
  #listeners: LeafCache<Listener>;
  #contexts: LeafCache<tls.SecureContext>;
  #sockets = new Set<tls.TLSSocket>();
  #closed = false;

  constructor(options: InterceptorOptions) {
    this.#opts = options;
    this.#listeners = new LeafCache<Listener>({
      capacity: options.capacity ?? 256,
      onEvict: (l) => {
        l.server.shutdown().catch(() => {});
      },
    });
    this.#contexts = new LeafCache<tls.SecureContext>({ capacity: options.capacity ?? 256 });
  }

  /** Takes over a client connection whose ClientHello (for `host`) was already read. */
  async intercept(
    client: ByteConn,
    host: string,
    port: number,
    clientHello: Uint8Array,
  ): Promise<void> {
    if (this.#closed) return closeQuietly(client);
    const ctx = { host: host.toLowerCase(), port };
    this.#opts.origins.warm(ctx.host, port);
    const hello = parseClientHello(clientHello);
    const offersH2 = hello.status === "ok" && hello.alpn.includes("h2");
    if (client instanceof NodeConn && !offersH2) {
      this.#opts.debug(`ssl-bump: ${ctx.host}:${port}: TLS on the client connection (HTTP/1.1)`);
      return await this.#adopted(client, ctx, clientHello);
    }
    this.#opts.debug(`ssl-bump: ${ctx.host}:${port}: TLS on the internal listener (HTTP/2, 1.1)`);
    return await this.#spliced(client, ctx, clientHello);
  }

  /** Closes every internal listener and adopted connection. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#listeners.clear();
    this.#contexts.clear();
    for (const socket of this.#sockets) socket.destroy();
    await Promise.resolve();
  }

  /** The HTTP/1.1 route: TLS on the client connection itself, forgekit's server. */
  async #adopted(client: NodeConn, ctx: ConnContext, clientHello: Uint8Array): Promise<void> {
    let socket: tls.TLSSocket | undefined;
    try {
      const secureContext = await this.#contexts.get(ctx.host, async () => {
        const leaf = await this.#opts.leafFor(ctx.host);
        return tls.createSecureContext({ cert: leaf.cert, key: leaf.key });
      });
      socket = client.startTls(clientHello, { secureContext, alpn: ["http/1.1"] });
      this.#sockets.add(socket);
      const closed = new Promise<void>((resolve) => socket!.once("close", resolve));
      // A failed handshake surfaces as a read error in serveH1.
      await serveH1(new SocketIo(socket), (req) => this.#answer(ctx, req), {
        headTimeoutMs: this.#opts.headTimeoutMs,
      });
      // serveH1 ended the writing side; the client gets a moment to close its own.
      const timer = setTimeout(() => socket!.destroy(), 2000);
      await closed;
      clearTimeout(timer);
    } catch (e) {
      this.#opts.debug(
        `ssl-bump: interception of ${ctx.host}:${ctx.port} ended: ${(e as Error).message}`,
      );
    } finally {
      if (socket) {
        this.#sockets.delete(socket);
        if (!socket.destroyed) {
          const closed = new Promise((resolve) => socket!.once("close", resolve));
          socket.destroy();
          await closed;
        }
      }
      closeQuietly(client);
    }
  }

  /** The route for h2 clients: a splice into the host's internal Deno.serve listener. */
  async #spliced(client: ByteConn, ctx: ConnContext, clientHello: Uint8Array): Promise<void> {
    let inner: Deno.TcpConn | undefined;
    let localPort = -1;
    try {
      const listener = await this.#listeners.get(ctx.host, () => this.#listen(ctx.host));
      inner = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
      localPort = inner.localAddr.port;
      // Small TLS records must not wait for delayed ACKs (40 ms per request otherwise).
      inner.setNoDelay(true);
      this.#conns.set(localPort, ctx);
      await writeAll(inner, clientHello);
      const a = inner;
      await Promise.all([pump(client, a), pump(a, client)]);
    } catch (e) {
      this.#opts.debug(
        `ssl-bump: interception of ${ctx.host}:${ctx.port} ended: ${(e as Error).message}`,
      );
    } finally {
      if (localPort !== -1) this.#conns.delete(localPort);
      closeQuietly(inner);
      closeQuietly(client);
    }
  }

  async #listen(host: string): Promise<Listener> {
    const leaf = await this.#opts.leafFor(host);
    const { promise, resolve } = Promise.withResolvers<number>();
    const server = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      cert: leaf.cert,
      key: leaf.key,
      onListen: (addr) => resolve(addr.port),
      onError: () => new Response("Bad gateway\n", { status: 502 }),
    }, (req, info) => this.#handle(req, info));
    return { port: await promise, server };
  }

  /** A request on the Deno.serve route. */
  async #handle(req: Request, info: Deno.ServeHandlerInfo): Promise<Response> {
    const started = performance.now();
    const ctx = this.#conns.get((info.remoteAddr as Deno.NetAddr).port);
    if (!ctx) {
      return new Response("Forbidden\n", { status: 403 });
    }
    const verdict = this.#judge(ctx, req.method, req.url, started);
    if (!("target" in verdict)) return toResponse(verdict);
    if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
      return this.#websocket(
        req,
        `https://${authorityOf(ctx)}${verdict.target}`,
        (status) => this.#opts.log(verdict.entry(status, { pattern: verdict.pattern })),
      );
    }
    const reply = await this.#forward(ctx, verdict, req.method, req.headers, req.body);
    try {
      return toResponse(reply);
    } catch (e) {
      if (reply.body instanceof ReadableStream) reply.body.cancel().catch(() => {});
      return toResponse(this.#upstreamError(verdict, e));
    }
  }

  /** A request on the adopted route. */
  #answer(ctx: ConnContext, req: H1Request): Promise<H1Reply> {
    const verdict = this.#judge(ctx, req.method, req.url, performance.now());
    if (!("target" in verdict)) {
      req.body?.cancel().catch(() => {});
      return Promise.resolve(verdict);
    }
    const upgrade = req.upgrade?.toLowerCase() === "websocket" ? "websocket" : undefined;
    return this.#forward(ctx, verdict, req.method, req.headers, req.body, upgrade);
  }

  /**
   * The policy for one request: the reply when it is blocked (already
   * logged), else where it goes.
   */
  #judge(ctx: ConnContext, method: string, url: string, started: number): H1Reply | Allowed {
    const raw = splitRawUrl(url);
    const sentUrl = `https://${authorityOf(ctx)}${raw.path}${
      raw.query === "" ? "" : `?${raw.query}`
    }`;
    const entry = (
      decision: "allowed" | "blocked",
      rule: string,
      status: number | null,
      extra: Partial<BumpLogEntry> = {},
    ): BumpLogEntry => ({
      time: new Date().toISOString(),
      method,
      scheme: "https",
      host: ctx.host,
      port: ctx.port,
      url: sentUrl,
      decision,
      rule,
      status,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: Math.round(performance.now() - started),
      ...extra,
    });

    if (!expectedAuthority(ctx.host, ctx.port).includes(raw.authority)) {
      this.#opts.log(
        entry("blocked", "host-mismatch", 403, { reason: `authority ${raw.authority}` }),
      );
      this.#opts.debug(`ssl-bump: block ${sentUrl}: authority "${raw.authority}"`);
      return ownReply(
        403,
        "Forbidden",
        "blocked-by-host-mismatch",
        `Blocked by forgekit: request for host "${raw.authority}" on a connection to ` +
          `"${ctx.host}" (the Host header or :authority must equal the CONNECT host)\n`,
      );
    }

    const decision = decideUrl(this.#opts.patterns, {
      host: ctx.host,
      port: ctx.port,
      path: raw.path,
      query: raw.query,
    });
    if (!decision.allowed) {
      const list = decision.hostPatterns.map((p) => p.source).join(", ");
      const why = decision.normalisedPath === null ? " (the path cannot be normalised safely)" : "";
      this.#opts.log(entry("blocked", decision.rule, 403, {
        reason: decision.normalisedPath === null ? "unsafe path" : undefined,
      }));
      this.#opts.debug(`ssl-bump: block ${sentUrl}: ${decision.rule}`);
      return ownReply(
        403,
        "Forbidden",
        "blocked-by-url-policy",
        `Blocked by forgekit: ${sentUrl} matches no --allow-urls pattern for ${ctx.host}${why}; ` +
          `patterns for this host: ${list}\n`,
      );
    }
    this.#opts.debug(`ssl-bump: allow ${sentUrl}: ${decision.rule}`);
    return {
      // Forward what was decided on: the normalised path.
      target: `${decision.normalisedPath ?? raw.path}${raw.query === "" ? "" : `?${raw.query}`}`,
      sentUrl,
      rule: decision.rule,
      pattern: decision.pattern?.source,
      entry: (status, extra) => entry("allowed", decision.rule, status, extra),
    };
  }

  /** Sends an allowed request to the origin; a failure is a logged 502. */
  async #forward(
    ctx: ConnContext,
    allowed: Allowed,
    method: string,
    headers: Iterable<[string, string]>,
    body: ReadableStream<Uint8Array> | null,
    upgrade?: string,
  ): Promise<H1Reply> {
    let bytesOut = 0;
    let upstream: OriginResponse;
    try {
      upstream = await this.#opts.origins.request({
        host: ctx.host,
        port: ctx.port,
        method,
        target: allowed.target,
        headers: forwardHeaders(headers),
        body,
        onBodyBytes: (n) => bytesOut = n,
        upgrade,
      });
    } catch (e) {
      return this.#upstreamError(allowed, e);
    }
    const { pattern } = allowed;
    upstream.onEnd((bytesIn) =>
      this.#opts.log(
        allowed.entry(upstream.status, { pattern, bytes_in: bytesIn, bytes_out: bytesOut }),
      )
    );
    return upstream;
  }

  #upstreamError(allowed: Allowed, e: unknown): H1Reply {
    const message = (e as Error).message;
    this.#opts.log(
      allowed.entry(502, { pattern: allowed.pattern, reason: `upstream error: ${message}` }),
    );
    return ownReply(
      502,
      "Bad Gateway",
      "upstream-error",
      `Upstream error for ${allowed.sentUrl}: ${message}\n`,
    );
  }

  #websocket(req: Request, target: string, logged: (status: number) => void): Response {
    // Headers are unreadable once the request is upgraded.
    const protocols = req.headers.get("sec-websocket-protocol")?.split(",").map((s) => s.trim())
      .filter((s) => s !== "");
    // The first offered subprotocol is accepted (upstream is asked for the same list).
    const { socket, response } = Deno.upgradeWebSocket(req, { protocol: protocols?.[0] });
    const wssUrl = target.replace(/^https:/, "wss:");
    // The client option carries the upstream trust (--upstream-ca) and proxy.
    const init = { protocols, client: this.#opts.client } as unknown as string[];
    const upstream = new WebSocket(wssUrl, init);
    upstream.binaryType = "arraybuffer";
    const pending: (string | ArrayBuffer)[] = [];
    socket.onmessage = (e) => {
      if (upstream.readyState === WebSocket.OPEN) upstream.send(e.data);
      else pending.push(e.data);
    };
    upstream.onopen = () => {
      logged(101);
      for (const m of pending.splice(0)) upstream.send(m);
    };
    upstream.onmessage = (e) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(e.data);
    };
    const closeBoth = () => {
      if (socket.readyState < WebSocket.CLOSING) socket.close();
      if (upstream.readyState < WebSocket.CLOSING) upstream.close();
    };
    upstream.onclose = closeBoth;
    upstream.onerror = () => {
      logged(502);
      closeBoth();
    };
    socket.onclose = closeBoth;
    return response;
  }
}

function authorityOf(ctx: ConnContext): string {
  return ctx.port === 443 ? ctx.host : `${ctx.host}:${ctx.port}`;
}
