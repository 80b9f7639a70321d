import assert from "node:assert/strict";
import {
  H2ClientSession,
  requestFields,
  type ResponseHead,
  type Retry,
  type SessionOptions,
  type StreamEvents,
  UNSENT_LIMIT,
} from "./h2_client_session.ts";
import {
  ErrorCode,
  Flag,
  frame,
  FRAME_HEADER,
  FrameType,
  goawayFrame,
  H2ConnectionError,
  headerFrames,
  PREFACE,
  rstStreamFrame,
  Setting,
  settingsFrame,
  u31,
  windowUpdateFrame,
} from "./h2_frames.ts";
import { HpackDecoder, HpackEncoder } from "./hpack.ts";
import { concat } from "./conn_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const hpack = new HpackEncoder();

type Fields = [string, string][];

/** What a stream was told, in order. */
class Recorder implements StreamEvents {
  log: string[] = [];
  head: ResponseHead | null = null;
  body = "";
  trailers: Fields | null = null;
  error: Error | null = null;
  retry: Retry = null;
  windows = 0;
  response(head: ResponseHead): void {
    this.head = head;
    this.log.push(`head ${head.status}`);
  }
  data(bytes: Uint8Array): void {
    this.body += dec.decode(bytes);
    this.log.push(`data ${bytes.byteLength}`);
  }
  end(trailers: Fields | null): void {
    this.trailers = trailers;
    this.log.push("end");
  }
  fail(error: Error, retry: Retry): void {
    this.error = error;
    this.retry = retry;
    this.log.push("fail");
  }
  window(): void {
    this.windows++;
  }
}

interface Frame {
  type: number;
  flags: number;
  id: number;
  payload: Uint8Array;
}

/** The frames in what the session wrote (after the preface, when it is there). */
function framesOf(bytes: Uint8Array | null): Frame[] {
  if (bytes === null) return [];
  let at = bytes.byteLength >= PREFACE.byteLength &&
      PREFACE.every((b, i) => bytes[i] === b)
    ? PREFACE.byteLength
    : 0;
  const out: Frame[] = [];
  while (at + FRAME_HEADER <= bytes.byteLength) {
    const length = (bytes[at] << 16) | (bytes[at + 1] << 8) | bytes[at + 2];
    out.push({
      type: bytes[at + 3],
      flags: bytes[at + 4],
      id: u31(bytes, at + 5),
      payload: bytes.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length),
    });
    at += FRAME_HEADER + length;
  }
  return out;
}

const u32 = (p: Uint8Array, at = 0) => new DataView(p.buffer, p.byteOffset).getUint32(at);

const GET: Fields = [[":method", "GET"], [":scheme", "https"], [":authority", "x"], [
  ":path",
  "/",
]];

const head = (id: number, fields: Fields, end = false) =>
  headerFrames(id, hpack.encode(fields), end, 16384);
const data = (id: number, text: string | number, end = false) =>
  frame(
    FrameType.DATA,
    end ? Flag.END_STREAM : 0,
    id,
    typeof text === "string" ? enc.encode(text) : new Uint8Array(text),
  );
const ok = (...extra: Fields): Fields => [[":status", "200"], ...extra];
/** A connection error that says the origin is flooding. */
const calm = (e: unknown) =>
  e instanceof H2ConnectionError && e.code === ErrorCode.ENHANCE_YOUR_CALM;

/** A session past the preface (the origin's SETTINGS read), its output so far taken. */
function session(options: SessionOptions = {}, settings: [number, number][] = []) {
  const s = new H2ClientSession(options);
  s.start();
  s.receive(settingsFrame(settings));
  s.takeOutput();
  return s;
}

/** Opens a stream recording its events. */
function open(s: H2ClientSession, end = true, method = "GET") {
  const r = new Recorder();
  const id = s.open(GET, end, r, method);
  return { id, r };
}

Deno.test("requestFields() puts the pseudo-fields first and keeps te: trailers only when asked", () => {
  const base = { method: "POST", authority: "api.example:8443", target: "/svc/M?x=1" };
  assert.deepEqual(requestFields({ ...base, headers: [["content-type", "a/b"]], te: true }), [
    [":method", "POST"],
    [":scheme", "https"],
    [":authority", "api.example:8443"],
    [":path", "/svc/M?x=1"],
    ["content-type", "a/b"],
    ["te", "trailers"],
  ]);
  assert.ok(!requestFields({ ...base, headers: [], te: false }).some(([k]) => k === "te"));
});

Deno.test("H2ClientSession starts with the preface, SETTINGS without push, and its connection window", () => {
  const s = new H2ClientSession();
  s.start();
  const out = s.takeOutput()!;
  assert.deepEqual(out.subarray(0, PREFACE.byteLength), PREFACE);
  const [settings, update] = framesOf(out);
  assert.equal(settings.type, FrameType.SETTINGS);
  const values = new Map<number, number>();
  for (let i = 0; i < settings.payload.byteLength; i += 6) {
    values.set(
      new DataView(settings.payload.buffer, settings.payload.byteOffset).getUint16(i),
      u32(settings.payload, i + 2),
    );
  }
  assert.equal(values.get(Setting.ENABLE_PUSH), 0);
  assert.equal(values.get(Setting.INITIAL_WINDOW_SIZE), 1024 * 1024);
  assert.equal(update.type, FrameType.WINDOW_UPDATE);
  assert.equal(update.id, 0);
  assert.equal(u32(update.payload), 4 * 1024 * 1024 - 65535);
});

Deno.test("a stream gets its head, body and trailers, then closes both ways", () => {
  const s = session();
  const { id, r } = open(s);
  assert.equal(id, 1);
  const sent = framesOf(s.takeOutput());
  assert.deepEqual(sent.map((f) => [f.type, f.flags, f.id]), [
    [FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1],
  ]);
  assert.deepEqual(new HpackDecoder().decode(sent[0].payload).fields, GET);
  s.receive(concat([
    head(1, [[":status", "103"], ["link", "</x>"]]),
    head(1, ok(["content-type", "application/grpc"])),
    data(1, "hello"),
    head(1, [["grpc-status", "0"], ["grpc-message", "fine"]], true),
  ]));
  assert.deepEqual(r.log, ["head 200", "data 5", "end"]);
  assert.deepEqual(r.head, {
    status: 200,
    headers: [["content-type", "application/grpc"]],
    length: null,
  });
  assert.equal(r.body, "hello");
  assert.deepEqual(r.trailers, [["grpc-status", "0"], ["grpc-message", "fine"]]);
  assert.equal(s.streams, 0);
  assert.equal(open(s).id, 3);
});

Deno.test("a request body ends with trailers or END_STREAM; the stream closes once both sides ended", () => {
  const s = session();
  const { id, r } = open(s, false, "POST");
  s.takeOutput();
  s.receive(head(id, ok(["content-length", "2"])));
  s.receive(data(id, "ok", true));
  assert.deepEqual(r.log, ["head 200", "data 2", "end"]);
  // The origin answered early: our side is still open.
  assert.equal(s.streams, 1);
  s.data(id, enc.encode("body"), false);
  s.trailers(id, [["x-sum", "1"]]);
  const frames = framesOf(s.takeOutput());
  assert.deepEqual(frames.map((f) => [f.type, f.flags]), [
    [FrameType.DATA, 0],
    [FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM],
  ]);
  assert.deepEqual(new HpackDecoder().decode(frames[1].payload).fields, [["x-sum", "1"]]);
  assert.equal(s.streams, 0);
  assert.equal(s.sendable(id), null);
});

Deno.test("a malformed response fails its own stream with RST_STREAM PROTOCOL_ERROR, not the connection", () => {
  const cases: [string, (id: number) => Uint8Array[], RegExp, string?][] = [
    ["upper-case name", (id) => [head(id, ok(["X-A", "1"]), true)], /invalid field name "X-A"/],
    [
      "connection field",
      (id) => [head(id, ok(["connection", "close"]), true)],
      /connection-specific/,
    ],
    ["no :status", (id) => [head(id, [["server", "x"]], true)], /missing or invalid :status/],
    ["101", (id) => [head(id, [[":status", "101"]], true)], /:status 101/],
    [
      "short body",
      (id) => [head(id, ok(["content-length", "10"])), data(id, "short", true)],
      /does not match its content-length/,
    ],
    [
      "long body",
      (id) => [head(id, ok(["content-length", "2"])), data(id, "toolong")],
      /more DATA than its content-length/,
    ],
    ["DATA first", (id) => [data(id, "x")], /DATA before the response head/],
    [
      "pseudo in trailers",
      (id) => [head(id, ok()), head(id, [[":status", "200"]], true)],
      /trailers: pseudo-field/,
    ],
    ["trailers open", (id) => [head(id, ok()), head(id, [["x", "1"]])], /without END_STREAM/],
    ["interim ends", (id) => [head(id, [[":status", "100"]], true)], /interim response ends/],
    [
      "HEAD with DATA",
      (id) => [head(id, ok(["content-length", "3"])), data(id, "abc", true)],
      /no content/,
      "HEAD",
    ],
    ["204 with DATA", (id) => [head(id, [[":status", "204"]]), data(id, "x", true)], /no content/],
  ];
  for (const [name, frames, why, method] of cases) {
    const s = session();
    const { id, r } = open(s, true, method ?? "GET");
    s.takeOutput();
    s.receive(concat(frames(id)));
    assert.ok(r.error, name);
    assert.match(r.error.message, /^malformed response: /, name);
    assert.match(r.error.message, why, name);
    assert.equal(r.retry, null, name);
    const out = framesOf(s.takeOutput());
    assert.deepEqual(
      out.map((f) => [f.type, f.id, u32(f.payload)]),
      [[FrameType.RST_STREAM, id, ErrorCode.PROTOCOL_ERROR]],
      name,
    );
    // Its later frames are dropped; the connection goes on.
    s.receive(data(id, "late", true));
    const next = open(s);
    s.receive(concat([head(next.id, ok(), true)]));
    assert.deepEqual(next.r.log, ["head 200", "end"], name);
  }
});

Deno.test("a HEAD response's content-length describes the resource, not DATA", () => {
  const s = session();
  const { id, r } = open(s, true, "HEAD");
  s.receive(head(id, ok(["content-length", "1234"]), true));
  assert.deepEqual(r.log, ["head 200", "end"]);
  assert.equal(r.head?.length, 1234);
});

Deno.test("connection errors in what the origin sends are thrown with their code", () => {
  const cases: [string, SessionOptions, (s: H2ClientSession) => Uint8Array, number][] = [
    [
      "PUSH_PROMISE",
      {},
      () => frame(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, new Uint8Array(4)),
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      "ENABLE_PUSH 1",
      {},
      () => settingsFrame([[Setting.ENABLE_PUSH, 1]]),
      ErrorCode.PROTOCOL_ERROR,
    ],
    ["DATA on an idle stream", {}, () => data(7, "x"), ErrorCode.PROTOCOL_ERROR],
    ["HEADERS on an even stream", {}, () => head(2, ok()), ErrorCode.PROTOCOL_ERROR],
    ["RST_STREAM on an idle stream", {}, () => rstStreamFrame(9, 0), ErrorCode.PROTOCOL_ERROR],
    [
      "oversized frame",
      {},
      () => frame(FrameType.DATA, 0, 1, new Uint8Array(16385)),
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      "PING of 7 bytes",
      {},
      () => frame(FrameType.PING, 0, 0, new Uint8Array(7)),
      ErrorCode.FRAME_SIZE_ERROR,
    ],
    [
      "connection window overrun",
      { connWindow: 65535, streamWindow: 1 << 20 },
      (s) => {
        const { id } = open(s);
        return concat([head(id, ok()), ...Array.from({ length: 5 }, () => data(id, 16384))]);
      },
      ErrorCode.FLOW_CONTROL_ERROR,
    ],
    [
      "connection send window overflow",
      {},
      () => windowUpdateFrame(0, 0x7fffffff),
      ErrorCode.FLOW_CONTROL_ERROR,
    ],
    [
      "stream window overflow through SETTINGS",
      {},
      (s) => {
        const { id } = open(s, false);
        s.receive(windowUpdateFrame(id, 0x7fffffff - 65535));
        return settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 70000]]);
      },
      ErrorCode.FLOW_CONTROL_ERROR,
    ],
    [
      "interrupted header block",
      {},
      (s) => {
        const { id } = open(s);
        const block = hpack.encode(ok());
        return concat([frame(FrameType.HEADERS, 0, id, block), data(id, "x")]);
      },
      ErrorCode.PROTOCOL_ERROR,
    ],
    [
      "DATA on a stream that ended",
      {},
      (s) => {
        const { id } = open(s);
        s.receive(head(id, ok(), true));
        return data(id, "late");
      },
      ErrorCode.STREAM_CLOSED,
    ],
  ];
  for (const [name, options, bytes, code] of cases) {
    const s = session(options);
    assert.throws(
      () => s.receive(bytes(s)),
      (e: unknown) => e instanceof H2ConnectionError && e.code === code,
      name,
    );
  }
});

Deno.test("the origin's first frame must be SETTINGS", () => {
  const s = new H2ClientSession();
  s.start();
  assert.throws(
    () => s.receive(frame(FrameType.PING, 0, 0, new Uint8Array(8))),
    (e: unknown) => e instanceof H2ConnectionError && e.code === ErrorCode.PROTOCOL_ERROR,
  );
});

Deno.test("SETTINGS: MAX_CONCURRENT_STREAMS bounds the streams opened; each SETTINGS is acknowledged", () => {
  const s = new H2ClientSession();
  s.start();
  s.takeOutput();
  s.receive(settingsFrame([[Setting.MAX_CONCURRENT_STREAMS, 2]]));
  assert.deepEqual(framesOf(s.takeOutput()).map((f) => [f.type, f.flags]), [
    [FrameType.SETTINGS, Flag.ACK],
  ]);
  assert.equal(s.maxStreams, 2);
  const a = open(s);
  open(s);
  assert.equal(s.canOpen, false);
  assert.throws(() => open(s), /no stream can be opened/);
  s.receive(head(a.id, ok(), true));
  assert.equal(s.canOpen, true);
  // Our own limit holds whatever the origin allows.
  const t = session({}, [[Setting.MAX_CONCURRENT_STREAMS, 1000]]);
  assert.equal(t.maxStreams, 100);
});

Deno.test("until the origin's SETTINGS come, one stream only is opened (its limit is not known)", () => {
  const s = new H2ClientSession();
  s.start();
  assert.equal(s.canOpen, true);
  open(s);
  assert.equal(s.canOpen, false);
  s.receive(settingsFrame([]));
  assert.equal(s.settled, true);
  assert.equal(s.canOpen, true);
});

Deno.test("SETTINGS: INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE shape the request body", () => {
  const s = session({}, [[Setting.INITIAL_WINDOW_SIZE, 1000]]);
  const { id, r } = open(s, false, "POST");
  s.takeOutput();
  assert.equal(s.sendable(id), 1000);
  assert.throws(() => s.data(id, new Uint8Array(1001), false), RangeError);
  s.data(id, new Uint8Array(1000), false);
  assert.equal(s.sendable(id), 0);
  // A larger initial window applies to open streams by its difference, and wakes them.
  s.receive(settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 41000]]));
  assert.equal(s.sendable(id), 40000);
  assert.equal(r.windows, 1);
  s.receive(settingsFrame([[Setting.MAX_FRAME_SIZE, 20000]]));
  s.takeOutput();
  s.data(id, new Uint8Array(40000), true);
  const frames = framesOf(s.takeOutput());
  assert.deepEqual(frames.map((f) => [f.payload.byteLength, f.flags]), [
    [20000, 0],
    [20000, Flag.END_STREAM],
  ]);
  // The connection window (65535) is shared: 41000 of it is spent.
  const other = open(s, false, "POST");
  assert.equal(s.sendable(other.id), 65535 - 41000);
  s.receive(windowUpdateFrame(0, 41000));
  assert.equal(s.sendable(other.id), 41000);
});

Deno.test("response body windows reopen only as the body is read", () => {
  const s = session({ streamWindow: 65536, connWindow: 262144 });
  const { id } = open(s);
  s.takeOutput();
  s.receive(concat([head(id, ok()), data(id, 16384), data(id, 16384)]));
  assert.deepEqual(framesOf(s.takeOutput()), []);
  assert.equal(s.held, 32768);
  s.consumed(id, 16384);
  assert.deepEqual(framesOf(s.takeOutput()), [], "below half the stream window");
  s.consumed(id, 16384);
  const updates = framesOf(s.takeOutput()).map((f) => [f.type, f.id, u32(f.payload)]);
  assert.deepEqual(updates, [[FrameType.WINDOW_UPDATE, id, 32768]]);
  assert.equal(s.held, 0);
  // An overrun of the stream window is that stream's error.
  const b = open(s);
  s.receive(head(b.id, ok()));
  for (let i = 0; i < 4; i++) s.receive(data(b.id, 16384));
  s.receive(data(b.id, 1));
  assert.match(b.r.error!.message, /overran the window/);
});

Deno.test("GOAWAY: streams above the last one fail as refused, the others go on, nothing new opens", () => {
  const s = session();
  const a = open(s);
  const b = open(s);
  const c = open(s);
  s.receive(goawayFrame(a.id, ErrorCode.NO_ERROR));
  assert.equal(a.r.error, null);
  for (const x of [b, c]) {
    assert.equal(x.r.retry, "refused");
    assert.match(x.r.error!.message, /going away \(GOAWAY NO_ERROR\)/);
  }
  assert.equal(s.canOpen, false);
  assert.equal(s.draining, true);
  s.receive(head(a.id, ok(), true));
  assert.deepEqual(a.r.log, ["head 200", "end"]);
  assert.equal(s.streams, 0);
});

Deno.test("RST_STREAM from the origin: REFUSED_STREAM may be retried, other codes fail the stream", () => {
  const cases: [number, Retry, RegExp][] = [
    [ErrorCode.REFUSED_STREAM, "refused", /REFUSED_STREAM/],
    [ErrorCode.CANCEL, null, /reset the stream \(CANCEL\)/],
    [ErrorCode.INTERNAL_ERROR, null, /INTERNAL_ERROR/],
    [0x77, null, /0x77/],
  ];
  for (const [code, retry, why] of cases) {
    const s = session();
    const { id, r } = open(s);
    s.receive(rstStreamFrame(id, code));
    assert.equal(r.retry, retry, String(code));
    assert.match(r.error!.message, why);
    assert.equal(s.streams, 0);
    // Frames still in flight on it are dropped.
    s.receive(data(id, "late"));
  }
});

Deno.test("a stream we reset drops the origin's later frames and gives their window back", () => {
  const s = session({ streamWindow: 65535, connWindow: 65535 });
  const { id } = open(s);
  s.takeOutput();
  s.reset(id, ErrorCode.CANCEL);
  assert.deepEqual(
    framesOf(s.takeOutput()).map((f) => [f.type, f.id, u32(f.payload)]),
    [[FrameType.RST_STREAM, id, ErrorCode.CANCEL]],
  );
  s.receive(concat([head(id, ok()), data(id, 16384), data(id, 16384), data(id, 16384)]));
  const update = framesOf(s.takeOutput()).find((f) => f.type === FrameType.WINDOW_UPDATE);
  assert.equal(update?.id, 0);
  assert.equal(s.held, 0);
});

Deno.test("when the connection ends, streams that heard nothing may be retried", () => {
  const s = session();
  const a = open(s);
  const b = open(s);
  s.receive(head(a.id, ok()));
  s.fail(new Error("the origin closed the connection"));
  assert.equal(a.r.retry, null);
  assert.equal(b.r.retry, "unanswered");
  assert.equal(s.canOpen, false);
});

Deno.test("PING is answered; an origin that does not read the answers is a flood", () => {
  // Allowed any number of frames without work: the bound of unread answers is what stops it.
  const s = session({ allowance: { frames: Infinity } });
  s.receive(frame(FrameType.PING, 0, 0, enc.encode("12345678")));
  const [pong] = framesOf(s.takeOutput());
  assert.deepEqual([pong.type, pong.flags, dec.decode(pong.payload)], [
    FrameType.PING,
    Flag.ACK,
    "12345678",
  ]);
  s.written();
  const ping = frame(FrameType.PING, 0, 0, new Uint8Array(8));
  assert.throws(
    () => {
      for (let i = 0; i < 70_000; i++) s.receive(ping);
    },
    (e: unknown) => calm(e) && /without reading the answers/.test((e as Error).message),
  );
});

Deno.test("frames split across reads are put together", () => {
  const s = session();
  const { id, r } = open(s);
  const bytes = concat([head(id, ok(["content-length", "5"])), data(id, "hello", true)]);
  for (let i = 0; i < bytes.byteLength; i++) s.receive(bytes.slice(i, i + 1));
  assert.deepEqual(r.log, ["head 200", "data 5", "end"]);
});

Deno.test("takeBatch() counts the bytes of frames other than request DATA (an origin that reads nothing is bounded by them)", () => {
  const s = session();
  const { id } = open(s, false);
  const first = s.takeBatch()!;
  // HEADERS only.
  assert.equal(first.control, first.bytes.byteLength);
  s.data(id, new Uint8Array(1000), false);
  const body = s.takeBatch()!;
  assert.equal(body.control, 0);
  assert.equal(body.bytes.byteLength, 1000 + FRAME_HEADER);
  s.reset(id, ErrorCode.CANCEL);
  s.data(id, new Uint8Array(10), true); // gone: nothing
  const reset = s.takeBatch()!;
  assert.equal(reset.control, FRAME_HEADER + 4);
  assert.equal(s.takeBatch(), null);
  // Streams given up and replaced: their frames all count.
  let control = 0;
  for (let i = 0; i < 1000; i++) {
    const { id } = open(s);
    s.reset(id, ErrorCode.CANCEL);
    control += s.takeBatch()!.control;
  }
  assert.ok(control > 1000 * (FRAME_HEADER * 2 + 4), `${control}`);
  assert.ok(UNSENT_LIMIT >= 100 * 64 * 1024);
});

Deno.test("an origin that floods frames carrying no response or data gets GOAWAY ENHANCE_YOUR_CALM, even when it reads the answers", () => {
  // The frame flooded, after what `setup` did on a stream that is open.
  const cases: [string, (s: H2ClientSession, id: number) => Uint8Array][] = [
    ["SETTINGS", () => settingsFrame([])],
    ["SETTINGS ACK", () => frame(FrameType.SETTINGS, Flag.ACK, 0)],
    ["PING", () => frame(FrameType.PING, 0, 0, new Uint8Array(8))],
    ["PING ACK", () => frame(FrameType.PING, Flag.ACK, 0, new Uint8Array(8))],
    ["PRIORITY", (_s, id) => frame(FrameType.PRIORITY, 0, id, new Uint8Array(5))],
    ["WINDOW_UPDATE of 1 on the connection", () => windowUpdateFrame(0, 1)],
    ["WINDOW_UPDATE of 1 on a stream", (_s, id) => windowUpdateFrame(id, 1)],
    ["an unknown frame type", () => frame(0x20, 0, 0, new Uint8Array(0))],
    ["empty DATA", (s, id) => {
      s.receive(head(id, ok()));
      return data(id, "");
    }],
    ["DATA with only padding", (s, id) => {
      s.receive(head(id, ok()));
      return frame(FrameType.DATA, Flag.PADDED, id, new Uint8Array([3, 0, 0, 0]));
    }],
    ["DATA on a stream forgekit reset", (s, id) => {
      s.receive(head(id, ok()));
      s.reset(id, ErrorCode.CANCEL);
      return data(id, "x");
    }],
    ["RST_STREAM on a stream forgekit reset", (s, id) => {
      s.reset(id, ErrorCode.CANCEL);
      return rstStreamFrame(id, ErrorCode.CANCEL);
    }],
    ["HEADERS on a stream forgekit reset", (s, id) => {
      s.reset(id, ErrorCode.CANCEL);
      return head(id, ok());
    }],
    ["interim heads", (_s, id) => head(id, [[":status", "103"], ["link", "</a>; rel=preload"]])],
    ["empty CONTINUATION frames", (s, id) => {
      s.receive(frame(FrameType.HEADERS, 0, id, hpack.encode(ok())));
      return frame(FrameType.CONTINUATION, 0, id, new Uint8Array(0));
    }],
  ];
  const notCut: string[] = [];
  for (const [name, setup] of cases) {
    const s = session();
    const { id, r } = open(s, false, "POST");
    const flood = setup(s, id);
    let sent = 0;
    let error: unknown = null;
    try {
      for (; sent < 5000; sent++) {
        s.receive(flood);
        // The origin reads what forgekit answers.
        s.takeOutput();
        s.written();
      }
    } catch (e) {
      error = e;
    }
    if (!calm(error)) {
      notCut.push(`${name}: ${error}`);
      continue;
    }
    assert.ok(sent >= 1000 && sent < 1100, `${name}: cut off after ${sent} frames`);
    // What origin_h2.ts does with a connection error: GOAWAY with its code, then the streams fail.
    s.goaway((error as H2ConnectionError).code, (error as Error).message);
    const goaway = framesOf(s.takeOutput()).find((f) => f.type === FrameType.GOAWAY)!;
    assert.equal(u32(goaway.payload, 4), ErrorCode.ENHANCE_YOUR_CALM, name);
    s.fail(new Error("the origin broke HTTP/2", { cause: error }));
    assert.equal(r.error === null, name.includes("reset"), name);
  }
  assert.deepEqual(notCut, []);
});

Deno.test("a long upload is not taken for a flood: its DATA frames pay for the origin's WINDOW_UPDATEs and PINGs", () => {
  const ping = frame(FrameType.PING, 0, 0, new Uint8Array(8));
  // What the origin sends back for each chunk of `n` bytes it read.
  const cases: [string, number, number, (id: number, n: number) => Uint8Array[]][] = [
    [
      "64 MiB in 16 KiB frames, each answered by WINDOW_UPDATEs and a PING",
      16384,
      4096,
      (id, n) => [windowUpdateFrame(id, n), windowUpdateFrame(0, n), ping],
    ],
    [
      "16 MiB to Go's server, which gives the windows back every 4 KiB read",
      16384,
      1024,
      (id, n) =>
        Array.from({ length: 4 }, () => [windowUpdateFrame(id, n / 4), windowUpdateFrame(0, n / 4)])
          .flat(),
    ],
    [
      "20,000 gRPC messages of 100 bytes, each answered as grpc-go does (a BDP PING) and more",
      100,
      20_000,
      (id, n) => [windowUpdateFrame(0, n), ping, windowUpdateFrame(id, n)],
    ],
  ];
  for (const [name, size, chunks, answer] of cases) {
    const s = session();
    const { id, r } = open(s, false, "POST");
    s.takeOutput();
    const chunk = new Uint8Array(size);
    for (let i = 0; i < chunks; i++) {
      assert.ok(s.sendable(id)! >= size, name);
      s.data(id, chunk, false);
      s.takeOutput();
      s.written();
      s.receive(concat(answer(id, size)));
    }
    s.data(id, new Uint8Array(0), true);
    s.receive(head(id, ok(), true));
    assert.deepEqual(r.log, ["head 200", "end"], name);
  }
});
