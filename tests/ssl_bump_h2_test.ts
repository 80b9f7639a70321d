/**
 * forgekit's own HTTP/2 server on bumped connections (`lib/bump/h2_server.ts`),
 * driven frame by frame with `support/h2_client.py` (hyper's h2 plus a frame
 * reader of its own that checks sizes and flow control): per-stream policy,
 * malformed requests, flow control both ways, connection errors, limits and
 * the rapid-reset guard.
 */
import assert from "node:assert/strict";
import { answerLate, type BumpFixture, echoLatin, startBumpFixture } from "./support/bump.ts";
import {
  type H2Result,
  type H2Step,
  hasH2Python,
  header,
  request,
  runH2,
  runH2Load,
  stream,
} from "./support/h2_client.ts";
import { until } from "./support/until.ts";

const ALLOW = ["https://api.github.com/allowed/*"];
const PATTERN = "https://api.github.com/allowed/*";
/** Without python3-h2 these tests cannot run (CI installs it: `.ci/run`). */
const ignore = !hasH2Python();

/** RFC 9113 §7 error codes. */
const PROTOCOL_ERROR = 0x1;
const FRAME_SIZE_ERROR = 0x6;
const REFUSED_STREAM = 0x7;
const ENHANCE_YOUR_CALM = 0xb;

const BIG = new Uint8Array(4 << 20).map((_, i) => (i * 131 + (i >> 12)) & 0xff);
const KIB64 = BIG.subarray(0, 64 * 1024);

/** How each /allowed/hang request ended at the origin. */
const hangs: string[] = [];

/** The origin: `origin <path>`, plus a few paths that do more. */
async function originHandler(req: Request): Promise<Response> {
  const path = new URL(req.url).pathname;
  if (path === "/allowed/upload") {
    const body = new Uint8Array(await req.arrayBuffer());
    return Response.json({ length: body.byteLength, sha256: await sha256(body) });
  }
  if (path === "/allowed/big") return new Response(BIG);
  if (path === "/allowed/64k") return new Response(KIB64);
  if (path === "/allowed/slow") {
    await new Promise((resolve) => setTimeout(resolve, 400));
    return new Response("slow\n");
  }
  if (path === "/allowed/hang") return await answerLate(req, hangs);
  if (path === "/allowed/echo") return new Response(`x-after: ${req.headers.get("x-after")}\n`);
  if (path === "/allowed/latin") return echoLatin(req);
  return new Response(`origin ${path}\n`);
}

/** A test with its own proxy front and origins (skipped without python's h2). */
function h2Test(name: string, fn: (f: BumpFixture) => Promise<void>): void {
  Deno.test({
    name,
    ignore,
    fn: async () => {
      const f = await startBumpFixture(ALLOW, originHandler);
      try {
        await fn(f);
      } finally {
        await f.close();
      }
    },
  });
}

/** Checks that the client itself had no trouble: every wait ended, every step ran. */
function clean(r: H2Result): void {
  const trouble = {
    error: r.error,
    step_errors: r.step_errors,
    timeouts: r.timeouts,
    client_error: r.client_error,
    flow_violations: r.flow_violations,
  };
  assert.deepEqual(trouble, {
    error: null,
    step_errors: [],
    timeouts: [],
    client_error: null,
    flow_violations: [],
  }, JSON.stringify(r.goaway));
  assert.equal(r.alpn, "h2");
}

function headers(id: number, fields: [string, string][], end = true): H2Step {
  return { op: "headers", stream: id, headers: fields, end };
}

h2Test(
  "h2: streams on one connection are judged one by one and logged with URL and pattern",
  async (f) => {
    const paths = [
      "/allowed/x",
      "/secret",
      "/allowed/../secret",
      "/allowed/%2e%2e/secret",
      "/allowed%2Fsecret",
      "/allowed/y?q=1",
    ];
    const ids = paths.map((_, i) => 1 + 2 * i);
    const r = await runH2(f, {
      steps: [
        ...paths.map((p, i) => headers(ids[i], request(p))),
        { op: "wait", streams: ids },
      ],
    });
    clean(r);
    const got = ids.map((id) => {
      const s = stream(r, id);
      return [s.status, header(s, "x-proxy-error") ?? null, s.ended];
    });
    assert.deepEqual(got, [
      [200, null, true],
      [403, "blocked-by-url-policy", true],
      [403, "blocked-by-url-policy", true],
      [403, "blocked-by-url-policy", true],
      [403, "blocked-by-url-policy", true],
      [200, null, true],
    ]);
    assert.equal(stream(r, 1).body, "origin /allowed/x\n");
    assert.match(stream(r, 3).body!, /^Blocked by forgekit: https:\/\/api\.github\.com\/secret/);
    assert.deepEqual(f.originPaths().sort(), ["/allowed/x", "/allowed/y?q=1"]);

    await until("one log entry per stream", () => f.logs.length >= paths.length);
    const entries = f.logs.map((e) => [e.url, e.decision, e.rule, e.pattern, e.status]);
    assert.deepEqual(
      entries.sort(),
      [
        ["https://api.github.com/allowed/x", "allowed", `url-pattern:${PATTERN}`, PATTERN, 200],
        ["https://api.github.com/secret", "blocked", "url-policy:no-match", undefined, 403],
        [
          "https://api.github.com/allowed/../secret",
          "blocked",
          "url-policy:no-match",
          undefined,
          403,
        ],
        [
          "https://api.github.com/allowed/%2e%2e/secret",
          "blocked",
          "url-policy:no-match",
          undefined,
          403,
        ],
        [
          "https://api.github.com/allowed%2Fsecret",
          "blocked",
          "url-policy:no-match",
          undefined,
          403,
        ],
        [
          "https://api.github.com/allowed/y?q=1",
          "allowed",
          `url-pattern:${PATTERN}`,
          PATTERN,
          200,
        ],
      ].sort(),
    );
    assert.ok(f.logs.every((e) => e.method === "GET" && e.host === "api.github.com"));
  },
);

h2Test(
  "h2: :authority must be the CONNECT host, and a host field must equal :authority",
  async (f) => {
    const other = (path: string): [string, string][] => [
      [":method", "GET"],
      [":scheme", "https"],
      [":authority", "other.github.com"],
      [":path", path],
    ];
    const noAuthority: [string, string][] = [
      [":method", "GET"],
      [":scheme", "https"],
      [":path", "/allowed/c"],
      ["host", "other.github.com"],
    ];
    const withPort: [string, string][] = [
      [":method", "GET"],
      [":scheme", "https"],
      [":authority", "api.github.com:443"],
      [":path", "/allowed/d"],
    ];
    const r = await runH2(f, {
      steps: [
        headers(1, other("/allowed/a")),
        headers(3, request("/allowed/b", "GET", [["host", "other.github.com"]])),
        headers(5, noAuthority),
        headers(7, withPort),
        { op: "wait", streams: [1, 3, 5, 7] },
      ],
    });
    clean(r);
    const s1 = stream(r, 1);
    assert.equal(s1.status, 403);
    assert.equal(header(s1, "x-proxy-error"), "blocked-by-host-mismatch");
    assert.match(s1.body!, /request for host "other\.github\.com" on a connection to/);
    const s3 = stream(r, 3);
    assert.equal(s3.status, 400);
    assert.match(s3.body!, /the host field differs from :authority/);
    const s5 = stream(r, 5);
    assert.equal(s5.status, 403);
    assert.equal(header(s5, "x-proxy-error"), "blocked-by-host-mismatch");
    assert.equal(stream(r, 7).status, 200);
    assert.deepEqual(f.originPaths(), ["/allowed/d"]);
  },
);

h2Test(
  "h2: malformed requests get 400 or a PROTOCOL_ERROR reset on their stream only",
  async (f) => {
    const noPath: [string, string][] = [
      [":method", "GET"],
      [":scheme", "https"],
      [":authority", "api.github.com"],
    ];
    const late: [string, string][] = [
      [":method", "GET"],
      [":scheme", "https"],
      ["accept", "*/*"],
      [":authority", "api.github.com"],
      [":path", "/allowed/late"],
    ];
    const cases: [number, [string, string][], RegExp][] = [
      [1, noPath, /missing or invalid :path/],
      [3, request("/allowed/upper", "GET", [["X-Upper", "1"]]), /invalid field name "X-Upper"/],
      [5, request("/allowed/conn", "GET", [["connection", "keep-alive"]]), /connection-specific/],
      [7, request("/allowed/te", "GET", [["te", "gzip"]]), /te other than "trailers"/],
      [9, late, /pseudo-field :authority after a regular field/],
    ];
    const r = await runH2(f, {
      steps: [
        ...cases.map(([id, h]) => headers(id, h)),
        // A body shorter, then one longer, than its content-length.
        headers(11, request("/allowed/upload", "POST", [["content-length", "10"]]), false),
        { op: "data", stream: 11, text: "abc", end: true },
        headers(13, request("/allowed/upload", "POST", [["content-length", "2"]]), false),
        { op: "data", stream: 13, text: "abc", end: false },
        // The connection still serves a good request.
        headers(15, request("/allowed/ok")),
        { op: "wait", streams: [1, 3, 5, 7, 9, 11, 13, 15] },
      ],
    });
    clean(r);
    for (const [id, , why] of cases) {
      const s = stream(r, id);
      assert.equal(s.status, 400, `stream ${id}`);
      assert.match(s.body!, why, `stream ${id}`);
      assert.equal(s.reset, null, `stream ${id}`);
    }
    for (const id of [11, 13]) {
      assert.equal(stream(r, id).status, null, `stream ${id}`);
      assert.equal(stream(r, id).reset, PROTOCOL_ERROR, `stream ${id}`);
    }
    // Logged as the client's bad request, not as an upstream error or a cancel.
    assert.deepEqual(
      f.logs.filter((e) => e.url?.endsWith("/upload")).map((e) => [e.status, e.reason]),
      Array(2).fill([400, "bad request body: the request body does not match its content-length"]),
    );
    assert.equal(stream(r, 15).status, 200);
    assert.equal(stream(r, 15).body, "origin /allowed/ok\n");
    assert.equal(r.goaway, null);
    assert.ok(!f.originPaths().some((p) => !["/allowed/ok", "/allowed/upload"].includes(p)));
  },
);

h2Test("h2: CONNECT inside a bumped connection gets 405 connect-refused", async (f) => {
  const r = await runH2(f, {
    steps: [
      headers(1, [[":method", "CONNECT"], [":authority", "example.com:443"]]),
      headers(3, request("/allowed/after")),
      { op: "wait", streams: [1, 3] },
    ],
  });
  clean(r);
  const s = stream(r, 1);
  assert.equal(s.status, 405);
  assert.equal(header(s, "x-proxy-error"), "connect-refused");
  assert.equal(stream(r, 3).status, 200);
  assert.deepEqual(f.originPaths(), ["/allowed/after"]);
});

h2Test("h2: a 1.5 MiB upload reaches the origin intact within the server's windows", async (f) => {
  const size = 1536 * 1024;
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/upload", "POST", [["content-length", String(size)]]), false),
      { op: "data", stream: 1, size, end: true },
      { op: "wait", streams: [1] },
    ],
  });
  clean(r);
  const s = stream(r, 1);
  assert.equal(s.status, 200);
  assert.equal(s.sent.length, size);
  assert.deepEqual(JSON.parse(s.body!), { length: size, sha256: s.sent.sha256 });
  // More than the stream's first window was sent: the server reopened it.
  assert.ok((r.frames.WINDOW_UPDATE ?? 0) >= 5, JSON.stringify(r.frames));
  assert.equal(r.goaway, null);
  await until("the log entry", () => f.logs.length === 1);
  assert.equal(f.logs[0].bytes_out, size);
  assert.equal(f.logs[0].method, "POST");
});

h2Test(
  "h2: a 4 MiB download through a 16 KiB window arrives whole, within frame size and windows",
  async (f) => {
    const r = await runH2(f, {
      settings: { INITIAL_WINDOW_SIZE: 16384 },
      window: "lazy",
      steps: [headers(1, request("/allowed/big")), { op: "wait", streams: [1], timeout: 20 }],
      timeout: 25,
    });
    await assertBigArrived(r);
    assert.ok(r.max_data_frame > 0 && r.max_data_frame <= 16384, String(r.max_data_frame));
    // 4 MiB at most 16 KiB a window: the client's updates were waited for.
    assert.ok((r.frames.DATA ?? 0) >= 256, JSON.stringify(r.frames));
  },
);

h2Test(
  "h2: a download sends no more than the windows the client granted, in frames of 16 KiB",
  async (f) => {
    // The lazy client above grants a stream's window on every frame it
    // reads, so a server that overran windows would go unnoticed there.
    // Here windows open only at the steps: whatever arrives during a
    // pause beyond the windows granted so far is a flow violation.
    const r = await runH2(f, {
      settings: { INITIAL_WINDOW_SIZE: 16384 },
      window: "manual",
      steps: [
        headers(1, request("/allowed/big")),
        { op: "sleep", ms: 250 }, // held at the stream's 16 KiB
        { op: "window", stream: 1, increment: 100_000 },
        { op: "sleep", ms: 250 }, // held at the connection's 65535
        { op: "window", stream: 0, increment: 4 << 20 },
        { op: "sleep", ms: 250 }, // held at the stream's 116384
        { op: "window", stream: 1, increment: 4 << 20 },
        { op: "wait", streams: [1], timeout: 20 },
      ],
      timeout: 25,
    });
    await assertBigArrived(r);
    // Large windows: the frames are as large as the client allows, no larger.
    assert.equal(r.max_data_frame, 16384);
  },
);

h2Test(
  "h2: PING is answered with the same data; bad preface and oversized frame end the connection",
  async (f) => {
    const ping = await runH2(f, {
      steps: [
        { op: "ping", data: "f00dfacecafe1234" },
        { op: "wait", ping_ack: true },
      ],
    });
    clean(ping);
    assert.deepEqual(ping.ping_acks, ["f00dfacecafe1234"]);
    assert.equal(ping.closed, false);

    const preface = await runH2(f, {
      preface: false,
      steps: [
        { op: "raw", text: "GET / HTTP/1.1\r\nHost: api.github.com\r\n\r\n" },
        { op: "wait", close: true, timeout: 5 },
      ],
    });
    assert.deepEqual(preface.timeouts, []);
    assert.equal(preface.closed, true);
    assert.equal(preface.goaway?.code, PROTOCOL_ERROR);
    assert.equal(preface.frames.HEADERS, undefined);

    const big = await runH2(f, {
      steps: [
        { op: "wait", settings: true },
        { op: "frame", type: 1, flags: 5, stream: 1, payload_size: "over_max" },
        { op: "wait", close: true, timeout: 5 },
      ],
    });
    assert.deepEqual(big.timeouts, []);
    // No MAX_FRAME_SIZE advertised: the default, 16384, holds.
    assert.equal(big.settings.MAX_FRAME_SIZE ?? 16384, 16384);
    assert.equal(big.closed, true);
    assert.equal(big.goaway?.code, FRAME_SIZE_ERROR);
    assert.deepEqual(f.originPaths(), []);
  },
);

h2Test(
  "h2: a header list over 64 KiB gets 431 and the connection serves the next stream",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        // x-after comes after the oversized field: the server's HPACK table
        // must still take it, since the client's encoder indexed it.
        headers(
          1,
          request("/allowed/echo", "GET", [["x-big", "a".repeat(70_000)], ["x-after", "one"]]),
        ),
        { op: "wait", streams: [1] },
        headers(3, request("/allowed/echo", "GET", [["x-after", "one"]])),
        { op: "wait", streams: [3] },
      ],
    });
    clean(r);
    assert.equal(stream(r, 1).status, 431);
    assert.equal(stream(r, 3).status, 200);
    assert.equal(stream(r, 3).body, "x-after: one\n");
    assert.equal(r.goaway, null);
    assert.deepEqual(f.originPaths(), ["/allowed/echo"]);
  },
);

h2Test(
  "h2: a rapid reset flood gets GOAWAY ENHANCE_YOUR_CALM; the proxy serves the next client",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        { op: "flood", count: 1000, headers: request("/allowed/flood") },
        { op: "wait", close: true, timeout: 10 },
      ],
    });
    assert.deepEqual(r.timeouts, []);
    assert.equal(r.goaway?.code, ENHANCE_YOUR_CALM, JSON.stringify(r.goaway));
    assert.equal(r.closed, true);
    // Reset streams keep their slots until answered: at most 100 reached the origin.
    assert.ok(f.originPaths().length <= 100, String(f.originPaths().length));

    const next = await runH2(f, {
      steps: [headers(1, request("/allowed/next")), { op: "wait", streams: [1] }],
    });
    clean(next);
    assert.equal(stream(next, 1).status, 200);
    assert.equal(stream(next, 1).body, "origin /allowed/next\n");
  },
);

h2Test(
  "h2: streams past MAX_CONCURRENT_STREAMS (100) are refused; the others are served",
  async (f) => {
    const open = 110;
    const ids = Array.from({ length: open }, (_, i) => 1 + 2 * i);
    const extra = ids.slice(100);
    const r = await runH2(f, {
      steps: [
        { op: "wait", settings: true },
        // Each request's body stays open, so every stream stays in flight.
        {
          op: "headers",
          stream: 1,
          count: open,
          headers: request("/allowed/hold-{n}", "POST"),
          end: false,
        },
        { op: "wait", streams: extra },
        ...ids.slice(0, 100).map((id) => ({ op: "data", stream: id, text: "x", end: true })),
        { op: "wait", streams: ids.slice(0, 100), timeout: 15 },
      ],
      timeout: 20,
    });
    clean(r);
    assert.equal(r.settings.MAX_CONCURRENT_STREAMS, 100);
    for (const id of extra) {
      assert.equal(stream(r, id).reset, REFUSED_STREAM, `stream ${id}`);
      assert.equal(stream(r, id).status, null, `stream ${id}`);
    }
    for (const id of ids.slice(0, 100)) {
      assert.equal(stream(r, id).status, 200, `stream ${id}`);
      assert.equal(stream(r, id).reset, null, `stream ${id}`);
    }
    assert.equal(f.originPaths().length, 100);
    assert.ok(
      f.originPaths().every((p) => Number(p.split("-")[1]) < 100),
      f.originPaths().join(),
    );
  },
);

h2Test(
  "h2: after the client's GOAWAY the streams in flight finish, then the server closes",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/slow")),
        headers(3, request("/allowed/slow")),
        { op: "sleep", ms: 50 },
        { op: "goaway", code: 0, last_stream: 0 },
        { op: "wait", close: true, timeout: 5 },
      ],
    });
    clean(r);
    assert.equal(r.closed, true);
    for (const id of [1, 3]) {
      const s = stream(r, id);
      assert.deepEqual([s.status, s.body, s.ended, s.reset], [200, "slow\n", true, null]);
    }
    assert.equal(f.originPaths().length, 2);
  },
);

h2Test("h2: a stream the client resets gives up its request to the origin at once", async (f) => {
  hangs.length = 0;
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/hang")),
      { op: "sleep", ms: 200 },
      { op: "reset", stream: 1, code: 8 },
      headers(3, request("/allowed/x")),
      { op: "wait", streams: [3] },
    ],
  });
  clean(r);
  assert.equal(stream(r, 3).status, 200);
  assert.equal(stream(r, 1).status, null, "no answer on the reset stream");
  // The origin sees its connection closed, long before it would answer.
  await until("the origin's end of /allowed/hang", () => hangs.length === 1, 2000);
  assert.deepEqual(hangs, ["given up"]);
  await until("both log entries", () => f.logs.length === 2);
  const hang = f.logs.find((e) => e.url === "https://api.github.com/allowed/hang");
  assert.deepEqual(
    [hang?.decision, hang?.status, hang?.reason],
    ["allowed", null, "cancelled by the client"],
  );
});

/** The run was clean and stream 1 brought BIG, whole. */
async function assertBigArrived(r: H2Result): Promise<void> {
  clean(r);
  const s = stream(r, 1);
  assert.deepEqual([s.status, s.length, s.sha256], [200, BIG.byteLength, await sha256(BIG)]);
}

async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as BufferSource);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

h2Test("h2: obs-text bytes in field values pass through unchanged both ways", async (f) => {
  const value = "caf\u00e9 \u0080\u00ff"; // bytes 63 61 66 e9 20 80 ff on the wire
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/latin", "GET", [["x-latin", value]])),
      { op: "wait", streams: [1] },
    ],
  });
  clean(r);
  const s = stream(r, 1);
  assert.equal(s.status, 200);
  assert.equal(s.body, "63 61 66 e9 20 80 ff\n");
  assert.equal(header(s, "x-echo"), value);
});

h2Test(
  "h2: a busy client that reads everything and sends PINGs is not taken for a flood",
  async (f) => {
    // 100 streams of 64 KiB queued at once, a PING after every 5 responses, and a new
    // stream as soon as one ends: none of it is a client that does not read.
    const r = await runH2Load(f, {
      path: "/allowed/64k",
      total: 1500,
      inflight: 100,
      ping_every: 5,
    });
    assert.deepEqual(
      { done: r.done, statuses: r.statuses, resets: r.resets, goaway: r.goaway, error: r.error },
      { done: 1500, statuses: { "200": 1500 }, resets: {}, goaway: null, error: null },
    );
  },
);

h2Test(
  "h2: a download the client resets midway is logged with the bytes it got, not the declared length",
  async (f) => {
    const r = await runH2(f, {
      settings: { INITIAL_WINDOW_SIZE: 16384 },
      window: "manual",
      steps: [
        headers(1, request("/allowed/big")),
        { op: "sleep", ms: 300 }, // one window's worth arrives, then the stream stalls
        { op: "reset", stream: 1, code: 8 },
        { op: "sleep", ms: 100 },
      ],
    });
    assert.equal(r.error, null);
    await until("the log entry", () => f.logs.length === 1);
    const e = f.logs[0];
    assert.equal(e.status, 200);
    assert.ok(e.bytes_in > 0 && e.bytes_in <= 64 * 1024, `bytes_in ${e.bytes_in}`);
    assert.equal(e.reason, "the response did not reach the client whole");
  },
);

h2Test(
  "h2: a request body whose END_STREAM comes late is logged with every byte sent",
  async (f) => {
    const size = 100_000;
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/upload", "POST", [["content-length", String(size)]]), false),
        { op: "data", stream: 1, size, end: false },
        { op: "sleep", ms: 300 },
        // The origin has its whole body and may have answered by now (then the stream is
        // closed, and this step fails on the client's side: either way is fine).
        { op: "data", stream: 1, text: "", end: true },
        { op: "wait", streams: [1] },
      ],
    });
    assert.equal(r.error, null);
    assert.deepEqual(JSON.parse(stream(r, 1).body!), {
      length: size,
      sha256: stream(r, 1).sent.sha256,
    });
    await until("the log entry", () => f.logs.length === 1);
    assert.equal(f.logs[0].bytes_out, size);
  },
);
