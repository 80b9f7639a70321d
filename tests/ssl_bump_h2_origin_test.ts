/**
 * HTTP/2 towards origins (`lib/bump/origin_h2.ts`): HTTP/2 clients
 * (`support/h2_client.py`, curl) through the firewall's proxy with
 * `--ssl-bump`, to an origin that speaks HTTP/2 only (`support/h2_origin.py`,
 * hyper's h2), which reports every request, body, trailer and reset it sees.
 */
import assert from "node:assert/strict";
import { curl } from "./support/bump.ts";
import {
  type H2Result,
  type H2Step,
  hasH2Python,
  header,
  request,
  runH2,
  stream,
} from "./support/h2_client.ts";
import {
  type H2OriginFixture,
  type H2OriginOptions,
  originClientFor,
  originGet,
  startH2Origin,
} from "./support/h2_origin.ts";
import { until } from "./support/until.ts";
import { RawH1 } from "./support/raw_h1.ts";

/** Without python3-h2 these tests cannot run (CI installs it: `.ci/run`). */
const ignore = !hasH2Python();
const CANCEL = 0x8;
const PATTERN = "https://api.github.com/allowed/*";
/** What gRPC clients send: it takes trailers, so the request goes over HTTP/2. */
const TE: [string, string][] = [["te", "trailers"]];

function originTest(
  name: string,
  fn: (f: H2OriginFixture) => Promise<void>,
  options: H2OriginOptions = {},
): void {
  Deno.test({
    name,
    ignore,
    fn: async () => {
      const f = await startH2Origin(options);
      try {
        await fn(f);
      } finally {
        await f.close();
      }
    },
  });
}

function headers(id: number, fields: [string, string][], end = true): H2Step {
  return { op: "headers", stream: id, headers: fields, end };
}

/** The client had no trouble of its own: every step ran, every wait ended. */
function clean(r: H2Result): void {
  assert.deepEqual(
    { error: r.error, step_errors: r.step_errors, timeouts: r.timeouts, client: r.client_error },
    { error: null, step_errors: [], timeouts: [], client: null },
  );
  assert.deepEqual(r.flow_violations, []);
}

originTest(
  "an HTTP/2 client reaches an HTTP/2-only origin over HTTP/2, and so does an HTTP/1.1 client",
  async (f) => {
    const h2 = await curl(f, ["--http2", "-sS", "-D", "-", "https://api.github.com/allowed/x"]);
    assert.equal(h2.code, 0, h2.out);
    assert.match(h2.out, /\r\nHTTP\/2 200 \r\n/);
    assert.match(h2.out, /\r\n\r\norigin \/allowed\/x\n$/);
    assert.deepEqual(f.requests().map((r) => r.path), ["/allowed/x"]);
    const conn = f.requests()[0].conn;
    assert.equal(f.events.find((e) => e.ev === "conn" && e.conn === conn)?.alpn, "h2");
    // An HTTP/1.1 client's request goes over HTTP/2 too: this origin refuses HTTP/1.1.
    const h1 = await curl(f, ["--http1.1", "-sS", "-D", "-", "https://api.github.com/allowed/y"]);
    assert.equal(h1.code, 0, h1.out);
    assert.match(h1.out, /\r\nHTTP\/1\.1 200 \r\n/);
    assert.match(h1.out, /\r\ncontent-length: 18\r\n/);
    assert.match(h1.out, /\r\n\r\norigin \/allowed\/y\n$/);
    assert.deepEqual(f.requests().map((r) => r.path), ["/allowed/x", "/allowed/y"]);
    // Over the same HTTP/2 connection, with no header of HTTP/1.1's framing.
    const y = f.requests()[1];
    assert.equal(y.conn, conn);
    assert.deepEqual(
      y.headers?.filter(([k]) => k.startsWith(":") || k === "host" || k === "connection"),
      [
        [":method", "GET"],
        [":scheme", "https"],
        [":authority", "api.github.com"],
        [":path", "/allowed/y"],
      ],
    );
    await until("two log lines", () => f.logs.length === 2);
    assert.deepEqual(f.logs.map((e) => [e.url, e.status]), [
      ["https://api.github.com/allowed/x", 200],
      ["https://api.github.com/allowed/y", 200],
    ]);
  },
);

originTest(
  "an HTTP/1.1 client's chunked upload reaches an HTTP/2-only origin whole; a response streaming in without a length goes out chunked, or ends by closing for HTTP/1.0",
  async (f) => {
    const body = await Deno.makeTempFile();
    const bytes = new Uint8Array(3 * 1024 * 1024 + 7).map((_, i) => (i * 31) % 251);
    await Deno.writeFile(body, bytes);
    const sha = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)))
      .map((b) => b.toString(16).padStart(2, "0")).join("");
    try {
      const up = await curl(f, [
        "--http1.1",
        "-sS",
        "-D",
        "-",
        "-H",
        "Transfer-Encoding: chunked",
        "-H",
        "TE: trailers",
        "--data-binary",
        `@${body}`,
        "https://api.github.com/allowed/echo",
      ]);
      assert.equal(up.code, 0, up.out);
      assert.match(up.out, /\r\nHTTP\/1\.1 200 \r\n/);
      const echoed = JSON.parse(up.out.slice(up.out.lastIndexOf("\r\n\r\n") + 4));
      // te: trailers is hop-by-hop from an HTTP/1.1 client: not forwarded.
      assert.deepEqual(echoed, { length: bytes.byteLength, sha256: sha, te: [], trailers: null });
      // A body that streams in without a length goes out as it comes, chunked.
      const drip = await curl(f, [
        "--http1.1",
        "-sS",
        "-D",
        "-",
        "--raw",
        "https://api.github.com/allowed/drip",
      ]);
      assert.equal(drip.code, 0, drip.out);
      assert.match(drip.out, /\r\nHTTP\/1\.1 200 \r\n/);
      assert.match(drip.out, /\r\ntransfer-encoding: chunked\r\n/i);
      assert.match(drip.out, /\r\n\r\n5\r\ndrip\n\r\n5\r\ndrip\n\r\n5\r\ndrip\n\r\n0\r\n\r\n$/);
      // An HTTP/1.0 client cannot take chunks: the end of the body closes the connection.
      const old = await curl(f, [
        "--http1.0",
        "-sS",
        "-D",
        "-",
        "https://api.github.com/allowed/drip",
      ]);
      assert.equal(old.code, 0, old.out);
      assert.match(old.out, /\r\nHTTP\/1\.1 200 \r\n/);
      assert.match(old.out, /\r\nconnection: close\r\n/i);
      assert.doesNotMatch(old.out, /transfer-encoding|content-length/i);
      assert.match(old.out, /\r\n\r\ndrip\ndrip\ndrip\n$/);
      const big = await curl(f, [
        "--http1.1",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
        "https://api.github.com/allowed/big?size=5000000",
      ]);
      assert.equal(big.out, "200 5000000");
    } finally {
      await Deno.remove(body);
    }
  },
);

originTest(
  "an HTTP/1.1 client's Content-Length of repeated values goes to an HTTP/2 origin as one field; its CONNECT gets 405 and never reaches it",
  async (f) => {
    // HTTP/1.1 takes `5, 5` and a repeated field; HTTP/2 does not, and this
    // origin (as Envoy) ends the whole connection, every client's streams on it.
    const c = await RawH1.open(f);
    try {
      for (const length of ["Content-Length: 5, 5", "Content-Length: 005\r\nContent-Length: 005"]) {
        await c.write(
          `POST /allowed/echo HTTP/1.1\r\nHost: api.github.com\r\n${length}\r\n\r\nhello`,
        );
        const r = await c.response();
        assert.equal(r.status, 200, r.text);
        assert.equal(JSON.parse(r.text).length, 5);
      }
      await c.write("CONNECT /allowed/x HTTP/1.1\r\nHost: api.github.com\r\n\r\n");
      const r = await c.response();
      assert.equal(r.status, 405);
      assert.equal(r.headers.get("x-proxy-error"), "connect-refused");
      assert.ok(await c.closedByServer());
    } finally {
      c.close();
    }
    assert.deepEqual(
      f.requests().map((e) => e.headers!.filter(([k]) => k === "content-length")),
      [[["content-length", "5"]], [["content-length", "5"]]],
    );
    assert.deepEqual(f.events.filter((e) => e.ev === "error"), []);
    assert.equal(new Set(f.requests().map((e) => e.conn)).size, 1);
    await until("three log lines", () => f.logs.length === 3);
    assert.deepEqual(f.logs.map((e) => [e.method, e.status, e.rule]), [
      ["POST", 200, "url-pattern:https://api.github.com/allowed/*"],
      ["POST", 200, "url-pattern:https://api.github.com/allowed/*"],
      ["CONNECT", 405, "bad-request"],
    ]);
  },
);

originTest("response trailers from the origin reach the HTTP/2 client", async (f) => {
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/trailers", "POST", TE), false),
      { op: "data", stream: 1, text: "\x00\x00\x00\x00\x00", end: true },
      headers(3, request("/allowed/trailers-only", "POST", TE)),
      { op: "wait", streams: [1, 3] },
    ],
  });
  clean(r);
  const s1 = stream(r, 1);
  assert.equal(s1.status, 200);
  assert.equal(header(s1, "content-type"), "application/grpc");
  assert.equal(header(s1, "content-length"), undefined);
  assert.equal(s1.body, "\x00\x00\x00\x00\x05hello");
  assert.deepEqual(s1.trailers, [
    ["grpc-status", "0"],
    ["grpc-message", "all%20good"],
    ["x-checksum", "c0ffee"],
  ]);
  assert.equal(s1.ended, true);
  const s3 = stream(r, 3);
  assert.equal(s3.status, 200);
  assert.equal(header(s3, "grpc-status"), "5");
  assert.equal(header(s3, "grpc-message"), "not%20found");
  assert.equal(header(s3, "content-length"), undefined);
  assert.equal(s3.length, 0);
  assert.equal(s3.trailers, null);
  await until("the log lines", () => f.logs.length === 2);
  assert.deepEqual(
    f.logs.map((e) => [e.url, e.status, e.bytes_in, e.reason]).sort(),
    [
      ["https://api.github.com/allowed/trailers", 200, 10, undefined],
      ["https://api.github.com/allowed/trailers-only", 200, 0, undefined],
    ],
  );
});

originTest("a trailers-only answer stays one: END_STREAM on its HEADERS, no DATA", async (f) => {
  // gRPC sends its errors so; a client that got HEADERS then an empty DATA
  // would take grpc-status for initial metadata and see no status at all.
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/trailers-only", "POST", TE)),
      { op: "wait", streams: [1] },
    ],
  });
  clean(r);
  assert.equal(stream(r, 1).ended, true);
  assert.equal(header(stream(r, 1), "grpc-status"), "5");
  assert.equal(r.frames.DATA, undefined, JSON.stringify(r.frames));
});

originTest("curl --http2 gets the origin's trailers", async (f) => {
  const got = await curl(f, [
    "--http2",
    "-sS",
    "-H",
    "te: trailers",
    "-D",
    "-",
    "-o",
    "/dev/null",
    "https://api.github.com/allowed/trailers",
  ]);
  assert.equal(got.code, 0, got.out);
  assert.match(got.out, /HTTP\/2 200 \r\n/);
  assert.match(got.out, /\r\ngrpc-status: 0\r\n/);
  assert.match(got.out, /\r\nx-checksum: c0ffee\r\n/);
});

originTest("request trailers from the client reach the origin, with te: trailers", async (f) => {
  const r = await runH2(f, {
    steps: [
      headers(
        1,
        request("/allowed/echo", "POST", [...TE, ["content-type", "application/grpc"]]),
        false,
      ),
      { op: "data", stream: 1, text: "abc" },
      headers(1, [["x-req-checksum", "900150983cd24fb0"], ["x-bin", "AQID"]]),
      { op: "wait", streams: [1] },
    ],
  });
  clean(r);
  const s = stream(r, 1);
  assert.equal(s.status, 200);
  const echo = JSON.parse(s.body!);
  assert.equal(echo.length, 3);
  assert.deepEqual(echo.te, ["trailers"]);
  assert.deepEqual(echo.trailers, [["x-req-checksum", "900150983cd24fb0"], ["x-bin", "AQID"]]);
  assert.deepEqual(s.trailers, [["x-echo", "done"]]);
  const end = f.events.find((e) => e.ev === "end")!;
  assert.deepEqual(end.trailers, echo.trailers);
  // The request fields went out as HTTP/2 ones: no hop-by-hop field, te kept.
  const fields = f.requests()[0].headers!;
  assert.ok(fields.some(([k, v]) => k === "te" && v === "trailers"), JSON.stringify(fields));
  assert.ok(!fields.some(([k]) => k === "connection" || k === "host"), JSON.stringify(fields));
});

originTest(
  "malformed request trailers reset the client's stream and never reach the origin",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/echo", "POST", TE), false),
        { op: "data", stream: 1, text: "abc" },
        headers(1, [["connection", "close"]]),
        headers(3, request("/allowed/after", "GET", TE)),
        { op: "wait", streams: [1, 3] },
      ],
    });
    assert.equal(stream(r, 1).reset, 0x1);
    assert.equal(stream(r, 3).status, 200);
    await until("the log lines", () => f.logs.length === 2);
    const refused = f.logs.find((e) => e.url?.endsWith("/echo"))!;
    assert.equal(refused.status, 400);
    assert.equal(
      refused.reason,
      "bad request body: malformed trailers: connection-specific field connection",
    );
    // Whether the request had reached the origin yet is a matter of timing;
    // if it had, the origin sees its stream cancelled, never completed.
    const echo = f.requests().find((x) => x.path === "/allowed/echo");
    if (echo !== undefined) {
      await f.until(
        (e) => e.some((x) => x.ev === "reset" && x.stream === echo.stream && x.code === CANCEL),
        "the origin to see the stream cancelled",
      );
    }
    assert.ok(
      !f.events.some((e) => e.ev === "end" && e.stream === echo?.stream && e.conn === echo?.conn),
    );
  },
);

originTest("many concurrent streams share one origin connection", async (f) => {
  const ids = Array.from({ length: 30 }, (_, i) => 1 + 2 * i);
  const r = await runH2(f, {
    steps: [
      ...ids.map((id) => headers(id, request(`/allowed/slow?n=${id}`))),
      { op: "wait", streams: ids },
    ],
  });
  clean(r);
  assert.deepEqual(ids.map((id) => stream(r, id).status), ids.map(() => 200));
  const reqs = f.requests();
  assert.equal(reqs.length, 30);
  assert.deepEqual(
    new Set(reqs.map((x) => x.conn)).size,
    1,
    JSON.stringify(reqs.map((x) => x.conn)),
  );
  // They were in flight together, not one after the other.
  assert.ok(Math.max(...reqs.map((x) => x.open!)) >= 10, JSON.stringify(reqs.map((x) => x.open)));
});

originTest(
  "streams beyond the origin's SETTINGS_MAX_CONCURRENT_STREAMS go to another connection",
  async (f) => {
    // The first request opens the connection and reads the origin's SETTINGS.
    clean(
      await runH2(f, {
        steps: [headers(1, request("/allowed/first")), { op: "wait", streams: [1] }],
      }),
    );
    const ids = Array.from({ length: 9 }, (_, i) => 1 + 2 * i);
    const r = await runH2(f, {
      steps: [
        ...ids.map((id) => headers(id, request(`/allowed/slow?n=${id}`))),
        { op: "wait", streams: ids },
      ],
    });
    clean(r);
    assert.deepEqual(ids.map((id) => stream(r, id).status), ids.map(() => 200));
    const slow = f.requests().filter((x) => x.path.startsWith("/allowed/slow"));
    assert.equal(slow.length, 9);
    assert.ok(new Set(slow.map((x) => x.conn)).size >= 3, JSON.stringify(slow.map((x) => x.conn)));
    assert.ok(Math.max(...slow.map((x) => x.open!)) <= 3, JSON.stringify(slow.map((x) => x.open)));
    assert.deepEqual(f.events.filter((e) => e.ev === "error"), []);
  },
  { maxStreams: 3 },
);

originTest(
  "a disallowed stream beside an allowed one is 403 and never reaches the origin",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/x", "POST", TE), false),
        headers(3, request("/secret/x", "POST", TE), false),
        { op: "data", stream: 1, text: "one", end: true },
        { op: "data", stream: 3, text: "two", end: true },
        { op: "wait", streams: [1, 3] },
      ],
    });
    clean(r);
    assert.equal(stream(r, 1).status, 200);
    assert.equal(stream(r, 3).status, 403);
    assert.equal(header(stream(r, 3), "x-proxy-error"), "blocked-by-url-policy");
    assert.deepEqual(f.requests().map((x) => x.path), ["/allowed/x"]);
    await until("the log lines", () => f.logs.length === 2);
    assert.deepEqual(
      f.logs.map((e) => [e.url, e.decision, e.rule, e.status]).sort(),
      [
        ["https://api.github.com/allowed/x", "allowed", `url-pattern:${PATTERN}`, 200],
        ["https://api.github.com/secret/x", "blocked", "url-policy:no-match", 403],
      ],
    );
  },
);

originTest("a client's RST_STREAM cancels only its stream at the origin", async (f) => {
  const r = await runH2(f, {
    steps: [
      headers(1, request("/allowed/hang", "GET", TE)),
      headers(3, request("/allowed/slow", "GET", TE)),
      { op: "sleep", ms: 600 },
      { op: "reset", stream: 1, code: CANCEL },
      { op: "wait", streams: [3] },
    ],
  });
  clean(r);
  assert.equal(stream(r, 3).status, 200);
  assert.equal(stream(r, 3).body, "slow\n");
  await f.until((e) => e.some((x) => x.ev === "reset"), "the origin to see the reset");
  const hang = f.requests().find((x) => x.path === "/allowed/hang")!;
  const slow = f.requests().find((x) => x.path === "/allowed/slow")!;
  assert.equal(hang.conn, slow.conn);
  assert.deepEqual(
    f.events.filter((e) => e.ev === "reset").map((e) => [e.conn, e.stream, e.code]),
    [[hang.conn, hang.stream, CANCEL]],
  );
  assert.ok(
    !f.events.some((e) => e.ev === "closed" && e.conn === hang.conn),
    "the origin connection stays open",
  );
  await until("the log lines", () => f.logs.length === 2);
  const cancelled = f.logs.find((e) => e.url?.endsWith("/hang"))!;
  assert.equal(cancelled.status, null);
  assert.equal(cancelled.reason, "cancelled by the client");
});

originTest(
  "a client that goes away cancels its streams at the origin, not the connection others share",
  async (f) => {
    const staying = runH2(f, {
      steps: [
        { op: "sleep", ms: 100 },
        headers(1, request("/allowed/slow", "GET", TE)),
        { op: "wait", streams: [1] },
      ],
    });
    // This client opens a stream and leaves without a word (its socket closes).
    const leaving = await runH2(f, {
      steps: [headers(1, request("/allowed/hang", "GET", TE)), { op: "sleep", ms: 800 }],
    });
    clean(leaving);
    const r = await staying;
    clean(r);
    assert.equal(stream(r, 1).body, "slow\n");
    await f.until(
      (e) => e.some((x) => x.ev === "reset"),
      "the origin to see the hang stream reset",
    );
    const hang = f.requests().find((x) => x.path === "/allowed/hang")!;
    const slow = f.requests().find((x) => x.path === "/allowed/slow")!;
    assert.equal(hang.conn, slow.conn, "both clients' streams share one origin connection");
    assert.deepEqual(
      f.events.filter((e) => e.ev === "reset").map((e) => [e.stream, e.code]),
      [[hang.stream, CANCEL]],
    );
    assert.ok(!f.events.some((e) => e.ev === "closed" && e.conn === hang.conn));
  },
);

originTest(
  "an HTTP/2 origin connection without streams is closed after the idle time",
  async (f) => {
    const client = originClientFor(f, { idleMs: 300 });
    try {
      const res = await client.request(originGet({ http2: { te: true } }));
      assert.equal(res.status, 200);
      assert.equal(new TextDecoder().decode(res.body as Uint8Array), "origin /allowed/x\n");
      assert.equal(client.protocolOf("api.github.com", 443), "h2");
      const conn = f.requests()[0].conn;
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.ok(!f.events.some((e) => e.ev === "closed" && e.conn === conn), "kept while fresh");
      await f.until(
        (e) => e.some((x) => x.ev === "closed" && x.conn === conn),
        "the idle close",
        3000,
      );
      assert.equal(client.openConnections, 0);
    } finally {
      client.close();
    }
  },
);

originTest(
  "an HTTP/2 connection is opened ahead only for an origin earlier requests reached over HTTP/2",
  async (f) => {
    const client = originClientFor(f);
    try {
      const conns = () => f.events.filter((e) => e.ev === "conn").length;
      // Nothing known of the origin: no connection is opened ahead.
      client.warmH2("api.github.com", 443);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(conns(), 0);
      const res = await client.request(originGet({ http2: { te: true } }));
      assert.equal(res.status, 200);
      assert.equal(conns(), 1);
      // One is kept: none more is opened.
      client.warmH2("api.github.com", 443);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(conns(), 1);
      client.close();
      const again = originClientFor(f);
      try {
        // A fresh client knows nothing: none is opened ahead.
        again.warmH2("api.github.com", 443);
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.equal(conns(), 1);
      } finally {
        again.close();
      }
    } finally {
      client.close();
    }
  },
);

originTest(
  "a client whose ClientHello offers h2 gets the origin's HTTP/2 connection opened during its handshake",
  async (f) => {
    const h2Conns = () => f.events.filter((e) => e.ev === "conn" && e.alpn === "h2").length;
    // The first call teaches forgekit that this origin is reached over HTTP/2;
    // the origin then drops that connection.
    const first = await runH2(f, {
      steps: [headers(1, request("/allowed/die", "GET", TE)), { op: "wait", streams: [1] }],
    });
    assert.equal(stream(first, 1).status, 502);
    assert.equal(h2Conns(), 1);
    // A client that only says hello: an HTTP/2 connection is opened for it anyway.
    clean(await runH2(f, { steps: [{ op: "sleep", ms: 300 }] }));
    await f.until(() => h2Conns() === 2, "an HTTP/2 connection opened ahead");
    assert.equal(f.requests().length, 1);
    // An HTTP/1.1 client gets none.
    const h1 = await curl(f, [
      "--http1.1",
      "-sS",
      "-o",
      "/dev/null",
      "https://api.github.com/allowed/x",
    ]);
    assert.equal(h1.code, 0);
    assert.equal(h2Conns(), 2);
  },
);

originTest("a malformed or reset origin response is a 502 on its own stream only", async (f) => {
  const bad = ["/allowed/badlength", "/allowed/connheader", "/allowed/upper", "/allowed/reset"];
  const ids = bad.map((_, i) => 1 + 2 * i);
  const r = await runH2(f, {
    steps: [
      ...bad.map((p, i) => headers(ids[i], request(p, "GET", TE))),
      headers(11, request("/allowed/fine", "GET", TE)),
      { op: "wait", streams: [...ids, 11] },
    ],
  });
  clean(r);
  for (const id of ids) {
    assert.equal(stream(r, id).status, 502, `stream ${id}`);
    assert.equal(header(stream(r, id), "x-proxy-error"), "upstream-error", `stream ${id}`);
  }
  assert.equal(stream(r, 11).status, 200);
  assert.equal(
    new Set(f.requests().map((x) => x.conn)).size,
    1,
    "one origin connection throughout",
  );
  await until("the log lines", () => f.logs.length === 5);
  const reasons = Object.fromEntries(f.logs.map((e) => [new URL(e.url!).pathname, e.reason]));
  assert.match(
    reasons["/allowed/badlength"]!,
    /^upstream error: malformed response: the body does not match its content-length/,
  );
  assert.match(
    reasons["/allowed/connheader"]!,
    /^upstream error: malformed response: connection-specific field connection/,
  );
  assert.match(
    reasons["/allowed/upper"]!,
    /^upstream error: malformed response: invalid field name "X-Upper"/,
  );
  assert.match(
    reasons["/allowed/reset"]!,
    /^upstream error: the origin reset the stream \(INTERNAL_ERROR\)/,
  );
  assert.equal(reasons["/allowed/fine"], undefined);
});

originTest(
  "a stream the origin refused or left out of its GOAWAY is sent again on another connection",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/refuse-once", "GET", TE)),
        { op: "wait", streams: [1] },
        headers(3, request("/allowed/slow", "GET", TE)),
        { op: "sleep", ms: 150 },
        headers(5, request("/allowed/goaway", "GET", TE)),
        { op: "wait", streams: [3, 5] },
      ],
    });
    clean(r);
    assert.deepEqual([1, 3, 5].map((id) => stream(r, id).status), [200, 200, 200]);
    const seen = (path: string) => f.requests().filter((x) => x.path === path).map((x) => x.conn);
    assert.equal(seen("/allowed/refuse-once").length, 2);
    const goaway = seen("/allowed/goaway");
    assert.equal(goaway.length, 2);
    assert.notEqual(goaway[0], goaway[1]);
    // The stream the GOAWAY kept was answered on the old connection.
    assert.deepEqual(seen("/allowed/slow"), [goaway[0]]);
  },
);

originTest(
  "a 1 MiB upload through an origin with a 16 KiB window arrives intact",
  async (f) => {
    const size = 1 << 20;
    const r = await runH2(f, {
      steps: [
        headers(
          1,
          request("/allowed/echo", "POST", [...TE, ["content-length", String(size)]]),
          false,
        ),
        { op: "data", stream: 1, size, end: true },
        { op: "wait", streams: [1], timeout: 20 },
      ],
      timeout: 25,
    });
    clean(r);
    const s = stream(r, 1);
    assert.equal(s.status, 200);
    const echo = JSON.parse(s.body!);
    assert.deepEqual([echo.length, echo.sha256], [size, s.sent.sha256]);
    // The origin's h2 refuses any frame beyond its windows (a flow-control error).
    assert.deepEqual(f.events.filter((e) => e.ev === "error"), []);
    await until("the log line", () => f.logs.length === 1);
    assert.equal(f.logs[0].bytes_out, size);
  },
  { window: 16384 },
);

originTest(
  "a client that opens no window holds the origin back; the body then arrives whole",
  async (f) => {
    const size = 8 << 20;
    const running = runH2(f, {
      settings: { INITIAL_WINDOW_SIZE: 16384 },
      window: "manual",
      steps: [
        headers(1, request(`/allowed/big?size=${size}`, "GET", TE)),
        { op: "sleep", ms: 1500 },
        { op: "window", stream: 0, increment: size },
        { op: "window", stream: 1, increment: size },
        { op: "wait", streams: [1], timeout: 20 },
      ],
      timeout: 25,
    });
    await f.until((e) => e.some((x) => x.ev === "blocked"), "the origin to run out of window");
    const blocked = f.events.find((e) => e.ev === "blocked")!;
    // What forgekit takes in for a client that reads nothing: its stream window (1 MiB).
    assert.ok(blocked.sent! <= 1 << 20, String(blocked.sent));
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(!f.events.some((e) => e.ev === "sent"), "still held back");
    const r = await running;
    clean(r);
    assert.equal(stream(r, 1).length, size);
    await f.until((e) => e.some((x) => x.ev === "sent" && x.sent === size), "the origin to finish");
  },
);

originTest(
  "an origin connection that fails fails its streams in flight (502 upstream error); the next request opens another",
  async (f) => {
    const r = await runH2(f, {
      steps: [
        headers(1, request("/allowed/hang", "GET", TE)),
        { op: "sleep", ms: 300 },
        headers(3, request("/allowed/die", "GET", TE)),
        { op: "wait", streams: [1, 3] },
        headers(5, request("/allowed/after", "GET", TE)),
        { op: "wait", streams: [5] },
      ],
    });
    clean(r);
    for (const id of [1, 3]) {
      assert.equal(stream(r, id).status, 502, `stream ${id}`);
      assert.equal(header(stream(r, id), "x-proxy-error"), "upstream-error");
    }
    assert.equal(stream(r, 5).status, 200);
    assert.equal(r.goaway, null, "the client's connection goes on");
    const conns = f.requests().map((x) => x.conn);
    assert.equal(conns[0], conns[1]);
    assert.notEqual(conns[2], conns[0]);
    await until("the log lines", () => f.logs.length === 3);
    const failed = f.logs.filter((e) => e.status === 502);
    assert.equal(failed.length, 2);
    for (const e of failed) assert.match(e.reason!, /^upstream error: /);
  },
);
