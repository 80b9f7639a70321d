/**
 * A forward proxy for tests, standing in for the corporate proxy a user
 * sets in HTTPS_PROXY / HTTP_PROXY. It maps real host names (github.com,
 * api.bitbucket.org, …) to servers on loopback, so that clients that honour
 * the proxy variables reach test origins under those names. Only loopback
 * addresses are ever dialled.
 *
 * It understands CONNECT (spliced) and absolute-form plain HTTP requests
 * (the connection is then spliced to that one origin).
 */

/** One request the proxy saw. */
export interface ProxyHit {
  method: string;
  /** `host:port` as the client asked for it. */
  target: string;
  /** The request's Proxy-Authorization, if any. */
  authorization?: string;
  /** Bytes the client sent through the tunnel (or after the head), set once it has ended. */
  sent?: number;
}

/** A running test proxy. */
export interface TestProxy {
  /** `http://127.0.0.1:PORT` for HTTPS_PROXY / HTTP_PROXY. */
  url: string;
  port: number;
  /** Every CONNECT / HTTP request seen, in order. */
  hits: ProxyHit[];
  /** Adds or replaces a route: `host:port` (or `host` for any port) → loopback port. */
  route(target: string, loopbackPort: number): void;
  close(): Promise<void>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

async function readHead(conn: Deno.Conn): Promise<{ head: string; rest: Uint8Array } | null> {
  let buf = new Uint8Array(0);
  const chunk = new Uint8Array(16384);
  while (buf.length < 65536) {
    const n = await conn.read(chunk);
    if (n === null) return null;
    const next = new Uint8Array(buf.length + n);
    next.set(buf);
    next.set(chunk.subarray(0, n), buf.length);
    buf = next;
    const text = dec.decode(buf);
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const headBytes = enc.encode(text.slice(0, end + 4)).length;
      return { head: text.slice(0, end), rest: buf.subarray(headBytes) };
    }
  }
  return null;
}

/** Splices until either side ends; returns the bytes that went from `a` to `b`. */
async function splice(a: Deno.Conn, b: Deno.Conn): Promise<number> {
  const close = () => {
    for (const c of [a, b]) {
      try {
        c.close();
      } catch { /* closed */ }
    }
  };
  let sent = 0;
  const counted = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, out) {
      sent += chunk.byteLength;
      out.enqueue(chunk);
    },
  });
  await Promise.race([
    a.readable.pipeThrough(counted).pipeTo(b.writable, { preventClose: true }).catch(() => {}),
    b.readable.pipeTo(a.writable, { preventClose: true }).catch(() => {}),
  ]);
  close();
  return sent;
}

/**
 * Starts a test proxy on 127.0.0.1.
 *
 * @example
 * ```ts
 * const proxy = startTestProxy({ "api.github.com:443": origin.port });
 * await runForgekit(["fetch", "https://api.github.com/user"], {
 *   env: { HTTPS_PROXY: proxy.url, DENO_CERT: ca.certPath },
 * });
 * ```
 */
export function startTestProxy(
  routes: Record<string, number> = {},
  options: {
    /** The Proxy-Authorization every request must carry; others get 407. */
    requireAuth?: string;
  } = {},
): TestProxy {
  const table = new Map(Object.entries(routes));
  const hits: ProxyHit[] = [];
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();

  const lookup = (host: string, port: number) =>
    table.get(`${host.toLowerCase()}:${port}`) ?? table.get(host.toLowerCase());

  async function handle(conn: Deno.Conn) {
    conns.add(conn);
    try {
      const got = await readHead(conn);
      if (!got) return;
      const [requestLine] = got.head.split("\r\n");
      const [method, target] = requestLine.split(" ");
      let host: string;
      let port: number;
      let forwardHead: string | null = null;
      if (method === "CONNECT") {
        const i = target.lastIndexOf(":");
        host = target.slice(0, i).replace(/^\[|\]$/g, "");
        port = Number(target.slice(i + 1));
      } else {
        const url = new URL(target);
        host = url.hostname;
        port = Number(url.port || 80);
        const lines = got.head.split("\r\n");
        lines[0] = `${method} ${url.pathname}${url.search} ${requestLine.split(" ")[2]}`;
        forwardHead = lines.filter((l) => !/^proxy-/i.test(l)).join("\r\n") + "\r\n\r\n";
      }
      const authorization = got.head.split("\r\n").find((l) => /^proxy-authorization:/i.test(l))
        ?.slice("proxy-authorization:".length).trim();
      const hit: ProxyHit = { method, target: `${host}:${port}`, authorization };
      hits.push(hit);
      if (options.requireAuth !== undefined && authorization !== options.requireAuth) {
        await conn.write(enc.encode(
          'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="test"\r\n' +
            "Content-Length: 0\r\nConnection: close\r\n\r\n",
        ));
        return;
      }
      const to = lookup(host, port);
      if (to === undefined) {
        await conn.write(enc.encode("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"));
        return;
      }
      const upstream = await Deno.connect({ hostname: "127.0.0.1", port: to });
      conns.add(upstream);
      if (forwardHead === null) {
        await conn.write(enc.encode("HTTP/1.1 200 Connection Established\r\n\r\n"));
      } else {
        await upstream.write(enc.encode(forwardHead));
      }
      if (got.rest.length) await upstream.write(got.rest);
      hit.sent = got.rest.length + await splice(conn, upstream);
      conns.delete(upstream);
    } catch {
      // a test client went away; nothing to report
    } finally {
      conns.delete(conn);
      try {
        conn.close();
      } catch { /* closed */ }
    }
  }

  const accepting = (async () => {
    for await (const conn of listener) handle(conn);
  })().catch(() => {});

  const port = (listener.addr as Deno.NetAddr).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    hits,
    route(target, loopbackPort) {
      table.set(target.toLowerCase(), loopbackPort);
    },
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed */ }
      }
      await accepting;
    },
  };
}
