/**
 * TLS termination and per-request policy for `--ssl-bump`.
 *
 * Deno has no server-side `startTls` on an accepted connection, so each
 * bumped host gets an internal TLS listener on 127.0.0.1 (Deno.serve: ALPN h2
 * and http/1.1, each HTTP/1.1 request and each HTTP/2 stream handed over on
 * its own). {@linkcode Interceptor.intercept} connects to that listener,
 * replays the ClientHello the proxy already read, and splices. The listener
 * serves only connections `intercept()` made: their local ports are
 * registered, and a request from any other peer is refused before anything
 * is forwarded.
 *
 * @module
 */
import { LeafCache } from "./leaf_cache.ts";
import type { Leaf } from "./ca.ts";
import { decideUrl, type UrlPattern } from "./url_pattern.ts";
import { closeQuietly, pump, writeAll } from "./conn_io.ts";
import type { AccessLogEntry } from "./access_log.ts";
import { HOP_BY_HOP, type OriginClient, type OriginResponse } from "./origin_client.ts";

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
}

interface ConnContext {
  host: string;
  port: number;
}

/** The request's end-to-end headers, as pairs for the origin. */
function forwardHeaders(headers: Headers): [string, string][] {
  const listed = (headers.get("connection") ?? "").toLowerCase().split(",").map((s) => s.trim());
  const out: [string, string][] = [];
  headers.forEach((v, k) => {
    if (k !== "host" && !HOP_BY_HOP.has(k) && !listed.includes(k)) out.push([k, v]);
  });
  return out;
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
  #closed = false;

  constructor(options: InterceptorOptions) {
    this.#opts = options;
    this.#listeners = new LeafCache<Listener>({
      capacity: options.capacity ?? 256,
      onEvict: (l) => {
        l.server.shutdown().catch(() => {});
      },
    });
  }

  /** Takes over a client connection whose ClientHello (for `host`) was already read. */
  async intercept(
    client: Deno.Conn,
    host: string,
    port: number,
    clientHello: Uint8Array,
  ): Promise<void> {
    let inner: Deno.TcpConn | undefined;
    let localPort = -1;
    try {
      if (this.#closed) throw new Error("Interception is closed");
      const key = host.toLowerCase();
      this.#opts.origins.warm(key, port);
      const listener = await this.#listeners.get(key, () => this.#listen(key));
      inner = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
      localPort = inner.localAddr.port;
      // Small TLS records must not wait for delayed ACKs (40 ms per request otherwise).
      inner.setNoDelay(true);
      if ("setNoDelay" in client) (client as Deno.TcpConn).setNoDelay(true);
      this.#conns.set(localPort, { host: key, port });
      await writeAll(inner, clientHello);
      const a = inner;
      await Promise.all([pump(client, a), pump(a, client)]);
    } catch (e) {
      this.#opts.debug(`ssl-bump: interception of ${host}:${port} ended: ${(e as Error).message}`);
    } finally {
      if (localPort !== -1) this.#conns.delete(localPort);
      closeQuietly(inner);
      closeQuietly(client);
    }
  }

  /** Closes every internal listener. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#listeners.clear();
    await Promise.resolve();
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

  async #handle(req: Request, info: Deno.ServeHandlerInfo): Promise<Response> {
    const started = performance.now();
    const ctx = this.#conns.get((info.remoteAddr as Deno.NetAddr).port);
    if (!ctx) {
      return new Response("Forbidden\n", { status: 403 });
    }
    const raw = splitRawUrl(req.url);
    const entry = (
      decision: "allowed" | "blocked",
      rule: string,
      status: number | null,
      url: string,
      extra: Partial<BumpLogEntry> = {},
    ): BumpLogEntry => ({
      time: new Date().toISOString(),
      method: req.method,
      scheme: "https",
      host: ctx.host,
      port: ctx.port,
      url,
      decision,
      rule,
      status,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: Math.round(performance.now() - started),
      ...extra,
    });
    const origin = `https://${ctx.host}${ctx.port === 443 ? "" : `:${ctx.port}`}`;
    const sentUrl = `${origin}${raw.path}${raw.query === "" ? "" : `?${raw.query}`}`;

    if (!expectedAuthority(ctx.host, ctx.port).includes(raw.authority)) {
      const body = `Blocked by forgekit: request for host "${raw.authority}" on a connection to ` +
        `"${ctx.host}" (the Host header or :authority must equal the CONNECT host)\n`;
      this.#opts.log(
        entry("blocked", "host-mismatch", 403, sentUrl, { reason: `authority ${raw.authority}` }),
      );
      this.#opts.debug(`ssl-bump: block ${sentUrl}: authority "${raw.authority}"`);
      return blocked("blocked-by-host-mismatch", body);
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
      this.#opts.log(entry("blocked", decision.rule, 403, sentUrl, {
        reason: decision.normalisedPath === null ? "unsafe path" : undefined,
      }));
      this.#opts.debug(`ssl-bump: block ${sentUrl}: ${decision.rule}`);
      return blocked(
        "blocked-by-url-policy",
        `Blocked by forgekit: ${sentUrl} matches no --allow-urls pattern for ${ctx.host}${why}; ` +
          `patterns for this host: ${list}\n`,
      );
    }
    // Forward what was decided on: the normalised path.
    const target = `${origin}${decision.normalisedPath ?? raw.path}${
      raw.query === "" ? "" : `?${raw.query}`
    }`;
    const pattern = decision.pattern?.source;
    this.#opts.debug(`ssl-bump: allow ${sentUrl}: ${decision.rule}`);

    if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
      return this.#websocket(
        req,
        target,
        (status) => this.#opts.log(entry("allowed", decision.rule, status, sentUrl, { pattern })),
      );
    }

    let bytesOut = 0;
    let upstream: OriginResponse;
    let response: Response;
    try {
      upstream = await this.#opts.origins.request({
        host: ctx.host,
        port: ctx.port,
        method: req.method,
        target: target.slice(origin.length),
        headers: forwardHeaders(req.headers),
        body: req.body,
        onBodyBytes: (n) => bytesOut = n,
      });
      // A reason phrase Response rejects is dropped; a status it rejects is a 502.
      const init = { status: upstream.status, headers: upstream.headers };
      try {
        response = new Response(upstream.body, { ...init, statusText: upstream.statusText });
      } catch {
        response = new Response(upstream.body, init);
      }
    } catch (e) {
      this.#opts.log(entry("allowed", decision.rule, 502, sentUrl, {
        pattern,
        reason: `upstream error: ${(e as Error).message}`,
      }));
      return new Response(`Upstream error for ${sentUrl}: ${(e as Error).message}\n`, {
        status: 502,
        headers: { "x-proxy-error": "upstream-error" },
      });
    }
    const status = upstream.status;
    upstream.onEnd((bytesIn) =>
      this.#opts.log(
        entry("allowed", decision.rule, status, sentUrl, {
          pattern,
          bytes_in: bytesIn,
          bytes_out: bytesOut,
        }),
      )
    );
    return response;
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

function blocked(reason: string, body: string): Response {
  return new Response(body, {
    status: 403,
    headers: { "x-proxy-error": reason, "content-type": "text/plain; charset=utf-8" },
  });
}
