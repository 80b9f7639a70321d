/**
 * The adopted HTTP/1.1 route of `--ssl-bump`: a client that offers only
 * http/1.1 gets TLS on its own connection and forgekit's HTTP/1.1 server
 * (`lib/bump/h1_server.ts`). Raw TLS clients write exact bytes (pipelined
 * requests, chunked bodies, ambiguous framing, Expect) and read exact
 * answers; curl moves the large bodies.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { answerLate, curl, echoLatin, startBumpFixture } from "./support/bump.ts";
import { RawH1 as Raw } from "./support/raw_h1.ts";
import { concat } from "../lib/bump/conn_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const ALLOW = ["https://api.github.com/allowed/*"];

async function sha256(bytes: Uint8Array | ArrayBuffer): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as BufferSource);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

const get = (path: string, extra = "") =>
  `GET ${path} HTTP/1.1\r\nHost: api.github.com\r\n${extra}\r\n`;

Deno.test("pipelined requests on one connection are answered in order and judged one by one", async () => {
  const f = await startBumpFixture(ALLOW);
  const c = await Raw.open(f);
  try {
    await c.write(get("/allowed/1") + get("/secret"));
    const ok = await c.response();
    assert.equal(ok.status, 200);
    assert.equal(dec.decode(ok.body), "origin /allowed/1\n");
    const no = await c.response();
    assert.equal(no.status, 403);
    assert.equal(no.headers.get("x-proxy-error"), "blocked-by-url-policy");
    assert.deepEqual(f.originPaths(), ["/allowed/1"]);
    assert.ok(
      f.debug.some((l) => l.includes("HTTP/1.1 (on the client connection)")),
      f.debug.join("\n"),
    );
  } finally {
    c.close();
    await f.close();
  }
});

/** Answers with the size and content of the request body the origin received. */
const echoBody = (_req: Request, hit: { method: string; body: string }) =>
  new Response(`${hit.method} ${hit.body.length}:${hit.body}`);

Deno.test("request bodies framed by Content-Length and by chunks reach the origin intact", async () => {
  const f = await startBumpFixture(ALLOW, echoBody);
  const c = await Raw.open(f);
  try {
    await c.write(
      "POST /allowed/cl HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 11\r\n\r\nhello world" +
        "POST /allowed/te HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n" +
        "5\r\nfirst\r\n8;ext=1\r\n, second\r\n0\r\n\r\n",
    );
    assert.equal(dec.decode((await c.response()).body), "POST 11:hello world");
    assert.equal(dec.decode((await c.response()).body), "POST 13:first, second");
    assert.deepEqual(f.origins.hits.map((h) => [h.path, h.body]), [
      ["/allowed/cl", "hello world"],
      ["/allowed/te", "first, second"],
    ]);
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a 3 MiB upload with curl reaches the origin byte for byte", async () => {
  const f = await startBumpFixture(ALLOW, async (req) => {
    const got = new Uint8Array(await req.arrayBuffer());
    return new Response(`${got.byteLength} ${await sha256(got)}`);
  });
  const file = await Deno.makeTempFile({ prefix: "fw-upload-" });
  try {
    const data = new Uint8Array(3 * 1024 * 1024);
    for (let at = 0; at < data.byteLength; at += 65536) {
      crypto.getRandomValues(data.subarray(at, at + 65536));
    }
    await Deno.writeFile(file, data);
    const r = await curl(f, [
      "--http1.1",
      "--data-binary",
      `@${file}`,
      "https://api.github.com/allowed/upload",
    ]);
    assert.equal(r.out, `${data.byteLength} ${await sha256(data)}`);
  } finally {
    await Deno.remove(file);
    await f.close();
  }
});

Deno.test("a streamed response without a length reaches curl whole, in chunks", async () => {
  const piece = new Uint8Array(64 * 1024);
  const pieces = Array.from({ length: 32 }, (_, i) => piece.map((_, j) => (i * 7 + j) & 0xff));
  const f = await startBumpFixture(ALLOW, () =>
    new Response(
      new ReadableStream({
        pull(c) {
          const next = pieces.shift();
          next ? c.enqueue(next) : c.close();
        },
      }),
    ));
  const out = join(f.sessionDir, "download");
  const want = await sha256(concat(pieces));
  try {
    const r = await curl(f, [
      "--http1.1",
      "-o",
      out,
      "-w",
      "%{http_code} %{size_download} %header{transfer-encoding}",
      "https://api.github.com/allowed/stream",
    ]);
    assert.equal(r.out, `200 ${2 * 1024 * 1024} chunked`);
    assert.equal(await sha256(await Deno.readFile(out)), want);
  } finally {
    await f.close();
  }
});

Deno.test("an HTTP/1.0 client (ALPN http/1.0 only) is served; without chunks, the end of a body of unknown length closes", async () => {
  const f = await startBumpFixture(ALLOW, (req) =>
    new Response(
      new ReadableStream({
        start(c) {
          c.enqueue(enc.encode(`origin ${new URL(req.url).pathname}\n`));
          c.close();
        },
      }),
    ));
  try {
    // curl --http1.0 offers ALPN http/1.0 alone: the handshake was refused
    // (no_application_protocol) when forgekit offered only h2 and http/1.1.
    const r = await curl(f, ["--http1.0", "-sS", "-D", "-", "https://api.github.com/allowed/old"]);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /\r\nHTTP\/1\.1 200 OK\r\n/i);
    assert.match(r.out, /\r\nconnection: close\r\n/i);
    assert.doesNotMatch(r.out, /transfer-encoding/i);
    assert.match(r.out, /\r\n\r\norigin \/allowed\/old\n$/);
    const no = await curl(f, ["--http1.0", "-sS", "-D", "-", "https://api.github.com/secret"]);
    assert.match(no.out, /\r\nHTTP\/1\.1 403 /);
    assert.deepEqual(f.originPaths(), ["/allowed/old"]);
  } finally {
    await f.close();
  }
});

Deno.test("a HEAD response has the origin's length and no body before the next response", async () => {
  const f = await startBumpFixture(ALLOW);
  const c = await Raw.open(f);
  try {
    await c.write(
      "HEAD /allowed/h HTTP/1.1\r\nHost: api.github.com\r\n\r\n" + get("/allowed/g"),
    );
    const head = await c.response("HEAD");
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-length"), String("origin /allowed/h\n".length));
    const next = await c.response();
    assert.equal(next.status, 200);
    assert.equal(dec.decode(next.body), "origin /allowed/g\n");
    assert.deepEqual(f.origins.hits.map((h) => `${h.method} ${h.path}`), [
      "HEAD /allowed/h",
      "GET /allowed/g",
    ]);
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("ambiguous framing, a bare LF in a field and a missing Host get 400 and a close", async () => {
  const f = await startBumpFixture(ALLOW);
  const heads: [string, RegExp][] = [
    [
      "POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 5\r\n" +
      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      /both Transfer-Encoding and Content-Length/,
    ],
    [
      "GET /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nX-A: a" + "\n" + "Host: evil\r\n\r\n",
      /control character in the X-A field/,
    ],
    ["GET /allowed/x HTTP/1.1\r\nX-A: a\r\n\r\n", /no Host field/],
  ];
  try {
    for (const [bytes, why] of heads) {
      const c = await Raw.open(f);
      try {
        await c.write(bytes);
        const r = await c.response();
        assert.equal(r.status, 400, bytes);
        assert.match(dec.decode(r.body), why);
        assert.equal(r.headers.get("connection"), "close");
        assert.ok(await c.closedByServer(), bytes);
      } finally {
        c.close();
      }
    }
    assert.deepEqual(f.originPaths(), []);
  } finally {
    await f.close();
  }
});

const postHead = (path: string, length: number) =>
  `POST ${path} HTTP/1.1\r\nHost: api.github.com\r\nExpect: 100-continue\r\n` +
  `Content-Length: ${length}\r\n\r\n`;

Deno.test("a chunked body that breaks its framing gets 400 (the client's fault, not 502) and a close", async () => {
  const f = await startBumpFixture(ALLOW, (req) => req.text().then((t) => new Response(t)));
  const post = "POST /allowed/up HTTP/1.1\r\nHost: api.github.com\r\n" +
    "Transfer-Encoding: chunked\r\n\r\n";
  const bodies: [string, string][] = [
    ["5\r\nhelloX\r\n0\r\n\r\n", "a chunk not followed by CRLF"],
    ["zz\r\nhello\r\n0\r\n\r\n", 'invalid chunk size "zz"'],
    [`5;${"x".repeat(5000)}\r\nhello\r\n0\r\n\r\n`, "a chunk line is too long"],
  ];
  try {
    for (const [body, why] of bodies) {
      const c = await Raw.open(f);
      try {
        await c.write(post + body);
        const r = await c.response();
        assert.equal(r.status, 400, body.slice(0, 20));
        assert.equal(dec.decode(r.body), `Bad request: ${why}\n`);
        assert.equal(r.headers.get("connection"), "close");
        assert.ok(await c.closedByServer());
      } finally {
        c.close();
      }
    }
    assert.deepEqual(
      f.logs.map((e) => [e.status, e.reason]),
      bodies.map(([, why]) => [400, `bad request body: ${why}`]),
    );
  } finally {
    await f.close();
  }
});

Deno.test("Expect: 100-continue to an allowed path is answered before the body is sent", async () => {
  const f = await startBumpFixture(ALLOW, echoBody);
  const c = await Raw.open(f);
  try {
    await c.write(postHead("/allowed/up", 7));
    assert.equal((await c.response()).status, 100);
    await c.write("payload");
    const r = await c.response();
    assert.equal(r.status, 200);
    assert.equal(dec.decode(r.body), "POST 7:payload");
    assert.deepEqual(f.origins.hits.map((h) => h.body), ["payload"]);
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("Expect: 100-continue to a disallowed path gets 403, no 100, and a close", async () => {
  const f = await startBumpFixture(ALLOW);
  const c = await Raw.open(f);
  try {
    await c.write(postHead("/secret", 7));
    const r = await c.response();
    assert.equal(r.status, 403);
    assert.equal(r.headers.get("x-proxy-error"), "blocked-by-url-policy");
    assert.equal(r.headers.get("connection"), "close");
    assert.ok(await c.closedByServer());
    assert.deepEqual(f.originPaths(), []);
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a partial head gets 408 after the head timeout; an idle connection is closed", async () => {
  const f = await startBumpFixture(ALLOW, undefined, { headTimeoutMs: 300 });
  const conns: Raw[] = [];
  try {
    let started = performance.now();
    const partial = await Raw.open(f);
    conns.push(partial);
    await partial.write("GET /allowed/x HTTP/1.1\r\nHost: api.git");
    const r = await partial.response();
    assert.equal(r.status, 408);
    assert.match(dec.decode(r.body), /incomplete request head/);
    assert.ok(performance.now() - started >= 290, `408 after ${performance.now() - started} ms`);
    assert.ok(await partial.closedByServer());

    started = performance.now();
    const idle = await Raw.open(f);
    conns.push(idle);
    assert.ok(await idle.closedByServer()); // with no answer at all
    assert.ok(performance.now() - started >= 290, `closed after ${performance.now() - started} ms`);
    assert.deepEqual(f.originPaths(), []);
  } finally {
    for (const c of conns) c.close();
    await f.close();
  }
});

Deno.test("an absolute-form target must name the authority the Host names", async () => {
  const f = await startBumpFixture(ALLOW);
  const ok = await Raw.open(f);
  const bad = await Raw.open(f);
  try {
    await ok.write(get("https://api.github.com/allowed/abs"));
    const r = await ok.response();
    assert.equal(r.status, 200);
    assert.equal(dec.decode(r.body), "origin /allowed/abs\n");
    await bad.write(get("https://other.github.com/allowed/abs"));
    const no = await bad.response();
    assert.equal(no.status, 400);
    assert.match(dec.decode(no.body), /the Host field differs from the target/);
    assert.ok(await bad.closedByServer());
    assert.deepEqual(f.originPaths(), ["/allowed/abs"]);
  } finally {
    ok.close();
    bad.close();
    await f.close();
  }
});

Deno.test("Connection: close from the client is answered with connection: close, then a close", async () => {
  const f = await startBumpFixture(ALLOW);
  const c = await Raw.open(f);
  try {
    await c.write(get("/allowed/last", "Connection: close\r\n"));
    const r = await c.response();
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("connection"), "close");
    assert.equal(dec.decode(r.body), "origin /allowed/last\n");
    assert.ok(await c.closedByServer());
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a request body cut short fails that request only; the proxy serves the next client", async () => {
  const f = await startBumpFixture(ALLOW, (req) => req.text().then((t) => new Response(t)));
  const c = await Raw.open(f);
  try {
    await c.write(
      "POST /allowed/x HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 100\r\n\r\n0123456789",
    );
    c.close(); // 90 bytes short
    const next = await Raw.open(f);
    try {
      await next.write(get("/allowed/y"));
      assert.equal((await next.response()).status, 200);
    } finally {
      next.close();
    }
  } finally {
    await f.close();
  }
});

/** A fixture whose origin answers /allowed/big with `body`, other paths with their name. */
const startBigFixture = (body: Uint8Array<ArrayBuffer>) =>
  startBumpFixture(
    ALLOW,
    (req) =>
      new URL(req.url).pathname === "/allowed/big"
        ? new Response(body)
        : new Response(`origin ${new URL(req.url).pathname}\n`),
  );

Deno.test("a large sized response ends at its length and the connection carries the next request", async () => {
  const big = crypto.getRandomValues(new Uint8Array(65536)).slice(0, 50_000);
  const body = new Uint8Array(1 << 20).map((_, i) => big[i % big.length]);
  const f = await startBigFixture(body);
  const c = await Raw.open(f);
  try {
    await c.write(get("/allowed/big") + get("/allowed/small"));
    const first = await c.response();
    assert.equal(first.headers.get("content-length"), String(body.byteLength));
    assert.equal(await sha256(first.body), await sha256(body));
    const second = await c.response();
    assert.equal(dec.decode(second.body), "origin /allowed/small\n");
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("after a large download the origin connection carries the next client's requests", async () => {
  const body = new Uint8Array(1 << 20).fill(120);
  for (const http of ["--http1.1", "--http2"]) {
    const f = await startBigFixture(body);
    try {
      const big = await curl(f, [
        http,
        "-w",
        "%{size_download}",
        "-o",
        "/dev/null",
        "https://api.github.com/allowed/big",
      ]);
      assert.equal(big.out, String(body.byteLength), http);
      for (const path of ["/allowed/1", "/allowed/2"]) {
        const small = await curl(f, [http, `https://api.github.com${path}`]);
        assert.equal(small.out, `origin ${path}\n`, http);
      }
      const opened = f.origins.proxy.hits.filter((h) => h.target === "api.github.com:443");
      assert.equal(opened.length, 1, `${http}: one origin connection for all three clients`);
    } finally {
      await f.close();
    }
  }
});

Deno.test("a Host that is not a host name or address gets 400", async () => {
  const f = await startBumpFixture(ALLOW);
  const c = await Raw.open(f);
  try {
    await c.write("GET /x HTTP/1.1\r\nHost: api.github.com/allowed\r\n\r\n");
    const r = await c.response();
    assert.equal(r.status, 400);
    assert.match(dec.decode(r.body), /invalid Host/);
    assert.deepEqual(f.originPaths(), []);
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a sized response that pauses is passed on as it comes, not held back to gather more", async () => {
  const part = new Uint8Array(48 * 1024).fill(7); // whole TLS records; the body is over 64 KiB
  const { promise: received, resolve: clientHasPart } = Promise.withResolvers<void>();
  const f = await startBumpFixture(ALLOW, () => {
    const body = new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(part);
        await received; // the rest only once the client has the first part
        c.enqueue(part);
        c.close();
      },
    });
    return new Response(body, { headers: { "content-length": String(2 * part.byteLength) } });
  });
  const c = await Raw.open(f);
  try {
    await c.write(get("/allowed/slow"));
    const head = await c.head();
    assert.equal(head.headers.get("content-length"), String(2 * part.byteLength));
    assert.deepEqual(await c.take(part.byteLength), part); // fails after READ_MS if held back
    clientHasPart();
    assert.deepEqual(await c.take(part.byteLength), part);
  } finally {
    clientHasPart();
    c.close();
    await f.close();
  }
});

Deno.test("a client that closes while its request is with the origin cancels that request", async () => {
  const ends: string[] = [];
  const f = await startBumpFixture(ALLOW, (req) => answerLate(req, ends));
  try {
    const c = await Raw.open(f);
    await c.write(get("/allowed/hang"));
    while (f.originPaths().length === 0) await new Promise((r) => setTimeout(r, 10));
    c.close();
    const until = Date.now() + 2000;
    while (ends.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(ends, ["given up"], "the origin saw its request given up at once");
    while (f.logs.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(
      f.logs.map((e) => [e.url, e.status, e.reason]),
      [["https://api.github.com/allowed/hang", null, "cancelled by the client"]],
    );
  } finally {
    await f.close();
  }
});

Deno.test("obs-text bytes in field values pass through unchanged both ways", async () => {
  // Bytes 0x80-0xFF in a field value (RFC 9110 §5.5 obs-text) are opaque
  // data: a proxy must not re-encode them (as UTF-8, say).
  const f = await startBumpFixture(ALLOW, echoLatin);
  const c = await Raw.open(f);
  try {
    await c.write(concat([
      enc.encode("GET /allowed/latin HTTP/1.1\r\nHost: api.github.com\r\nX-Latin: caf"),
      new Uint8Array([0xe9, 0x20, 0x80, 0xff]),
      enc.encode("\r\n\r\n"),
    ]));
    const r = await c.response();
    assert.equal(r.status, 200);
    // The origin got exactly the four bytes sent after "caf".
    assert.equal(dec.decode(r.body), "63 61 66 e9 20 80 ff\n");
    // And its reply's bytes came back as they were (read as latin1 here).
    assert.deepEqual(
      [...(r.headers.get("x-echo") ?? "")].map((ch) => ch.charCodeAt(0)),
      [0x63, 0x61, 0x66, 0xe9, 0x20, 0x80, 0xff],
    );
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a sized download the client abandons is logged with the bytes it got, not its length", async () => {
  const body = new Uint8Array(64 << 20); // far more than the socket buffers hold
  const f = await startBumpFixture(ALLOW, () => new Response(body));
  const c = await Raw.open(f);
  try {
    await c.write(get("/allowed/big"));
    // Read a little, then go away.
    const buf = new Uint8Array(65536);
    let got = 0;
    while (got < 1 << 20) got += (await c.conn.read(buf)) ?? 1 << 20;
    c.close();
    const end = performance.now() + 5000;
    while (f.logs.length === 0 && performance.now() < end) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const e = f.logs[0];
    assert.ok(e, "logged");
    assert.equal(e.status, 200);
    assert.ok(e.bytes_in < body.byteLength / 2, `bytes_in ${e.bytes_in}`);
    assert.equal(e.reason, "the response did not reach the client whole");
  } finally {
    c.close();
    await f.close();
  }
});
