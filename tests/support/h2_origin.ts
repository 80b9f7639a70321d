/**
 * An HTTP/2-only origin (`h2_origin.py`, hyper's h2 under the system
 * python) reached as api.github.com through the test proxy, behind a bump
 * front: what the origin saw arrives as events (see the script's docstring).
 */
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { makeTestCa } from "./tls.ts";
import { startTestProxy } from "./proxy.ts";
import { type BumpFront, startBumpFront } from "./bump.ts";
import { H2_PYTHON } from "./h2_client.ts";
import {
  OriginClient,
  type OriginClientOptions,
  type OriginRequest,
} from "../../lib/bump/origin_client.ts";

const SCRIPT = fileURLToPath(new URL("./h2_origin.py", import.meta.url));

/** One thing the origin saw. */
export interface OriginEvent {
  ev: string;
  conn?: number;
  stream?: number;
  headers?: [string, string][];
  trailers?: [string, string][] | null;
  length?: number;
  sha256?: string;
  code?: number;
  sent?: number;
  open?: number;
  alpn?: string | null;
  error?: string;
  port?: number;
}

/** A bump front whose api.github.com is the HTTP/2-only origin. */
export interface H2OriginFixture extends BumpFront {
  /** Everything the origin reported, in order. */
  events: OriginEvent[];
  /** The origin's request events, with their paths. */
  requests(): (OriginEvent & { path: string })[];
  /** Waits until `cond` holds over the events (they come from another process). */
  until(cond: (events: OriginEvent[]) => boolean, what: string, ms?: number): Promise<void>;
  /** Stops the origin process (its connections break). */
  killOrigin(): Promise<void>;
  /** How the front reaches the origin: the test proxy's URL and the origin's CA (PEM). */
  upstream: { proxyUrl: string; caCert: string };
}

/** Options of the origin (see the script): ALPN offered, its stream limit and window. */
export interface H2OriginOptions {
  alpn?: string[];
  maxStreams?: number;
  window?: number;
  /** After the handshake the origin sends nothing (no SETTINGS) and reads nothing. */
  silent?: boolean;
  /** Connections are accepted, but their TLS handshake is never answered. */
  stallTls?: boolean;
  allowUrls?: string[];
  /** `--log-bodies`: the front writes `bodies.jsonl` in its session directory. */
  logBodies?: boolean;
}

/** Starts the origin, a test proxy routing api.github.com:443 to it, and a bump front. */
export async function startH2Origin(options: H2OriginOptions = {}): Promise<H2OriginFixture> {
  const ca = await makeTestCa("h2 origin test CA");
  const leaf = await ca.issue(["api.github.com"]);
  const dir = await Deno.makeTempDir({ prefix: "forgekit-h2-origin-" });
  await Deno.writeTextFile(join(dir, "leaf.pem"), leaf.cert);
  await Deno.writeTextFile(join(dir, "leaf.key"), leaf.key);
  const child = new Deno.Command(H2_PYTHON, {
    args: [
      SCRIPT,
      JSON.stringify({
        cert: join(dir, "leaf.pem"),
        key: join(dir, "leaf.key"),
        alpn: options.alpn ?? ["h2"],
        max_streams: options.maxStreams ?? 100,
        window: options.window ?? 65535,
        silent: options.silent ?? false,
        stall_tls: options.stallTls ?? false,
      }),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const events: OriginEvent[] = [];
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const reading = (async () => {
    let pending = "";
    for (let r = await lines.read(); !r.done; r = await lines.read()) {
      pending += r.value;
      let nl: number;
      while ((nl = pending.indexOf("\n")) !== -1) {
        events.push(JSON.parse(pending.slice(0, nl)));
        pending = pending.slice(nl + 1);
      }
    }
  })();
  const until = async (cond: (e: OriginEvent[]) => boolean, what: string, ms = 5000) => {
    const end = performance.now() + ms;
    while (!cond(events)) {
      if (performance.now() > end) {
        throw new Error(`timed out waiting for ${what}: ${JSON.stringify(events.slice(-20))}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  await until((e) => e.some((x) => x.ev === "ready"), "the origin to listen");
  const port = events.find((e) => e.ev === "ready")!.port!;
  const proxy = startTestProxy();
  proxy.route("api.github.com:443", port);
  const front = await startBumpFront({
    allowUrls: options.allowUrls ?? ["https://api.github.com/allowed/*"],
    upstreamCaCerts: [ca.cert],
    upstreamProxy: proxy.url,
    logBodies: options.logBodies,
  });
  let killed = false;
  const kill = async () => {
    if (killed) return;
    killed = true;
    child.kill("SIGKILL");
    await child.status;
    await reading.catch(() => {});
  };
  return {
    ...front,
    events,
    requests: () =>
      events.filter((e) => e.ev === "request").map((e) => ({
        ...e,
        path: e.headers!.find(([k]) => k === ":path")![1],
      })),
    until,
    killOrigin: kill,
    upstream: { proxyUrl: proxy.url, caCert: ca.cert },
    async close() {
      await front.close();
      await proxy.close();
      await kill();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** forgekit's origin client on its own, reaching the fixture's origin through its test proxy. */
export function originClientFor(
  f: H2OriginFixture,
  options: Partial<OriginClientOptions> = {},
): OriginClient {
  return new OriginClient({
    caCerts: [f.upstream.caCert],
    upstream: { https: new URL(f.upstream.proxyUrl), noProxy: [] },
    ...options,
  });
}

/** A body-less GET of `/allowed/x` for {@linkcode originClientFor}'s client, with `over` on top. */
export function originGet(over: Partial<OriginRequest> = {}): OriginRequest {
  return {
    host: "api.github.com",
    port: 443,
    method: "GET",
    target: "/allowed/x",
    headers: [],
    body: null,
    ...over,
  };
}
