/**
 * HTTP/2 towards a hostile origin (`lib/bump/origin_h2.ts`): one that, once
 * its TLS handshake is done, sends nothing (not even SETTINGS) and reads
 * nothing (`support/h2_origin.py` with `silent`), one that never answers
 * the handshake (`stall_tls`), or one that floods frames carrying nothing
 * (`/allowed/flood`). forgekit's requests to it must stay bounded in
 * memory and CPU, stop when their clients give up, and give their origin
 * connection slots back.
 */
import assert from "node:assert/strict";
import { hasH2Python, header, request, runH2, stream } from "./support/h2_client.ts";
import {
  type H2OriginFixture,
  type H2OriginOptions,
  originClientFor,
  originGet,
  startH2Origin,
} from "./support/h2_origin.ts";
import type {
  OriginClient,
  OriginClientOptions,
  OriginRequest,
} from "../lib/bump/origin_client.ts";
import { until } from "./support/until.ts";

const ignore = !hasH2Python();

function originTest(
  name: string,
  fn: (f: H2OriginFixture, client: OriginClient) => Promise<void>,
  options: H2OriginOptions = {},
  maxConnections?: number,
  clientOptions: Partial<OriginClientOptions> = {},
): void {
  Deno.test({
    name,
    ignore,
    fn: async () => {
      const f = await startH2Origin(options);
      const client = originClientFor(f, { maxConnections, ...clientOptions });
      try {
        await fn(f, client);
      } finally {
        client.close();
        await f.close();
      }
    },
  });
}

function grpcRequest(
  signal: AbortSignal,
  headers: [string, string][] = [],
  te = true,
): OriginRequest {
  return {
    host: "api.github.com",
    port: 443,
    method: "POST",
    target: "/allowed/svc/Method",
    headers,
    body: null,
    http2: { te },
    signal,
  };
}

/** How a promise settles within `ms`: "resolved", "rejected", or "pending". */
function within(p: Promise<unknown>, ms: number): Promise<string> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.then(() => "resolved", () => "rejected"),
    new Promise<string>((resolve) => timer = setTimeout(() => resolve("pending"), ms)),
  ]).finally(() => clearTimeout(timer));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

originTest(
  "a request waiting for an origin's first SETTINGS stops waiting when its client gives up",
  async (f, client) => {
    const first = new AbortController();
    const p1 = client.request(grpcRequest(first.signal));
    p1.catch(() => {});
    await f.until((e) => e.some((x) => x.ev === "conn"), "the connection");
    await sleep(100);
    // One stream only until the origin's SETTINGS come: this one waits for them.
    const second = new AbortController();
    const p2 = client.request(grpcRequest(second.signal));
    p2.catch(() => {});
    await sleep(100);
    assert.equal(await within(p2, 0), "pending");
    second.abort(new Error("the client went away"));
    assert.equal(await within(p2, 2000), "rejected", "the given-up request still waits");
    first.abort(new Error("the client went away"));
    assert.equal(await within(p1, 2000), "rejected");
  },
  { silent: true },
);

originTest(
  "an origin that reads nothing: the frames of streams its clients give up pile up only to a bound, then its connection is closed",
  async (f, client) => {
    // Not compressible by HPACK (too large for its table; '~' is longer in Huffman).
    const pad: [string, string][] = [["x-pad", "~".repeat(32 * 1024)]];
    // 40 MiB of HEADERS in all, far beyond the kernel's socket buffers and the bound (8 MiB).
    for (let i = 0; i < 1280; i++) {
      const gone = new AbortController();
      const p = client.request(grpcRequest(gone.signal, pad));
      p.catch(() => {});
      await sleep(0);
      gone.abort(new Error("deadline exceeded"));
      assert.equal(await within(p, 2000), "rejected");
    }
    const conns = f.events.filter((e) => e.ev === "conn").length;
    assert.ok(conns >= 2, `the first connection was given up (${conns} opened)`);
    assert.ok(client.openConnections <= 1, `${client.openConnections} connections open`);
  },
  { silent: true },
);

originTest(
  "an origin that never answers the TLS handshake: requests given up free their connection slots",
  async (f, client) => {
    const gone = new AbortController();
    // Plain requests of HTTP/2 clients (an HTTP/1.1-only handshake first),
    // and gRPC ones (one dial offering h2, which the others wait for).
    const requests = [false, false, false, true, true].map((te) =>
      client.request(grpcRequest(gone.signal, [], te))
    );
    for (const p of requests) p.catch(() => {});
    await f.until((e) => e.filter((x) => x.ev === "accepted").length === 4, "4 connections");
    await sleep(100);
    assert.equal(client.openConnections, 4);
    gone.abort(new Error("the client went away"));
    const settled = await Promise.all(requests.map((p) => within(p, 2000)));
    assert.deepEqual(settled, ["rejected", "rejected", "rejected", "rejected", "rejected"]);
    await sleep(100);
    // Before: every slot stayed held by a handshake that never ends (all
    // origins' requests then wait for one).
    assert.equal(client.openConnections, 0);
  },
  { stallTls: true },
  4,
);

originTest(
  "an origin that resets a stream fails the request at once, while its client still holds its body back",
  async (_f, client) => {
    const gone = new AbortController();
    let sent = false;
    // One chunk, then nothing (a gRPC client streaming as it goes).
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (!sent) controller.enqueue(new Uint8Array(5));
        sent = true;
        return new Promise(() => {});
      },
    });
    const p = client.request({
      ...grpcRequest(gone.signal),
      target: "/allowed/reset",
      body,
    });
    p.catch(() => {});
    assert.equal(await within(p, 2000), "rejected", "the request waits for more of its body");
    await assert.rejects(p, /reset the stream/);
    gone.abort();
  },
);

originTest(
  "an origin that never answers the TLS handshake: connections opened ahead give their slots back",
  async (f, client) => {
    // Opened ahead at CONNECT, while the client sends its ClientHello.
    client.warm("api.github.com", 443);
    await f.until((e) => e.filter((x) => x.ev === "accepted").length === 1, "the warm-up");
    assert.equal(client.openConnections, 1);
    // Before: held for good (16 such origins, and nothing is opened ahead again).
    await sleep(600);
    assert.equal(client.openConnections, 0);
  },
  { stallTls: true },
  4,
  { warmTimeoutMs: 200 },
);

originTest(
  "an origin that never answers the TLS handshake: an HTTP/1.1 client's request fails after the time limit",
  async (f, client) => {
    // Nobody gives up on it: only the time limit ends the handshake.
    const p = client.request(originGet());
    p.catch(() => {});
    await f.until((e) => e.some((x) => x.ev === "accepted"), "the connection");
    // Before: it waited as long as the origin did (for ever).
    assert.equal(await within(p, 2000), "rejected");
    await assert.rejects(p, /TLS handshake with api\.github\.com:443 took longer than 200 ms/);
    await sleep(100);
    assert.equal(client.openConnections, 0);
  },
  { stallTls: true },
  4,
  { warmTimeoutMs: 200 },
);

originTest(
  "an origin that floods frames carrying nothing is cut off: its requests in flight get 502, the next goes to a new connection",
  async (f) => {
    const te: [string, string][] = [["te", "trailers"]];
    const r = await runH2(f, {
      steps: [
        { op: "headers", stream: 1, headers: request("/allowed/hang", "GET", te), end: true },
        { op: "sleep", ms: 300 },
        { op: "headers", stream: 3, headers: request("/allowed/flood", "GET", te), end: true },
        { op: "wait", streams: [1, 3] },
        { op: "headers", stream: 5, headers: request("/allowed/after", "GET", te), end: true },
        { op: "wait", streams: [5] },
      ],
    });
    assert.equal(r.error, null);
    // Before: forgekit answered all 5,000 frames and passed the flooder's 200 on.
    for (const id of [1, 3]) {
      assert.equal(stream(r, id).status, 502, `stream ${id}`);
      assert.equal(header(stream(r, id), "x-proxy-error"), "upstream-error");
    }
    assert.equal(stream(r, 5).status, 200);
    assert.equal(r.goaway, null, "the client's connection goes on");
    const flooded = f.requests().find((x) => x.path === "/allowed/flood")!.conn;
    assert.notEqual(f.requests().find((x) => x.path === "/allowed/after")!.conn, flooded);
    await until("the log lines", () => f.logs.length === 3);
    const failed = f.logs.filter((e) => e.status === 502);
    assert.equal(failed.length, 2);
    for (const e of failed) assert.match(e.reason!, /too many frames without responses or data/);
  },
);
