/**
 * Dialling upstream for the proxy: directly, or through the invoking
 * environment's HTTPS_PROXY / HTTP_PROXY (a corporate proxy, chained with
 * CONNECT), honouring NO_PROXY.
 */

/** The proxy settings of the invoking environment. */
export interface UpstreamProxyEnv {
  https?: URL;
  http?: URL;
  noProxy: string[];
}

/** Reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY (either case). */
export function proxyEnv(
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): UpstreamProxyEnv {
  const url = (a: string, b: string) => {
    const v = env(a) ?? env(b);
    if (!v) return undefined;
    try {
      return new URL(v.includes("://") ? v : `http://${v}`);
    } catch {
      return undefined;
    }
  };
  const no = env("NO_PROXY") ?? env("no_proxy") ?? "";
  return {
    https: url("HTTPS_PROXY", "https_proxy"),
    http: url("HTTP_PROXY", "http_proxy"),
    noProxy: no.split(",").map((s) => s.trim().toLowerCase()).filter(Boolean),
  };
}

/** Whether NO_PROXY exempts a host. */
export function bypassed(noProxy: string[], host: string): boolean {
  const h = host.toLowerCase();
  return noProxy.some((n) =>
    n === "*" || h === n.replace(/^\./, "") || h.endsWith(n.startsWith(".") ? n : `.${n}`)
  );
}

import { HEAD_TIMEOUT_MS, HeadTimeoutError, readHttpHead } from "./http_head.ts";

const enc = new TextEncoder();

/**
 * Opens a TCP tunnel to host:port (for CONNECT), via the environment's
 * HTTPS_PROXY when set and not bypassed; that proxy has `timeoutMs` to
 * answer the CONNECT.
 */
export async function dialTunnel(
  env: UpstreamProxyEnv,
  host: string,
  port: number,
  timeoutMs: number = HEAD_TIMEOUT_MS,
): Promise<Deno.Conn> {
  const via = env.https && !bypassed(env.noProxy, host) ? env.https : undefined;
  if (!via) return await Deno.connect({ hostname: host, port });
  const conn = await Deno.connect({
    hostname: via.hostname.replace(/^\[|\]$/g, ""),
    port: Number(via.port || 80),
  });
  try {
    const target = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
    await conn.write(enc.encode(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    const got = await readHttpHead(conn, timeoutMs).catch((err) => {
      if (!(err instanceof HeadTimeoutError)) throw err;
      throw new Error(`upstream proxy ${via.host} did not answer CONNECT ${target} in time`, {
        cause: err,
      });
    });
    if (!got) throw new Error(`upstream proxy ${via.host} closed the connection`);
    const status = Number(got.head.split(" ")[1]);
    const rest = got.rest;
    if (status !== 200) {
      throw new Error(`upstream proxy ${via.host} answered ${status} to CONNECT ${target}`);
    }
    if (rest.length) throw new Error("upstream proxy sent data before the tunnel opened");
    return conn;
  } catch (err) {
    conn.close();
    throw err;
  }
}

/**
 * Opens a connection for a plain-HTTP request: to the origin, or to the
 * environment's HTTP_PROXY (then the request keeps its absolute form).
 */
export async function dialHttp(
  env: UpstreamProxyEnv,
  host: string,
  port: number,
): Promise<{ conn: Deno.Conn; viaProxy: boolean }> {
  const via = env.http && !bypassed(env.noProxy, host) ? env.http : undefined;
  if (!via) return { conn: await Deno.connect({ hostname: host, port }), viaProxy: false };
  return {
    conn: await Deno.connect({
      hostname: via.hostname.replace(/^\[|\]$/g, ""),
      port: Number(via.port || 80),
    }),
    viaProxy: true,
  };
}
