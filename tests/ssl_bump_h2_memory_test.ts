/**
 * How much request body an HTTP/2 client can make a bumped connection hold
 * (`lib/bump/h2_server.ts`). The connection's receive window is given back
 * only as bodies are read or let go, so the unread bytes of all its streams
 * stay under one cap however many streams the client opens; padding, frames
 * dropped on reset streams and the unread body of a stream reset or answered
 * without it give their window back; a single upload still runs within its
 * own stream window, never waiting on the connection's.
 *
 * The client here is written frame by frame and keeps to the windows the
 * server grants, so what it managed to send is what the proxy let it send.
 */
import assert from "node:assert/strict";
import { type BumpFixture, connectThrough, curl, startBumpFixture } from "./support/bump.ts";
import {
  DEFAULT_WINDOW,
  Flag,
  frame,
  FRAME_HEADER,
  FrameType,
  MIN_FRAME_SIZE,
  parseSettings,
  PREFACE,
  rstStreamFrame,
  Setting,
  settingsFrame,
  windowUpdateFrame,
} from "../lib/bump/h2_frames.ts";
import { HpackDecoder, HpackEncoder } from "../lib/bump/hpack.ts";
import { concat } from "../lib/bump/conn_io.ts";

/** The most request body one connection holds unread (README, "How it works" item 8). */
const HELD_MAX = 2 * 1024 * 1024;
/** Each stream's receive window (the server's SETTINGS_INITIAL_WINDOW_SIZE). */
const STREAM_WINDOW = 256 * 1024;
const CANCEL = 0x8;

const dec = new TextDecoder();

/** Requests held at the origin until the test ends (their origin connection stays busy). */
const held = new Set<() => void>();

/**
 * The origin: /allowed/wait answers once the test ends; /allowed/upload
 * reads the body and answers its length and SHA-256.
 */
async function originHandler(req: Request): Promise<Response> {
  const path = new URL(req.url).pathname;
  if (path === "/allowed/wait") {
    await new Promise<void>((resolve) => {
      held.add(resolve);
      req.signal.addEventListener("abort", () => resolve());
    });
    return new Response("waited\n");
  }
  if (path === "/allowed/upload") {
    // A body the proxy gave up on (the test ended) reads as far as it came.
    const body = new Uint8Array(await req.arrayBuffer().catch(() => new ArrayBuffer(0)));
    return Response.json({ length: body.byteLength, sha256: await sha256(body) });
  }
  return new Response(`origin ${path}\n`);
}

/**
 * A test with its own front. With one origin connection, held by a
 * request that waits, every upload after it waits for that connection:
 * its body is held by the proxy, unread.
 */
function memoryTest(
  name: string,
  fn: (f: BumpFixture) => Promise<void>,
  maxOriginConnections = 1,
): void {
  Deno.test(name, async () => {
    const f = await startBumpFixture(["https://api.github.com/allowed/**"], originHandler, {
      maxOriginConnections,
    });
    try {
      await fn(f);
    } finally {
      for (const release of held) release();
      held.clear();
      await f.close();
    }
  });
}

/** One stream as the client sees it. */
interface ClientStream {
  /** What the server still lets the client send on it. */
  window: number;
  /** Body bytes sent on it (padding not counted). */
  sent: number;
  status: number | null;
  body: Uint8Array[];
  ended: boolean;
  /** The RST_STREAM code the server sent. */
  reset: number | null;
}

/**
 * An HTTP/2 client on a bumped connection that keeps to the server's
 * flow-control windows, frame by frame, and counts what it could send.
 */
class WindowedClient {
  readonly #tls: Deno.TlsConn;
  #writing: Promise<unknown> = Promise.resolve();
  readonly #hpack = new HpackEncoder();
  readonly #hpackIn = new HpackDecoder();
  #initial = DEFAULT_WINDOW;
  #settled = false;
  #wake: (() => void) | null = null;
  readonly #reading: Promise<void>;
  /** What the server still lets the client send on the connection. */
  connWindow = DEFAULT_WINDOW;
  readonly streams = new Map<number, ClientStream>();
  goaway: { code: number; debug: string } | null = null;
  closed = false;
  /** Times an upload had window on its stream but none on the connection. */
  connBlocked = 0;

  private constructor(tls: Deno.TlsConn) {
    this.#tls = tls;
    this.#reading = this.#read();
  }

  /** Connects through the front (CONNECT, TLS with ALPN h2) and exchanges SETTINGS. */
  static async open(f: BumpFixture): Promise<WindowedClient> {
    const raw = await connectThrough(f);
    const tls = await Deno.startTls(raw, {
      hostname: "api.github.com",
      caCerts: [await Deno.readTextFile(f.caCertPath)],
      alpnProtocols: ["h2"],
    });
    const client = new WindowedClient(tls);
    // Responses are small: the client's own windows never hold the server back.
    client.#write(concat([
      PREFACE,
      settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 1 << 20]]),
      windowUpdateFrame(0, 1 << 30),
    ]));
    if (!await client.until(() => client.#settled, 5000)) {
      throw new Error("The server sent no SETTINGS");
    }
    return client;
  }

  /** Opens a stream: HEADERS for `path` (a body follows unless it is a GET). */
  request(id: number, path: string, method = "POST", extra: [string, string][] = []): void {
    const block = this.#hpack.encode([
      [":method", method],
      [":scheme", "https"],
      [":authority", "api.github.com"],
      [":path", path],
      ...extra,
    ]);
    const end = method === "GET" ? Flag.END_STREAM : 0;
    this.streams.set(id, {
      window: this.#initial,
      sent: 0,
      status: null,
      body: [],
      ended: false,
      reset: null,
    });
    this.#write(frame(FrameType.HEADERS, Flag.END_HEADERS | end, id, block));
  }

  /**
   * Sends body bytes on each stream in turn, as much as the windows allow,
   * until neither the streams nor the connection have window left and none
   * has come for `quietMs`. The body bytes sent.
   */
  async fill(ids: number[], quietMs = 500): Promise<number> {
    let total = 0;
    for (const id of ids) {
      const s = this.#stream(id);
      for (;;) {
        const n = Math.min(s.window, this.connWindow, MIN_FRAME_SIZE);
        if (n > 0) {
          await this.#data(id, n);
          total += n;
          continue;
        }
        if (s.window <= 0 || this.closed) break;
        // The connection's window is shut: wait for it to reopen.
        const window = this.connWindow;
        if (!await this.until(() => this.connWindow !== window || this.closed, quietMs)) {
          return total;
        }
      }
    }
    return total;
  }

  /**
   * Sends `body` on a stream and ends it, within the windows; a wait of
   * 10 s for window is an error.
   */
  async upload(id: number, body: Uint8Array): Promise<void> {
    const s = this.#stream(id);
    let at = 0;
    while (at < body.byteLength) {
      const n = Math.min(s.window, this.connWindow, body.byteLength - at);
      if (n > 0) {
        // Several frames in one write.
        const parts: Uint8Array[] = [];
        for (let o = 0; o < n; o += MIN_FRAME_SIZE) {
          const part = body.subarray(at + o, at + Math.min(n, o + MIN_FRAME_SIZE));
          const last = at + o + part.byteLength === body.byteLength;
          parts.push(frame(FrameType.DATA, last ? Flag.END_STREAM : 0, id, part));
        }
        s.window -= n;
        this.connWindow -= n;
        s.sent += n;
        at += n;
        await this.#write(concat(parts));
        continue;
      }
      if (this.closed || s.reset !== null) throw new Error(`Stream ${id} ended after ${at} bytes`);
      if (s.window > 0) this.connBlocked++;
      const [sw, cw] = [s.window, this.connWindow];
      if (
        !await this.until(() => s.window !== sw || this.connWindow !== cw || this.closed, 10000)
      ) {
        throw new Error(`Upload on stream ${id} stalled after ${at} bytes: no WINDOW_UPDATE`);
      }
    }
  }

  /**
   * Sends `count` DATA frames of `data` body bytes and 255 bytes of padding
   * each (with the pad length, 256 bytes that hold nothing), within the
   * windows. The flow-controlled bytes sent.
   */
  async padded(id: number, count: number, data: number): Promise<number> {
    const s = this.#stream(id);
    const payload = new Uint8Array(1 + data + 255);
    payload[0] = 255;
    const one = frame(FrameType.DATA, Flag.PADDED, id, payload);
    for (let left = count; left > 0;) {
      const fit = Math.min(
        left,
        Math.floor(Math.min(s.window, this.connWindow) / payload.byteLength),
      );
      if (fit === 0) {
        const [sw, cw] = [s.window, this.connWindow];
        if (!await this.until(() => s.window !== sw || this.connWindow !== cw, 10000)) {
          throw new Error(`Padded frames on stream ${id} stalled, ${left} left: no WINDOW_UPDATE`);
        }
        continue;
      }
      s.window -= fit * payload.byteLength;
      this.connWindow -= fit * payload.byteLength;
      s.sent += fit * data;
      left -= fit;
      await this.#write(concat(Array(fit).fill(one)));
    }
    return count * payload.byteLength;
  }

  /** One DATA frame of `n` bytes (window permitting: the caller checks). */
  async #data(id: number, n: number): Promise<void> {
    const s = this.#stream(id);
    s.window -= n;
    this.connWindow -= n;
    s.sent += n;
    await this.#write(frame(FrameType.DATA, 0, id, new Uint8Array(n)));
  }

  /** DATA frames on a stream the server may have reset meanwhile (so not window-checked). */
  async dataAnyway(id: number, frames: number): Promise<void> {
    for (let i = 0; i < frames; i++) await this.#data(id, MIN_FRAME_SIZE);
  }

  reset(id: number, code = CANCEL): Promise<unknown> {
    return this.#write(rstStreamFrame(id, code));
  }

  /** Waits at most `ms` until `cond` holds (checked as frames come, and every 20 ms). */
  async until(cond: () => boolean, ms: number): Promise<boolean> {
    const end = performance.now() + ms;
    while (!cond()) {
      const left = end - performance.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 20));
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return true;
  }

  /** The response body of a stream, as text. */
  text(id: number): string {
    return dec.decode(concat(this.#stream(id).body));
  }

  async close(): Promise<void> {
    try {
      this.#tls.close();
    } catch {
      // already closed
    }
    await this.#reading;
  }

  #stream(id: number): ClientStream {
    const s = this.streams.get(id);
    if (!s) throw new Error(`No stream ${id}`);
    return s;
  }

  #write(bytes: Uint8Array): Promise<unknown> {
    this.#writing = this.#writing.then(async () => {
      for (let at = 0; at < bytes.byteLength;) at += await this.#tls.write(bytes.subarray(at));
    }).catch(() => this.closed = true);
    return this.#writing;
  }

  async #read(): Promise<void> {
    const chunk = new Uint8Array(64 * 1024);
    let buf: Uint8Array = new Uint8Array(0);
    try {
      for (;;) {
        const n = await this.#tls.read(chunk);
        if (n === null) break;
        buf = concat([buf, chunk.subarray(0, n)]);
        let at = 0;
        while (buf.byteLength - at >= FRAME_HEADER) {
          const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
          if (buf.byteLength - at < FRAME_HEADER + length) break;
          const payload = buf.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length);
          this.#onFrame(buf[at + 3], buf[at + 4], u31(buf, at + 5), payload);
          at += FRAME_HEADER + length;
        }
        buf = buf.slice(at);
        this.#notify();
      }
    } catch {
      // The connection failed: it is closed.
    } finally {
      this.closed = true;
      this.#notify();
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  #onFrame(type: number, flags: number, id: number, payload: Uint8Array): void {
    const s = this.streams.get(id);
    switch (type) {
      case FrameType.SETTINGS:
        if (flags & Flag.ACK) return;
        for (const [key, value] of parseSettings(payload)) {
          if (key !== Setting.INITIAL_WINDOW_SIZE) continue;
          for (const open of this.streams.values()) open.window += value - this.#initial;
          this.#initial = value;
        }
        this.#settled = true;
        this.#write(frame(FrameType.SETTINGS, Flag.ACK, 0));
        return;
      case FrameType.WINDOW_UPDATE:
        if (id === 0) this.connWindow += u31(payload, 0);
        else if (s) s.window += u31(payload, 0);
        return;
      case FrameType.RST_STREAM:
        if (s) s.reset = u31(payload, 0);
        return;
      case FrameType.GOAWAY:
        this.goaway = { code: u31(payload, 4), debug: dec.decode(payload.subarray(8)) };
        return;
      case FrameType.HEADERS: {
        const fields = this.#hpackIn.decode(payload).fields ?? [];
        const status = fields.find(([k]) => k === ":status")?.[1];
        if (s && status && Number(status) >= 200) s.status = Number(status);
        if (s && flags & Flag.END_STREAM) s.ended = true;
        return;
      }
      case FrameType.DATA:
        if (s) s.body.push(payload.slice());
        if (s && flags & Flag.END_STREAM) s.ended = true;
        return;
    }
  }
}

function u31(bytes: Uint8Array, at: number): number {
  return ((bytes[at] & 0x7f) << 24 | bytes[at + 1] << 16 | bytes[at + 2] << 8 | bytes[at + 3]) >>>
    0;
}

async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as BufferSource);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Stream ids `first`, `first + 2`, ... (`count` of them). */
function ids(first: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => first + 2 * i);
}

/** Opens a client whose stream 1 holds the front's only origin connection. */
async function holdOrigin(f: BumpFixture): Promise<WindowedClient> {
  const c = await WindowedClient.open(f);
  c.request(1, "/allowed/wait", "GET");
  assert.ok(
    await c.until(() => f.originPaths().includes("/allowed/wait"), 5000),
    "the origin got /allowed/wait",
  );
  return c;
}

const MiB = (n: number) => `${(n / 2 ** 20).toFixed(2)} MiB`;

memoryTest(
  "h2: the request bodies one connection holds unread stay within 2 MiB, however many streams the client opens",
  async (f) => {
    const c = await holdOrigin(f);
    try {
      // 99 uploads wait for the origin connection: nothing reads their bodies.
      // Each stream's window alone would let the client park 99 × 256 KiB.
      const uploads = ids(3, 99);
      for (const id of uploads) c.request(id, "/allowed/upload");
      const sent = await c.fill(uploads);
      assert.ok(sent <= HELD_MAX, `the client sent ${MiB(sent)} of bodies nothing reads`);
      // The connection's window, not some other limit, stopped it.
      assert.equal(sent, HELD_MAX);
      assert.equal(c.goaway, null);
      assert.deepEqual(uploads.filter((id) => c.streams.get(id)!.reset !== null), []);
    } finally {
      await c.close();
    }
  },
);

memoryTest(
  "h2: a reset stream's unread body is given back to the connection window",
  async (f) => {
    const c = await holdOrigin(f);
    try {
      const uploads = ids(3, 20);
      for (const id of uploads) c.request(id, "/allowed/upload");
      // Eight streams' windows fill the connection's.
      assert.equal(await c.fill(uploads), HELD_MAX);
      const full = uploads.filter((id) => c.streams.get(id)!.sent === STREAM_WINDOW);
      assert.equal(full.length, HELD_MAX / STREAM_WINDOW);
      // The client gives two of them up: their 512 KiB are let go.
      await c.reset(full[0]);
      await c.reset(full[1]);
      assert.ok(
        await c.until(() => c.connWindow >= 2 * STREAM_WINDOW, 5000),
        `the connection window stayed at ${c.connWindow} after the resets`,
      );
      const rest = uploads.filter((id) => !full.includes(id));
      assert.equal(await c.fill(rest), 2 * STREAM_WINDOW);
      assert.equal(c.goaway, null);
    } finally {
      await c.close();
    }
  },
);

memoryTest(
  "h2: padding and DATA dropped on a reset stream take none of the connection window for good",
  async (f) => {
    const c = await holdOrigin(f);
    try {
      // 4 MiB of DATA frames on a body nothing reads, 1 body byte each, the
      // rest padding: only the body bytes are held. Twice the connection's window
      // goes through, so the padding's share came back.
      c.request(3, "/allowed/upload");
      const frames = 16 * 1024;
      assert.equal(await c.padded(3, frames, 1), frames * 257);
      // A body longer than its content-length: the server resets the stream
      // at the first frame, and drops the frames already in flight after it.
      c.request(5, "/allowed/upload", "POST", [["content-length", "10"]]);
      await c.dataAnyway(5, 8);
      assert.ok(await c.until(() => c.streams.get(5)!.reset !== null, 5000), "stream 5 reset");
      // What is held is the padded stream's body bytes; the rest of the
      // window is the client's again.
      const uploads = ids(7, 20);
      for (const id of uploads) c.request(id, "/allowed/upload");
      assert.equal(await c.fill(uploads), HELD_MAX - frames);
      assert.equal(c.goaway, null);
    } finally {
      await c.close();
    }
  },
);

memoryTest(
  "h2: the bodies of requests answered without being read take none of the connection window for good",
  async (f) => {
    const c = await holdOrigin(f);
    try {
      // Blocked by the URL policy (403) and malformed (400): neither body is
      // read, and each stream's whole window of it is sent.
      c.request(3, "/blocked/upload");
      c.request(5, "/allowed/upload", "POST", [["te", "gzip"]]);
      for (const id of [3, 5]) await c.dataAnyway(id, STREAM_WINDOW / MIN_FRAME_SIZE);
      assert.ok(
        await c.until(() => c.streams.get(3)!.ended && c.streams.get(5)!.ended, 5000),
        "both answered",
      );
      assert.deepEqual([c.streams.get(3)!.status, c.streams.get(5)!.status], [403, 400]);
      const uploads = ids(7, 20);
      for (const id of uploads) c.request(id, "/allowed/upload");
      assert.equal(await c.fill(uploads), HELD_MAX);
      assert.equal(c.goaway, null);
    } finally {
      await c.close();
    }
  },
);

memoryTest(
  "h2: one 32 MiB upload completes without ever waiting on the connection window",
  async (f) => {
    const body = crypto.getRandomValues(new Uint8Array(64 * 1024));
    const big = new Uint8Array(32 << 20);
    for (let at = 0; at < big.byteLength; at += body.byteLength) big.set(body, at);
    big[12345] ^= 1;
    const c = await WindowedClient.open(f);
    try {
      c.request(1, "/allowed/upload", "POST", [["content-length", String(big.byteLength)]]);
      await c.upload(1, big);
      assert.ok(await c.until(() => c.streams.get(1)!.ended, 30000), "the response ended");
      assert.equal(c.streams.get(1)!.status, 200);
      assert.deepEqual(JSON.parse(c.text(1)), {
        length: big.byteLength,
        sha256: await sha256(big),
      });
      // Only its own stream window paced it: the connection's was always open.
      assert.equal(c.connBlocked, 0);
    } finally {
      await c.close();
    }
    // curl, a real client, sends the same upload over HTTP/2 and HTTP/1.1 alike.
    const file = await Deno.makeTempFile();
    try {
      await Deno.writeFile(file, big);
      const want = JSON.stringify({ length: big.byteLength, sha256: await sha256(big) });
      for (const v of ["--http2", "--http1.1"]) {
        const r = await curl(f, [
          v,
          "-m",
          "60",
          "--data-binary",
          `@${file}`,
          "https://api.github.com/allowed/upload",
        ]);
        assert.equal(r.out, want, v);
      }
    } finally {
      await Deno.remove(file);
    }
  },
);

memoryTest(
  "h2: an upload that is being read goes on while other streams hold part of the window",
  async (f) => {
    const c = await holdOrigin(f);
    try {
      // The second origin connection takes stream 3's upload; the six after it
      // wait, and hold 1.5 MiB of the 2 MiB meanwhile.
      c.request(3, "/allowed/upload", "POST", [["content-length", String(8 << 20)]]);
      assert.ok(
        await c.until(() => f.originPaths().includes("/allowed/upload"), 5000),
        "the origin got stream 3's request",
      );
      const waiting = ids(5, 6);
      for (const id of waiting) c.request(id, "/allowed/upload");
      assert.equal(await c.fill(waiting), 6 * STREAM_WINDOW);
      const body = crypto.getRandomValues(new Uint8Array(64 * 1024));
      const upload = new Uint8Array(8 << 20);
      for (let at = 0; at < upload.byteLength; at += body.byteLength) upload.set(body, at);
      await c.upload(3, upload);
      assert.ok(await c.until(() => c.streams.get(3)!.ended, 30000), "the response ended");
      assert.deepEqual(JSON.parse(c.text(3)), {
        length: upload.byteLength,
        sha256: await sha256(upload),
      });
      assert.equal(c.goaway, null);
    } finally {
      await c.close();
    }
  },
  2,
);
