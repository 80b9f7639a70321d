/**
 * The bump-mode upstream client against a scripted TLS origin on loopback:
 * framing (length, chunked with trailers, close-delimited, none), reuse of a
 * kept-alive connection, the retry after an origin closed an idle one, and
 * the refusal of conflicting lengths. Plus the pure framing decisions.
 */
import assert from "node:assert/strict";
import {
  OriginClient,
  OriginProtocolError,
  type OriginResponse,
  parseResponseHead,
  responseFraming,
} from "../lib/bump/origin_client.ts";
import { gatheredReads } from "../lib/bump/socket_io.ts";
import { makeTestCa } from "./support/tls.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

Deno.test("responseFraming follows RFC 9112 §6.3", () => {
  const h = (...pairs: [string, string][]) => pairs;
  const cases: [string, number, [string, string][], string, boolean][] = [
    ["GET", 200, h(["content-length", "5"]), "length:5", true],
    ["HEAD", 200, h(["content-length", "5"]), "none", true],
    ["GET", 204, h(), "none", true],
    ["GET", 304, h(["content-length", "9"]), "none", true],
    ["GET", 200, h(["transfer-encoding", "chunked"]), "chunked", true],
    ["GET", 200, h(["transfer-encoding", "gzip, chunked"]), "chunked", true],
    ["GET", 200, h(["transfer-encoding", "chunked"], ["content-length", "5"]), "chunked", false],
    ["GET", 200, h(["transfer-encoding", "gzip"]), "close", false],
    ["GET", 200, h(), "close", false],
    ["GET", 200, h(["content-length", "5"], ["connection", "close"]), "length:5", false],
    ["GET", 200, h(["content-length", "5, 5"]), "length:5", true],
  ];
  for (const [method, status, headers, want, reusable] of cases) {
    const got = responseFraming(method, status, headers);
    const text = got.framing.kind === "length" ? `length:${got.framing.length}` : got.framing.kind;
    assert.equal(text, want, `${method} ${status} ${JSON.stringify(headers)}`);
    assert.equal(got.reusable, reusable, `${method} ${status} ${JSON.stringify(headers)}`);
  }
  for (const bad of [["5", "6"], ["-1"], ["5x"], ["1e3"]]) {
    assert.throws(
      () => responseFraming("GET", 200, bad.map((v) => ["content-length", v])),
      OriginProtocolError,
    );
  }
});

Deno.test("parseResponseHead rejects malformed heads", () => {
  assert.deepEqual(parseResponseHead("HTTP/1.1 404 Not Found\r\nX-A:  b \r\nSet-Cookie: c"), {
    status: 404,
    statusText: "Not Found",
    headers: [["x-a", "b"], ["set-cookie", "c"]],
  });
  for (
    const bad of [
      "HTTP/2 200 OK",
      "HTTP/1.1 20 OK",
      "HTTP/1.1 200 OK\r\n folded",
      "HTTP/1.1 200\r\nno colon",
      "HTTP/1.1 200\r\nbad name: x",
    ]
  ) {
    assert.throws(() => parseResponseHead(bad), OriginProtocolError, bad);
  }
});

/**
 * A TLS origin that answers each request head with the next scripted reply.
 * It agrees to http/1.1 in ALPN, as HTTP/1.1 servers do; `alpn: false`: it
 * takes no part in ALPN.
 */
async function scriptedOrigin(
  replies: (string | { reply?: string; close: true })[],
  idleMs?: number,
  { alpn = true } = {},
) {
  const ca = await makeTestCa("origin client test CA");
  const leaf = await ca.issue(["127.0.0.1"]);
  const listener = Deno.listenTls({
    hostname: "127.0.0.1",
    port: 0,
    cert: leaf.cert,
    key: leaf.key,
    alpnProtocols: alpn ? ["http/1.1"] : undefined,
  });
  const heads: string[] = [];
  let accepted = 0;
  const serving = (async () => {
    for await (const conn of listener) {
      accepted++;
      (async () => {
        const buf = new Uint8Array(65536);
        let pending = "";
        for (;;) {
          const n = await conn.read(buf);
          if (n === null) break;
          pending += dec.decode(buf.subarray(0, n));
          let end: number;
          while ((end = pending.indexOf("\r\n\r\n")) !== -1) {
            heads.push(pending.slice(0, end));
            pending = pending.slice(end + 4);
            const reply = replies.shift();
            if (reply === undefined || typeof reply !== "string") {
              if (reply?.reply) await conn.write(enc.encode(reply.reply));
              conn.close();
              return;
            }
            // A write may take part of a large reply.
            for (let b = enc.encode(reply); b.byteLength;) b = b.subarray(await conn.write(b));
          }
        }
        conn.close();
      })().catch(() => {});
    }
  })();
  const client = new OriginClient({
    caCerts: [ca.cert],
    upstream: { noProxy: [] },
    idleMs,
  });
  const port = listener.addr.port;
  const request = (target: string, method = "GET") =>
    client.request({
      host: "127.0.0.1",
      port,
      method,
      target,
      headers: [["x-test", "1"]],
      body: null,
    });
  return {
    heads,
    accepted: () => accepted,
    /** The response as the client gives it (a sized body is the caller's to read). */
    request,
    get: async (target: string, method = "GET") => {
      const res = await request(target, method);
      const body = res.body === null
        ? ""
        : res.body instanceof Uint8Array
        ? dec.decode(res.body)
        : await new Response(res.body).text();
      return { ...res, text: body };
    },
    async close() {
      client.close();
      listener.close();
      await serving.catch(() => {});
    },
  };
}

Deno.test("the origin client frames bodies and reuses one kept-alive connection", async () => {
  const o = await scriptedOrigin([
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
    "HTTP/1.1 204 No Content\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n",
  ]);
  try {
    const a = await o.get("/a?x=1");
    assert.equal(a.status, 200);
    assert.equal(a.text, "hello");
    const b = await o.get("/b");
    assert.equal(b.text, "abcde");
    const c = await o.get("/c");
    assert.equal(c.status, 204);
    assert.equal(c.body, null);
    const d = await o.get("/d", "HEAD");
    assert.equal(d.body, null);
    assert.deepEqual(d.headers, [["content-length", "42"]]);
    assert.equal(o.accepted(), 1);
    assert.match(o.heads[0], /^GET \/a\?x=1 HTTP\/1\.1\r\nhost: 127\.0\.0\.1:\d+\r\nx-test: 1$/);
  } finally {
    await o.close();
  }
});

Deno.test("an origin that takes no part in ALPN (it may speak only HTTP/2) costs one more handshake, once", async () => {
  const o = await scriptedOrigin(
    [
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb",
    ],
    undefined,
    { alpn: false },
  );
  try {
    assert.equal((await o.get("/1")).text, "a");
    // Its answer without ALPN to an offer of http/1.1 alone left it open
    // whether it speaks HTTP/1.1; offered h2 too on a second connection, it
    // still picked nothing: HTTP/1.1, remembered.
    assert.equal(o.accepted(), 2);
    assert.equal((await o.get("/2")).text, "b");
    assert.equal(o.accepted(), 2);
  } finally {
    await o.close();
  }
});

Deno.test("a body-less request is retried once when the origin closed the idle connection", async () => {
  const o = await scriptedOrigin([
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    { close: true },
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain",
  ]);
  try {
    assert.equal((await o.get("/1")).text, "ok");
    assert.equal((await o.get("/2")).text, "again");
    assert.equal(o.accepted(), 2);
  } finally {
    await o.close();
  }
});

Deno.test("a sized body read whole gives its connection back to the pool; one cut short closes it", async () => {
  const big = "b".repeat(200_000);
  const sized = `HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n${big}`;
  const small = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const o = await scriptedOrigin([sized, small, sized, small]);
  /** Reads `want` bytes of a sized body (all of it when undefined), then hands it back. */
  const read = async (res: OriginResponse, want?: number) => {
    const s = res.sized!;
    let got = s.buffered.byteLength;
    const limit = (want ?? s.length) - got;
    for await (const piece of gatheredReads(s.conn, limit)) got += piece.byteLength;
    s.ended(got);
    return got;
  };
  try {
    const whole = await o.request("/big");
    assert.ok(whole.sized, "a body this large comes sized");
    assert.equal(await read(whole), big.length);
    assert.equal((await o.get("/small")).text, "ok");
    assert.equal(o.accepted(), 1, "the download's connection carried the next request");

    const cut = await o.request("/big");
    assert.equal(await read(cut, 70_000), 70_000);
    assert.equal((await o.get("/small")).text, "ok");
    assert.equal(o.accepted(), 2, "a body cut short leaves unread bytes: its connection is closed");
  } finally {
    await o.close();
  }
});

Deno.test("conflicting lengths and close-delimited bodies", async () => {
  const o = await scriptedOrigin([
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
  ]);
  try {
    await assert.rejects(o.get("/x"), OriginProtocolError);
  } finally {
    await o.close();
  }
  const p = await scriptedOrigin([{ reply: "HTTP/1.1 200 OK\r\n\r\nuntil the end", close: true }]);
  try {
    const res = await Promise.race([
      p.get("/y"),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error("hung")), 3000)),
    ]);
    assert.equal(res.status, 200);
    assert.equal(res.text, "until the end");
  } finally {
    await p.close();
  }
});

Deno.test("a connection idle longer than idleMs is not reused", async () => {
  const reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const o = await scriptedOrigin([reply, reply, reply], 200);
  try {
    await o.get("/1");
    await o.get("/2");
    assert.equal(o.accepted(), 1);
    await new Promise((r) => setTimeout(r, 300));
    await o.get("/3");
    assert.equal(o.accepted(), 2);
  } finally {
    await o.close();
  }
});

/**
 * TLS origins that answer every request "ok" (reading a request body of its
 * Content-Length first) and, like Apache or Node, close a kept-alive
 * connection that stays idle for `idleCloseMs`.
 */
async function closingOrigins(count: number, idleCloseMs: number) {
  const ca = await makeTestCa("origin pool test CA");
  const leaf = await ca.issue(["127.0.0.1"]);
  const origins = Array.from({ length: count }, () => {
    const listener = Deno.listenTls({
      hostname: "127.0.0.1",
      port: 0,
      ...leaf,
      alpnProtocols: ["http/1.1"],
    });
    const o = { port: listener.addr.port, accepted: 0, listener, serving: Promise.resolve() };
    o.serving = (async () => {
      for await (const conn of listener) {
        o.accepted++;
        (async () => {
          const buf = new Uint8Array(65536);
          let pending = "";
          let timer = setTimeout(() => conn.close(), idleCloseMs);
          for (;;) {
            const n = await conn.read(buf);
            if (n === null) break;
            clearTimeout(timer);
            pending += dec.decode(buf.subarray(0, n));
            let end: number;
            while ((end = pending.indexOf("\r\n\r\n")) !== -1) {
              const length = Number(/content-length: (\d+)/i.exec(pending.slice(0, end))?.[1] ?? 0);
              if (pending.length < end + 4 + length) break;
              pending = pending.slice(end + 4 + length);
              await conn.write(enc.encode("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
            }
            timer = setTimeout(() => conn.close(), idleCloseMs);
          }
          clearTimeout(timer);
          conn.close();
        })().catch(() => {});
      }
    })().catch(() => {});
    return o;
  });
  return { ca, origins };
}

async function send(client: OriginClient, port: number, body: string | null = null) {
  const res = await client.request({
    host: "127.0.0.1",
    port,
    method: body === null ? "GET" : "POST",
    target: "/",
    headers: body === null ? [] : [["content-length", String(body.length)]],
    body: body === null ? null : new Response(body).body,
  });
  const text = res.body instanceof Uint8Array ? dec.decode(res.body) : String(res.body);
  return `${res.status} ${text}`;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("an idle connection the origin closes leaves the pool at once: a POST after it is not lost", async () => {
  const { ca, origins: [o] } = await closingOrigins(1, 150);
  const client = new OriginClient({ caCerts: [ca.cert], upstream: { noProxy: [] } });
  try {
    assert.equal(await send(client, o.port), "200 ok");
    await sleep(400); // the origin has closed the pooled connection
    // A request with a body is never retried, so it must not be sent on the dead connection.
    assert.equal(await send(client, o.port, "a body"), "200 ok");
    assert.equal(o.accepted, 2);
  } finally {
    client.close();
    o.listener.close();
    await o.serving;
  }
});

Deno.test("a warmed connection the origin closed before any request is not used", async () => {
  const { ca, origins: [o] } = await closingOrigins(1, 150);
  const client = new OriginClient({ caCerts: [ca.cert], upstream: { noProxy: [] } });
  try {
    client.warm("127.0.0.1", o.port); // a CONNECT whose client then sent nothing
    await sleep(400);
    assert.equal(o.accepted, 1);
    assert.equal(await send(client, o.port), "200 ok");
    assert.equal(o.accepted, 2);
  } finally {
    client.close();
    o.listener.close();
    await o.serving;
  }
});

Deno.test("a pooled connection idle past idleMs does not stop a connection being opened ahead", async () => {
  // The sweep comes every idleMs / 2, so the pool may hold a connection
  // that the next request closes unused. warm() used to see it and open
  // nothing, and that request then opened its own connection, its first
  // bytes riding on the TLS handshake.
  const { ca, origins: [o] } = await closingOrigins(1, 60_000);
  const client = new OriginClient({ caCerts: [ca.cert], upstream: { noProxy: [] }, idleMs: 2000 });
  try {
    assert.equal(await send(client, o.port), "200 ok"); // the sweep: every 1000 ms from here
    await sleep(500);
    assert.equal(await send(client, o.port), "200 ok"); // pooled at 500 ms: swept at 3000 ms
    await sleep(2250); // idle for 2250 ms, past idleMs, still pooled
    client.warm("127.0.0.1", o.port);
    await sleep(150);
    assert.equal(o.accepted, 2, "a connection is opened ahead");
    assert.equal(await send(client, o.port), "200 ok");
    assert.equal(o.accepted, 2, "the request takes it");
  } finally {
    client.close();
    o.listener.close();
    await o.serving;
  }
});

Deno.test("idle connections are bounded in all: the least recently used origin's goes first", async () => {
  const { ca, origins } = await closingOrigins(3, 60_000);
  const client = new OriginClient({
    caCerts: [ca.cert],
    upstream: { noProxy: [] },
    maxIdleTotal: 2,
  });
  try {
    for (const o of origins) assert.equal(await send(client, o.port), "200 ok");
    // Three idle connections, two kept: the first origin's was closed.
    for (const o of [origins[2], origins[1], origins[0]]) {
      assert.equal(await send(client, o.port), "200 ok");
    }
    assert.deepEqual(origins.map((o) => o.accepted), [2, 1, 1]);
  } finally {
    client.close();
    for (const o of origins) o.listener.close();
    await Promise.all(origins.map((o) => o.serving));
  }
});

Deno.test("a connection opened ahead whose TLS handshake fails gives its slot back", async () => {
  // An "origin" that is not TLS: accepts and closes at once.
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  (async () => {
    for await (const c of l) c.close();
  })().catch(() => {});
  const client = new OriginClient({ caCerts: [], upstream: { noProxy: [] }, maxConnections: 4 });
  try {
    for (let i = 0; i < 4; i++) {
      client.warm("127.0.0.1", port);
      for (let t = 0; t < 100 && client.openConnections > 0; t++) await sleep(10);
    }
    // Before: each failed warm kept its slot, and every later request waited for ever.
    assert.equal(client.openConnections, 0);
  } finally {
    client.close();
    l.close();
  }
});
