/**
 * Test origins: one HTTPS server (a multi-name leaf from the test CA) and one
 * plain HTTP server on loopback, reached under real host names through
 * {@linkcode startTestProxy}. Every request is recorded.
 */
import { makeTestCa, type TestCa } from "./tls.ts";
import { startTestProxy, type TestProxy } from "./proxy.ts";

/** One request an origin received. */
export interface OriginHit {
  scheme: "https" | "http";
  host: string;
  method: string;
  path: string;
  headers: Headers;
  body: string;
}

/** A handler: return a Response, or undefined for 404. */
export type OriginHandler = (
  req: Request,
  hit: OriginHit,
) => Response | undefined | Promise<Response | undefined>;

/** Running origins plus the proxy that reaches them. */
export interface Origins {
  ca: TestCa;
  proxy: TestProxy;
  hits: OriginHit[];
  /** Environment for a forgekit child: HTTPS_PROXY, HTTP_PROXY, DENO_CERT. */
  env: Record<string, string>;
  /** A client for in-process fetches through the proxy, trusting the CA. */
  client: Deno.HttpClient;
  close(): Promise<void>;
}

/**
 * Starts the origins for the given host names.
 *
 * @example
 * ```ts
 * const o = await startOrigins(["api.github.com"], (req) => new Response("ok"));
 * ```
 */
export async function startOrigins(hosts: string[], handler: OriginHandler): Promise<Origins> {
  const ca = await makeTestCa();
  const leaf = await ca.issue(hosts);
  const hits: OriginHit[] = [];
  const serve = (scheme: "https" | "http") => async (req: Request) => {
    const url = new URL(req.url);
    const hit: OriginHit = {
      scheme,
      host: url.hostname,
      method: req.method,
      path: url.pathname + url.search,
      headers: req.headers,
      body: "",
    };
    hits.push(hit);
    // A body the proxy cut short (the client broke its framing) reads as far as it came.
    hit.body = await req.clone().text().catch(() => "");
    return (await handler(req, hit)) ?? new Response("not found\n", { status: 404 });
  };
  const tls = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: leaf.cert, key: leaf.key, onListen() {} },
    serve("https"),
  );
  const plain = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, serve("http"));
  const proxy = startTestProxy();
  for (const h of hosts) {
    proxy.route(`${h}:443`, tls.addr.port);
    proxy.route(`${h}:80`, plain.addr.port);
  }
  const client = Deno.createHttpClient({ proxy: { url: proxy.url }, caCerts: [ca.cert] });
  return {
    ca,
    proxy,
    hits,
    env: { HTTPS_PROXY: proxy.url, HTTP_PROXY: proxy.url, DENO_CERT: ca.certPath },
    client,
    async close() {
      client.close();
      await proxy.close();
      await tls.shutdown();
      await plain.shutdown();
    },
  };
}
