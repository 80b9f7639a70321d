/**
 * What a hostile or broken workload can make a bumped connection hold:
 * origin connections, memory and time. Each test attacks the firewall's
 * own proxy with a bump session (`support/bump.ts`), checks that what the
 * attack holds stays bounded, and that a normal request is still answered
 * meanwhile.
 */
import assert from "node:assert/strict";
import {
  type BumpFixture,
  type BumpFront,
  connectThrough,
  curl,
  startBumpFixture,
  startBumpFront,
} from "./support/bump.ts";
import { startTestProxy } from "./support/proxy.ts";
import { makeTestCa } from "./support/tls.ts";
import {
  Flag,
  frame,
  FRAME_HEADER,
  FrameType,
  PREFACE,
  rstStreamFrame,
  Setting,
  settingsFrame,
  windowUpdateFrame,
} from "../lib/bump/h2_frames.ts";
import { HpackEncoder } from "../lib/bump/hpack.ts";
import { MAX_WARMING } from "../lib/bump/origin_client.ts";
import { BlockedTally } from "../lib/bump/access_log.ts";
import { concat as concatBytes } from "../lib/bump/conn_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const ALLOW = ["https://api.github.com/allowed/**"];

/** Origin requests being answered now (their response not ended or given up). */
let answering = 0;
/** Ends every /allowed/endless response, so that a failed test does not hang the fixture's close. */
const endAll = new Set<() => void>();

/**
 * The origin: at /allowed/endless 1 MiB then nothing, never ending; at
 * /allowed/flood as much as is read, never ending; `origin <path>` elsewhere.
 */
function originHandler(req: Request): Response {
  const path = new URL(req.url).pathname;
  if (path === "/allowed/flood") {
    answering++;
    const chunk = new Uint8Array(64 * 1024);
    return new Response(
      new ReadableStream({
        pull: (c) => c.enqueue(chunk),
        cancel: () => void answering--,
      }),
    );
  }
  if (path === "/allowed/endless") {
    // 1 MiB at once, then nothing more, the response never ending.
    let sent = 0;
    let done = false;
    let stop = () => {};
    const stopped = new Promise<void>((r) => stop = r);
    endAll.add(stop);
    answering++;
    return new Response(
      new ReadableStream({
        pull: async (c) => {
          if (sent < 1 << 20) {
            sent += 64 * 1024;
            return c.enqueue(new Uint8Array(64 * 1024));
          }
          await stopped;
          if (!done) c.close();
        },
        cancel: () => {
          if (!done) answering--;
          done = true;
          stop();
        },
      }),
    );
  }
  return new Response(`origin ${path}\n`);
}

/** A bumped TLS connection through the front, with the given ALPN. */
async function bumped(f: BumpFront, alpn: string[]): Promise<Deno.TlsConn> {
  const raw = await connectThrough(f);
  const tls = await Deno.startTls(raw, {
    hostname: "api.github.com",
    caCerts: [await Deno.readTextFile(f.caCertPath)],
    alpnProtocols: alpn,
  });
  await tls.handshake();
  return tls;
}

/** Opens `count` GET streams on a new HTTP/2 connection whose client grants no window. */
async function stalledH2(f: BumpFixture, count: number, path: string): Promise<Deno.TlsConn> {
  const tls = await bumped(f, ["h2"]);
  const hpack = new HpackEncoder();
  const frames = [PREFACE, settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 0]])];
  for (let i = 0; i < count; i++) {
    const block = hpack.encode([
      [":method", "GET"],
      [":scheme", "https"],
      [":authority", "api.github.com"],
      [":path", path],
    ]);
    frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 2 * i + 1, block));
  }
  for (const b of frames) await tls.write(b);
  return tls;
}

/** Waits until `cond` holds, or `ms` passed; whether it held. */
async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/** A normal request's time through the front (curl, HTTP/1.1). */
async function normalRequest(f: BumpFixture): Promise<number> {
  const t = performance.now();
  const r = await curl(f, ["--max-time", "10", "https://api.github.com/allowed/ok"]);
  assert.equal(r.out, "origin /allowed/ok\n");
  return performance.now() - t;
}

/** The frames a connection receives within `ms` (or until it closes). */
async function readFrames(
  conn: Deno.Conn,
  ms: number,
): Promise<{ type: number; stream: number }[]> {
  const bytes = await readBytes(conn, ms);
  const frames = [];
  for (let at = 0; at + FRAME_HEADER <= bytes.byteLength;) {
    const length = (bytes[at] << 16) | (bytes[at + 1] << 8) | bytes[at + 2];
    const stream = ((bytes[at + 5] & 0x7f) << 24 | bytes[at + 6] << 16 | bytes[at + 7] << 8 |
      bytes[at + 8]) >>> 0;
    frames.push({ type: bytes[at + 3], stream });
    at += FRAME_HEADER + length;
  }
  return frames;
}

/** What a connection receives within `ms` (or until it closes). */
async function readBytes(conn: Deno.Conn, ms: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const buf = new Uint8Array(64 * 1024);
  const timer = setTimeout(() => {
    try {
      conn.close();
    } catch { /* closed */ }
  }, ms);
  try {
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      parts.push(buf.slice(0, n));
    }
  } catch { /* closed by the timer */ }
  clearTimeout(timer);
  return concatBytes(parts);
}

async function readAll(conn: Deno.Conn, ms: number): Promise<string> {
  return dec.decode(await readBytes(conn, ms));
}

function closeAll(conns: Deno.Conn[]) {
  for (const c of conns) {
    try {
      c.close();
    } catch { /* closed */ }
  }
}

/** A bump fixture whose limits are small enough to reach in a test. */
async function fixture(
  options: { stallTimeoutMs?: number; maxOriginConnections?: number } = {},
): Promise<BumpFixture> {
  answering = 0;
  const f = await startBumpFixture(ALLOW, originHandler, options);
  return {
    ...f,
    close() {
      for (const end of endAll) end();
      endAll.clear();
      return f.close();
    },
  };
}

Deno.test("HTTP/2 streams that never read their responses hold at most maxOriginConnections origin connections", async () => {
  const f = await fixture({ maxOriginConnections: 40 });
  const conns: Deno.Conn[] = [];
  try {
    // 300 streams on 3 connections, none of which will ever take a byte.
    for (let i = 0; i < 3; i++) conns.push(await stalledH2(f, 100, "/allowed/endless"));
    await until(() => answering >= 40, 5000);
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(answering, 40, "origin requests held at once");
    // The attack's waiting streams go with their connections: the slots are free again.
    closeAll(conns.splice(0));
    assert(await until(() => answering === 0, 5000), `still answering ${answering}`);
    assert((await normalRequest(f)) < 3000);
  } finally {
    closeAll(conns);
    await f.close();
  }
});

Deno.test("an HTTP/2 stream whose client opens no window is reset after the stall timeout", async () => {
  const f = await fixture({ stallTimeoutMs: 1500 });
  const conns: Deno.Conn[] = [];
  try {
    conns.push(await stalledH2(f, 20, "/allowed/endless"));
    assert(await until(() => answering === 20, 5000), `answering ${answering}`);
    // Meanwhile a normal request is served at once.
    assert((await normalRequest(f)) < 1000);
    // The streams are given up, and their origin connections closed, though the client stays.
    assert(await until(() => answering === 0, 5000), `still answering ${answering}`);
    const got = await readFrames(conns[0] as Deno.TlsConn, 500);
    assert.equal(got.filter((t) => t.type === FrameType.RST_STREAM).length, 20);
  } finally {
    closeAll(conns);
    await f.close();
  }
});

Deno.test("an HTTP/1.1 client that never reads a large response is closed after the stall timeout", async () => {
  const f = await fixture({ stallTimeoutMs: 1500 });
  const conns: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 5; i++) {
      const tls = await bumped(f, ["http/1.1"]);
      await tls.write(enc.encode(
        "GET /allowed/flood HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
      ));
      conns.push(tls);
    }
    assert(await until(() => answering === 5, 5000), `answering ${answering}`);
    assert((await normalRequest(f)) < 1000);
    assert(await until(() => answering === 0, 6000), `still answering ${answering}`);
  } finally {
    closeAll(conns);
    await f.close();
  }
});

Deno.test("a response from a silent origin is given up once its HTTP/1.1 client has gone", async () => {
  const f = await fixture();
  try {
    for (let i = 0; i < 5; i++) {
      const tls = await bumped(f, ["http/1.1"]);
      await tls.write(enc.encode(
        "GET /allowed/endless HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
      ));
      await readBytes(tls, 300); // some of it, then the client closes
    }
    assert(await until(() => answering === 0, 3000), `still answering ${answering}`);
  } finally {
    await f.close();
  }
});

Deno.test("a response from a silent origin is given up once its HTTP/2 stream is reset", async () => {
  const f = await fixture();
  const conns: Deno.Conn[] = [];
  try {
    const tls = await stalledH2(f, 10, "/allowed/endless");
    conns.push(tls);
    // The client opens its windows, takes the MiB each stream has, then resets them all.
    const frames = [windowUpdateFrame(0, 100 << 20)];
    for (let i = 0; i < 10; i++) frames.push(windowUpdateFrame(2 * i + 1, 2 << 20));
    await tls.write(concatBytes(frames));
    assert(await until(() => answering === 10, 5000), `answering ${answering}`);
    const reading = readBytes(tls, 1500);
    await new Promise((r) => setTimeout(r, 1000));
    const resets = [];
    for (let i = 0; i < 10; i++) resets.push(rstStreamFrame(2 * i + 1, 8));
    await tls.write(concatBytes(resets));
    assert(await until(() => answering === 0, 3000), `still answering ${answering}`);
    await reading;
  } finally {
    closeAll(conns);
    await f.close();
  }
});

/** The access-log lines of requests that failed for their request body. */
function bodyFailures(f: BumpFixture): string[] {
  return f.logs.filter((e) => e.reason?.startsWith("bad request body")).map((e) => e.reason!);
}

Deno.test("an HTTP/1.1 request body that stops coming is given up after the stall timeout", async () => {
  const f = await fixture({ stallTimeoutMs: 1500 });
  const conns: Deno.Conn[] = [];
  try {
    const tls = await bumped(f, ["http/1.1"]);
    conns.push(tls);
    await tls.write(enc.encode(
      "POST /allowed/upload HTTP/1.1\r\nHost: api.github.com\r\n" +
        "Content-Length: 1000000\r\n\r\nsome of it",
    ));
    assert(await until(() => bodyFailures(f).length === 1, 6000), "the request was not given up");
    assert.match(bodyFailures(f)[0], /no request body bytes for 1500 ms/);
    const answer = await readAll(tls, 2000);
    assert.match(answer, /^HTTP\/1\.1 400 /);
  } finally {
    closeAll(conns);
    await f.close();
  }
});

Deno.test("an HTTP/2 request body that stops coming is given up after the stall timeout", async () => {
  const f = await fixture({ stallTimeoutMs: 1500 });
  const conns: Deno.Conn[] = [];
  try {
    const tls = await bumped(f, ["h2"]);
    conns.push(tls);
    const block = new HpackEncoder().encode([
      [":method", "POST"],
      [":scheme", "https"],
      [":authority", "api.github.com"],
      [":path", "/allowed/upload"],
      ["content-length", "1000000"],
    ]);
    await tls.write(concatBytes([
      PREFACE,
      settingsFrame([]),
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, block),
      frame(FrameType.DATA, 0, 1, enc.encode("some of it")),
    ]));
    assert(await until(() => bodyFailures(f).length === 1, 6000), "the request was not given up");
    assert.match(bodyFailures(f)[0], /no request body bytes for 1500 ms/);
  } finally {
    closeAll(conns);
    await f.close();
  }
});

/** An upstream proxy that takes connections and never answers: each dial through it stays pending. */
function hangingProxy(): { url: string; held: Deno.Conn[]; close(): void } {
  const hang = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  (async () => {
    for await (const c of hang) held.push(c);
  })().catch(() => {});
  return {
    url: `http://127.0.0.1:${hang.addr.port}`,
    held,
    close() {
      hang.close();
      closeAll(held);
    },
  };
}

Deno.test("CONNECTs to many hosts that never send a ClientHello open few origin connections", async () => {
  const hang = hangingProxy();
  const f = await startBumpFront({
    allowUrls: ALLOW,
    upstreamCaCerts: [],
    upstreamProxy: hang.url,
  });
  const conns: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 200; i++) {
      conns.push(await connectThrough(f as BumpFixture, `h${i}.github.com`));
    }
    await new Promise((r) => setTimeout(r, 1000));
    assert(hang.held.length <= MAX_WARMING, `${hang.held.length} origin connections opened`);
  } finally {
    closeAll(conns);
    hang.close();
    await f.close();
  }
});

Deno.test("a WebSocket handshake waiting for the origin connection opened at CONNECT ends once its client has gone", async () => {
  // The connection opened ahead stays pending (for up to the upstream proxy's 30 s), and the
  // request waits for it.
  const hang = hangingProxy();
  const f = await startBumpFront({
    allowUrls: ALLOW,
    upstreamCaCerts: [],
    upstreamProxy: hang.url,
  });
  try {
    const tls = await bumped(f, ["http/1.1"]);
    // A WebSocket handshake: it goes over HTTP/1.1 whatever the connection opened ahead says.
    await tls.write(enc.encode(
      "GET /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nConnection: Upgrade\r\n" +
        "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    ));
    await new Promise((r) => setTimeout(r, 300));
    tls.close();
    assert(
      await until(() => f.logs.some((e) => e.url === "https://api.github.com/allowed/x"), 3000),
      "the request was not given up when its client went away",
    );
    assert.equal(f.logs.at(-1)?.reason, "cancelled by the client");
  } finally {
    hang.close();
    await f.close();
  }
});

Deno.test("the end-of-run summary keeps a bounded number of blocked hosts", () => {
  const tally = new BlockedTally();
  for (let i = 0; i < 50_000; i++) {
    tally.add({
      time: "",
      method: "CONNECT",
      scheme: "https",
      host: `h${i}.evil.example`,
      port: 443,
      url: i % 2 ? `https://h${i}.evil.example/${"x".repeat(1000)}` : null,
      decision: "blocked",
      rule: i % 2 ? "url-policy:no-match" : "no-rule",
      status: 403,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: 0,
    });
  }
  const summary = tally.summary(["github.com"])!;
  assert(summary.length < 1 << 20, `summary of ${summary.length} characters`);
  assert.match(summary, /… and 49000 more blocked requests to other hosts/);
});

Deno.test("an HTTP/1.1 upload to an origin that reads nothing holds the client back, not the proxy's memory", async () => {
  // An origin that takes connections and never reads from them.
  const ca = await makeTestCa("silent origin CA");
  const leaf = await ca.issue(["api.github.com"]);
  const origin = Deno.listenTls({ hostname: "127.0.0.1", port: 0, cert: leaf.cert, key: leaf.key });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const c of origin) held.push(c);
  })();
  const proxy = startTestProxy();
  proxy.route("api.github.com:443", (origin.addr as Deno.NetAddr).port);
  const f = await startBumpFront({
    allowUrls: ALLOW,
    upstreamCaCerts: [ca.cert],
    upstreamProxy: proxy.url,
  });
  const conns: Deno.Conn[] = [];
  try {
    const tls = await bumped(f, ["http/1.1"]);
    conns.push(tls);
    await tls.write(enc.encode(
      "POST /allowed/upload HTTP/1.1\r\nHost: api.github.com\r\n" +
        "Content-Length: 100000000000\r\n\r\n",
    ));
    // Deno's node:tls server socket reads on while paused: without stopping
    // the TCP handle's reads the proxy took in about 300 MB a second here.
    const chunk = new Uint8Array(1 << 20);
    let sent = 0;
    const until = performance.now() + 2000;
    const writing = (async () => {
      while (performance.now() < until) sent += await tls.write(chunk);
    })().catch(() => {});
    await Promise.race([writing, new Promise((r) => setTimeout(r, 2500))]);
    assert.ok(sent < 64 * 2 ** 20, `the proxy took ${(sent / 2 ** 20).toFixed(0)} MiB in 2 s`);
  } finally {
    closeAll(conns);
    await f.close();
    closeAll(held);
    origin.close();
    await accepting;
    await proxy.close();
  }
});
