/**
 * Dialling upstream for the proxy: directly, or through the invoking
 * environment's HTTPS_PROXY / HTTP_PROXY (a corporate proxy, chained with
 * CONNECT, with the URL's user and password as Basic proxy credentials),
 * honouring NO_PROXY.
 */
import { lookup } from "node:dns/promises";
import { usageError } from "../cli/mod.ts";
import { addressProblem } from "./domain_policy.ts";
import { HEAD_TIMEOUT_MS, HeadTimeoutError, readHttpHead } from "./http_head.ts";

/** The proxy settings of the invoking environment. */
export interface UpstreamProxyEnv {
  https?: URL;
  http?: URL;
  noProxy: string[];
}

/**
 * Reads HTTPS_PROXY, HTTP_PROXY and NO_PROXY (either case). A value without
 * a scheme is taken as `http://`. A value that is not a URL, or names
 * another kind of proxy (such as `socks5://`), is a usage error: ignoring it
 * would send everything past the proxy the environment asks for.
 */
export function proxyEnv(
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): UpstreamProxyEnv {
  const url = (a: string, b: string) => {
    const name = env(a) ? a : b;
    const v = env(name);
    if (!v) return undefined;
    let u: URL;
    try {
      u = new URL(v.includes("://") ? v : `http://${v}`);
    } catch (err) {
      // Not echoed: the value may hold a password.
      throw usageError(
        `${name} is not a proxy URL`,
        `set it to http://HOST:PORT (or http://USER:PASSWORD@HOST:PORT), or unset it`,
        err,
      );
    }
    // An https:// proxy is one spoken to over TLS (as curl and Python do):
    // forgekit speaks plain HTTP to its proxy, which would send that
    // proxy's password in clear text where the URL asked for TLS.
    if (u.protocol === "https:") {
      throw usageError(
        `${name} names an HTTPS proxy (https://${u.host}); forgekit speaks plain HTTP to ` +
          "its upstream proxy and does not connect to one over TLS",
        `if that proxy takes plain HTTP, set ${name} to http://${u.host}; otherwise unset it`,
      );
    }
    if (u.protocol !== "http:") {
      throw usageError(
        `${name} names a ${u.protocol.slice(0, -1)} proxy (${u.protocol}//${u.host}); ` +
          "forgekit chains through HTTP proxies only",
        `set ${name} to the http://HOST:PORT of an HTTP proxy, or unset it`,
      );
    }
    return u;
  };
  const no = env("NO_PROXY") ?? env("no_proxy") ?? "";
  return {
    https: url("HTTPS_PROXY", "https_proxy"),
    http: url("HTTP_PROXY", "http_proxy"),
    noProxy: no.split(",").map((s) => s.trim().toLowerCase()).filter(Boolean),
  };
}

/**
 * The `Proxy-Authorization` value for a proxy URL's user and password
 * (Basic, RFC 9110 §11.7.1 and RFC 7617; percent-escapes decoded, UTF-8), or
 * null when the URL has neither.
 *
 * @example
 * ```ts
 * proxyAuthorization(new URL("http://alice:s%3Acret@proxy:3128")); // "Basic YWxpY2U6czpjcmV0"
 * proxyAuthorization(new URL("http://proxy:3128")); // null
 * ```
 */
export function proxyAuthorization(proxy: URL): string | null {
  if (proxy.username === "" && proxy.password === "") return null;
  const decode = (s: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s; // a stray % is taken as it is, as curl does
    }
  };
  const pair = `${decode(proxy.username)}:${decode(proxy.password)}`;
  return `Basic ${new TextEncoder().encode(pair).toBase64()}`;
}

/** Whether NO_PROXY exempts a host. */
export function bypassed(noProxy: string[], host: string): boolean {
  const h = host.toLowerCase();
  return noProxy.some((n) =>
    n === "*" || h === n.replace(/^\./, "") || h.endsWith(n.startsWith(".") ? n : `.${n}`)
  );
}

const enc = new TextEncoder();

/**
 * Connects to host:port itself. A name is resolved once, here, and every
 * address it gives is checked ({@linkcode addressProblem}) before any is
 * connected to, so that a name cannot lead to this machine, and the answer
 * checked is the one used.
 */
async function connectDirect(host: string, port: number): Promise<Deno.Conn> {
  const addresses = (await lookup(host, { all: true })).map((a) => a.address);
  const refused = addresses.map((a) => addressProblem(host, a)).find((why) => why !== null);
  if (refused) throw new Error(refused);
  let last: unknown = new Error(`${host} has no address`);
  for (const hostname of addresses) {
    try {
      return await Deno.connect({ hostname, port });
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

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
  if (!via) return await connectDirect(host, port);
  const conn = await Deno.connect({
    hostname: via.hostname.replace(/^\[|\]$/g, ""),
    port: Number(via.port || 80),
  });
  try {
    const target = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
    const auth = proxyAuthorization(via);
    await conn.write(
      enc.encode(
        `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n` +
          (auth ? `Proxy-Authorization: ${auth}\r\n` : "") + "\r\n",
      ),
    );
    const got = await readHttpHead(conn, timeoutMs).catch((err) => {
      if (!(err instanceof HeadTimeoutError)) throw err;
      throw new Error(`upstream proxy ${via.host} did not answer CONNECT ${target} in time`, {
        cause: err,
      });
    });
    if (!got) throw new Error(`upstream proxy ${via.host} closed the connection`);
    const status = Number(got.head.split(" ")[1]);
    const rest = got.rest;
    if (status === 407) {
      throw new Error(
        auth
          ? `upstream proxy ${via.host} refused the user name and password in HTTPS_PROXY (407)`
          : `upstream proxy ${via.host} requires a user name and password (407): ` +
            `set HTTPS_PROXY to http://USER:PASSWORD@${via.host}`,
      );
    }
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
 * environment's HTTP_PROXY (then the request keeps its absolute form, and
 * carries `proxyAuthorization` when the proxy URL has credentials).
 */
export async function dialHttp(
  env: UpstreamProxyEnv,
  host: string,
  port: number,
): Promise<{ conn: Deno.Conn; viaProxy: boolean; proxyAuthorization: string | null }> {
  const via = env.http && !bypassed(env.noProxy, host) ? env.http : undefined;
  if (!via) {
    return {
      conn: await connectDirect(host, port),
      viaProxy: false,
      proxyAuthorization: null,
    };
  }
  return {
    conn: await Deno.connect({
      hostname: via.hostname.replace(/^\[|\]$/g, ""),
      port: Number(via.port || 80),
    }),
    viaProxy: true,
    proxyAuthorization: proxyAuthorization(via),
  };
}
