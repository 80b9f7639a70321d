/**
 * The firewall's proxy on a real socket, driven with raw bytes (what curl
 * will not send): oversized heads and ambiguous request framing are refused
 * with a complete response before anything reaches upstream. The upstream is
 * the test proxy (HTTP_PROXY), so a forwarded request would be recorded.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { AccessLog } from "../lib/bump/access_log.ts";
import { listenProxy } from "../lib/bump/node_conn.ts";
import { MAX_HEAD } from "../lib/bump/http_head.ts";
import { type ProxyOptions, serveProxy, splice } from "../lib/bump/proxy.ts";
import { dialTunnel, proxyEnv } from "../lib/bump/upstream.ts";
import { startOrigins } from "./support/origin.ts";
import { concat } from "../lib/bump/conn_io.ts";
import { startTestProxy } from "./support/proxy.ts";
import { until } from "./support/until.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The proxy on loopback allowing allowed.example, its access log in a temporary directory. */
async function startProxy(
  tlsOnAccepted: boolean,
  options: Pick<ProxyOptions, "upstream" | "bump" | "headTimeoutMs">,
) {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-proxytest-" });
  const log = new AccessLog(join(dir, "access.log"));
  const listener = await listenProxy({ hostname: "127.0.0.1", port: 0 }, tlsOnAccepted);
  const serving = serveProxy(listener, {
    policy: { allow: ["allowed.example"], block: [] },
    log,
    ...options,
  });
  return {
    port: (listener.addr as Deno.NetAddr).port,
    log,
    logPath: join(dir, "access.log"),
    async close() {
      listener.close();
      await serving;
      log.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Runs `fn` against the proxy on each of its listeners (Deno's, and node:net for --ssl-bump). */
async function withProxy(
  fn: (send: (raw: string | string[]) => Promise<string>, hits: () => number) => Promise<void>,
  headTimeoutMs?: number,
  upstreamUrl?: string,
): Promise<void> {
  for (const tlsOnAccepted of [false, true]) {
    await withProxyOn(tlsOnAccepted, fn, headTimeoutMs, upstreamUrl);
  }
}

/** `upstreamUrl`: the HTTP_PROXY instead of the test proxy in front of the origins. */
async function withProxyOn(
  tlsOnAccepted: boolean,
  fn: (send: (raw: string | string[]) => Promise<string>, hits: () => number) => Promise<void>,
  headTimeoutMs?: number,
  upstreamUrl?: string,
): Promise<void> {
  const o = await startOrigins(["allowed.example"], (_req, hit) => new Response(`hi ${hit.path}`));
  const proxy = await startProxy(tlsOnAccepted, {
    upstream: proxyEnv((n) => n === "HTTP_PROXY" ? upstreamUrl ?? o.proxy.url : undefined),
    bump: null,
    headTimeoutMs,
  });
  /** Sends `raw` (parts: 100 ms apart) and reads the answer to its end. */
  const send = async (raw: string | string[]) => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
    try {
      for (const [i, part] of [raw].flat().entries()) {
        if (i > 0) await new Promise((r) => setTimeout(r, 100));
        // A byte string: each character one byte (obs-text as it is).
        await conn.write(Uint8Array.from(part, (c) => c.charCodeAt(0))).catch(() => {});
      }
      const chunks: Uint8Array[] = [];
      const buf = new Uint8Array(65536);
      for (let n = await conn.read(buf); n !== null; n = await conn.read(buf).catch(() => null)) {
        chunks.push(buf.slice(0, n));
      }
      return chunks.map((c) => dec.decode(c)).join("");
    } finally {
      conn.close();
    }
  };
  try {
    await fn(send, () => o.hits.length);
  } finally {
    await proxy.close();
    await o.close();
  }
}

Deno.test("a well-formed plain-HTTP request is forwarded (the fixture works)", async () => {
  await withProxy(async (send, hits) => {
    const res = await send(
      "GET http://allowed.example/ok HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
    );
    assert.match(res, /^HTTP\/1\.1 200 /);
    assert.match(res, /hi \/ok$/);
    assert.equal(hits(), 1);
  });
});

Deno.test("ambiguous framing is refused with 400 before anything reaches upstream", async () => {
  await withProxy(async (send, hits) => {
    const smuggle =
      "0\r\n\r\nGET http://allowed.example/second HTTP/1.1\r\nHost: allowed.example\r\n\r\n";
    for (
      const [headers, why] of [
        [
          "Transfer-Encoding: chunked\r\nContent-Length: 5",
          /both Transfer-Encoding and Content-Length/,
        ],
        ["Content-Length: 5\r\nContent-Length: 7", /conflicting Content-Length values 5, 7/],
        ["Content-Length: -1", /Content-Length -1/],
        ["Transfer-Encoding: chunked, identity", /does not end in chunked/],
      ] as const
    ) {
      const res = await send(
        `POST http://allowed.example/first HTTP/1.1\r\nHost: allowed.example\r\n${headers}\r\n\r\n${smuggle}`,
      );
      assert.match(res, /^HTTP\/1\.1 400 Bad Request\r\n/, headers);
      assert.match(res, /Connection: close/);
      assert.match(res, why);
    }
    assert.equal(hits(), 0, "nothing was forwarded");
  });
});

/**
 * An upstream proxy that records the bytes of each connection (until 300 ms
 * pass without more) and answers 200 "ok": what forgekit passed on, exactly.
 */
function startRecordingUpstream(): { url: string; got: Uint8Array[]; close(): Promise<void> } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const got: Uint8Array[] = [];
  const conns = new Set<Deno.Conn>();
  const serve = async (c: Deno.Conn) => {
    conns.add(c);
    const parts: Uint8Array[] = [];
    const buf = new Uint8Array(65536);
    try {
      for (;;) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const quiet = new Promise<"quiet">((r) => timer = setTimeout(() => r("quiet"), 300));
        const n = await Promise.race([c.read(buf), quiet]);
        clearTimeout(timer);
        if (n === "quiet" || n === null) break;
        parts.push(buf.slice(0, n));
      }
      got.push(concat(parts));
      await c.write(
        enc.encode("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"),
      );
    } catch {
      // forgekit went away
    } finally {
      conns.delete(c);
      c.close();
    }
  };
  const accepting = (async () => {
    for await (const c of listener) serve(c);
  })();
  return {
    url: `http://127.0.0.1:${listener.addr.port}`,
    got,
    async close() {
      listener.close();
      await accepting;
      while (conns.size) await new Promise((r) => setTimeout(r, 20));
    },
  };
}

/** Bytes as a byte string (each byte one code unit). */
const byteString = (b: Uint8Array) => String.fromCharCode(...b);

Deno.test("plain HTTP goes upstream as checked: the URL's Host, the request's own body, nothing after it", async () => {
  const up = startRecordingUpstream();
  const smuggled = "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n";
  const cases: [string, string, RegExp][] = [
    [
      "a Host naming another site",
      "GET http://allowed.example/a HTTP/1.1\r\nHost: evil.example\r\nX-A: 1\r\n\r\n",
      /^GET http:\/\/allowed\.example\/a HTTP\/1\.1\r\nHost: allowed\.example\r\nx-a: 1\r\nConnection: close\r\n\r\n$/,
    ],
    [
      "a second request after a sized body",
      `POST http://allowed.example/b HTTP/1.1\r\nHost: allowed.example\r\nContent-Length: 5\r\n\r\nhello${smuggled}`,
      /\r\ncontent-length: 5\r\nConnection: close\r\n\r\nhello$/,
    ],
    [
      "a second request after a chunked body",
      "POST http://allowed.example/c HTTP/1.1\r\nHost: allowed.example\r\n" +
      `Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${smuggled}`,
      /\r\n\r\n5\r\nhello\r\n0\r\n\r\n$/,
    ],
    [
      "a second request after no body",
      `GET http://allowed.example/d HTTP/1.1\r\nHost: allowed.example\r\n\r\n${smuggled}`,
      /Connection: close\r\n\r\n$/,
    ],
    [
      "hop-by-hop fields and those Connection names",
      "GET http://allowed.example/e HTTP/1.1\r\nHost: allowed.example\r\nConnection: x-hop\r\n" +
      "X-Hop: 1\r\nProxy-Authorization: Basic eDp5\r\nKeep-Alive: 5\r\nX-End: 2\r\n\r\n",
      /^GET http:\/\/allowed\.example\/e HTTP\/1\.1\r\nHost: allowed\.example\r\nx-end: 2\r\nConnection: close\r\n\r\n$/,
    ],
    [
      "obs-text in a field value",
      "GET http://allowed.example/f HTTP/1.1\r\nHost: allowed.example\r\nX-Latin: caf\xe9 \x80\xff\r\n\r\n",
      /\r\nx-latin: caf\xe9 \x80\xff\r\n/,
    ],
  ];
  try {
    await withProxy(
      async (send) => {
        for (const [name, raw, expected] of cases) {
          const before = up.got.length;
          const res = await send(raw);
          assert.match(res, /^HTTP\/1\.1 200 OK\r\n/, name);
          assert.equal(up.got.length, before + 1, name);
          const seen = byteString(up.got[before]);
          assert.match(seen, expected, name);
          assert.doesNotMatch(seen, /evil/, name);
        }
      },
      undefined,
      up.url,
    );
  } finally {
    await up.close();
  }
});

Deno.test("plain HTTP: a method that is not a token or a control character in a field gets 400", async () => {
  const up = startRecordingUpstream();
  try {
    await withProxy(
      async (send) => {
        for (
          const [raw, why] of [
            [
              "GE\x13T http://allowed.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
              /malformed request line/,
            ],
            [
              "GET http://allowed.example/ HTTP/1.1\r\nHost: allowed.example\r\nX-A: a\nHost: evil\r\n\r\n",
              /a control character in the X-A field/,
            ],
            ["GET http://allowed.example/ HTTP/1.1\r\nX-A: a\r\n\r\n", /no Host field/],
          ] as const
        ) {
          const res = await send(raw);
          assert.match(res, /^HTTP\/1\.1 400 Bad Request\r\n/, raw);
          assert.match(res, why, raw);
        }
      },
      undefined,
      up.url,
    );
    assert.equal(up.got.length, 0, "nothing was forwarded");
  } finally {
    await up.close();
  }
});

Deno.test("plain HTTP: a chunked body that breaks its framing gets 400; upstream sees it cut short", async () => {
  const up = startRecordingUpstream();
  const head = "POST http://allowed.example/up HTTP/1.1\r\nHost: allowed.example\r\n" +
    "Transfer-Encoding: chunked\r\n\r\n";
  try {
    await withProxy(
      async (send) => {
        // Broken in the bytes that came with the head: nothing goes upstream.
        const before = up.got.length;
        const early = await send(head + "5\r\nhelloX\r\n0\r\n\r\n");
        assert.match(early, /^HTTP\/1\.1 400 Bad Request\r\n/);
        assert.match(early, /refused a malformed request body: a chunk not followed by CRLF\n$/);
        assert.equal(up.got.length, before);
        // Broken later: the good chunk went upstream, the rest never did.
        const late = await send([
          head + "5\r\nhello\r\n",
          "zz\r\nGET http://evil.example/ HTTP/1.1\r\n\r\n",
        ]);
        assert.match(late, /^HTTP\/1\.1 400 Bad Request\r\n/);
        assert.match(late, /refused a malformed request body: invalid chunk size "zz"\n$/);
        assert.equal(up.got.length, before + 1);
        const seen = byteString(up.got[before]);
        assert.ok(seen.endsWith("\r\n\r\n5\r\nhello\r\n"), JSON.stringify(seen));
      },
      undefined,
      up.url,
    );
  } finally {
    await up.close();
  }
});

Deno.test("a CONNECT target that is not a host name gets 400, even under an allowed domain", async () => {
  await withProxy(async (send, hits) => {
    // An upstream proxy that reads its CONNECT target as a URL would connect to evil.example.
    for (const sep of ["/", "#", "?", "\\", "@", "\t", "%00"]) {
      const target = `evil.example${sep}.allowed.example:443`;
      const res = await send(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\nx`);
      assert.match(res, /^HTTP\/1\.1 400 Bad Request\r\n/, JSON.stringify(target));
      assert.match(res, /bad CONNECT target/);
    }
    assert.equal(hits(), 0);
  });
});

Deno.test("a head over the limit gets 431, for CONNECT and plain HTTP", async () => {
  await withProxy(async (send, hits) => {
    const big = "X-Big: " + "a".repeat(MAX_HEAD) + "\r\n";
    for (
      const first of [
        "CONNECT allowed.example:443 HTTP/1.1",
        "GET http://allowed.example/ HTTP/1.1",
      ]
    ) {
      const res = await send(`${first}\r\n${big}\r\n`);
      assert.match(res, /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/, first);
      assert.match(res, new RegExp(`exceeds ${MAX_HEAD} bytes`));
      // Just over the limit, its end in a read that crosses it (a short first part).
      const over = `${first}\r\nX-Big: ${"a".repeat(MAX_HEAD - first.length - 10)}\r\n\r\n`;
      const late = await send([over.slice(0, 1000), over.slice(1000)]);
      assert.match(late, /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/, `${first}: late`);
    }
    assert.equal(hits(), 0);
  });
});

Deno.test("a client that does not finish its head in time gets 408; an idle one is closed", async () => {
  await withProxy(async (send, hits) => {
    const started = performance.now();
    const partial = await send("GET http://allowed.example/slow HTTP/1.1\r\nHost: allowed.exa");
    assert.match(partial, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.match(partial, /no complete message head within 0\.3 s/);
    assert.ok(performance.now() - started >= 250, "answered before the timeout");
    assert.equal(await send(""), "", "an idle connection is closed without an answer");
    assert.equal(hits(), 0);
  }, 300);
});

Deno.test("an upstream proxy that does not answer CONNECT in time fails the dial, named", async () => {
  const silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const c of silent) held.push(c); // accepts, reads nothing, answers nothing
  })();
  const via = `http://127.0.0.1:${silent.addr.port}`;
  try {
    const env = proxyEnv((n) => n === "HTTPS_PROXY" ? via : undefined);
    await assert.rejects(
      () => dialTunnel(env, "allowed.example", 443, 200),
      /^Error: upstream proxy 127\.0\.0\.1:\d+ did not answer CONNECT allowed\.example:443 in time$/,
    );
  } finally {
    silent.close();
    await accepting;
    for (const c of held) c.close();
  }
});

Deno.test("credentials in HTTPS_PROXY reach the upstream proxy as Basic Proxy-Authorization on CONNECT; a 407 is named", async () => {
  const target = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = (async () => {
    for await (const c of target) c.close();
  })();
  const want = `Basic ${btoa("al@ice:s:cret")}`;
  const proxy = startTestProxy({ "allowed.example:443": target.addr.port }, { requireAuth: want });
  const via = (userinfo: string) =>
    proxyEnv((n) => n === "HTTPS_PROXY" ? `http://${userinfo}127.0.0.1:${proxy.port}` : undefined);
  try {
    const conn = await dialTunnel(via("al%40ice:s%3Acret@"), "allowed.example", 443);
    conn.close();
    assert.deepEqual(proxy.hits.at(-1), {
      method: "CONNECT",
      target: "allowed.example:443",
      authorization: want,
    });
    await assert.rejects(
      () => dialTunnel(via(""), "allowed.example", 443),
      /^Error: upstream proxy 127\.0\.0\.1:\d+ requires a user name and password \(407\): set HTTPS_PROXY to http:\/\/USER:PASSWORD@127\.0\.0\.1:\d+$/,
    );
    await assert.rejects(
      () => dialTunnel(via("alice:SECRETSECRET@"), "allowed.example", 443),
      (e: Error) => {
        assert.match(
          e.message,
          /^upstream proxy 127\.0\.0\.1:\d+ refused the user name and password in HTTPS_PROXY \(407\)$/,
        );
        assert.doesNotMatch(e.message, /SECRETSECRET/);
        return true;
      },
    );
  } finally {
    await proxy.close();
    target.close();
    await accepting;
  }
});

Deno.test("plain HTTP through HTTP_PROXY carries forgekit's credentials for it, never the client's", async () => {
  const up = startRecordingUpstream();
  const withCreds = up.url.replace("http://", "http://u:p%40ss@");
  try {
    await withProxy(
      async (send) => {
        const res = await send(
          "GET http://allowed.example/a HTTP/1.1\r\nHost: allowed.example\r\n" +
            "Proxy-Authorization: Basic Y2xpZW50OmZvcmdla2l0\r\n\r\n",
        );
        assert.match(res, /^HTTP\/1\.1 200 OK\r\n/);
      },
      undefined,
      withCreds,
    );
    assert.equal(up.got.length, 2, "one request per listener");
    for (const got of up.got) {
      assert.equal(
        byteString(got),
        "GET http://allowed.example/a HTTP/1.1\r\nHost: allowed.example\r\n" +
          `Proxy-Authorization: Basic ${btoa("u:p@ss")}\r\nConnection: close\r\n\r\n`,
      );
    }
  } finally {
    await up.close();
  }
});

Deno.test("a CONNECT to be bumped is prepared before its ClientHello; spliced and blocked ones are not", async () => {
  const prepared: string[] = [];
  const intercepted: string[] = [];
  const proxy = await startProxy(true, {
    upstream: { noProxy: [] },
    bump: {
      splice: (host) => host === "pinned.allowed.example",
      prepare: (host, port) => prepared.push(`${host}:${port}`),
      intercept: (client, host, port) => {
        intercepted.push(`${host}:${port}`);
        client.close();
        return Promise.resolve();
      },
    },
  });
  const until = async (done: () => boolean) => {
    for (let i = 0; i < 100 && !done(); i++) await new Promise((r) => setTimeout(r, 20));
  };
  /** Sends a CONNECT and reads the answer's head; the connection stays open. */
  const connect = async (target: string): Promise<[Deno.TcpConn, string]> => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
    await conn.write(enc.encode(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    let head = "";
    const buf = new Uint8Array(4096);
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buf);
      if (n === null) break;
      head += dec.decode(buf.subarray(0, n));
    }
    return [conn, head];
  };
  try {
    const [bumped, head] = await connect("Allowed.Example:443");
    assert.match(head, /^HTTP\/1\.1 200 /);
    // Nothing more was sent: the leaf and origin are started on the CONNECT alone.
    await until(() => prepared.length > 0);
    assert.deepEqual(prepared, ["allowed.example:443"]);
    assert.deepEqual(intercepted, []);
    const tlsConn = await Deno.startTls(bumped, { hostname: "allowed.example" });
    await tlsConn.handshake().catch(() => {}); // the stub closes the connection
    tlsConn.close();
    await until(() => intercepted.length > 0);
    assert.deepEqual(intercepted, ["allowed.example:443"]);

    const [spliced, splicedHead] = await connect("pinned.allowed.example:443");
    assert.match(splicedHead, /^HTTP\/1\.1 200 /);
    spliced.close();
    const [blocked, blockedHead] = await connect("other.example:443");
    assert.match(blockedHead, /^HTTP\/1\.1 403 /);
    blocked.close();
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(prepared, ["allowed.example:443"], "only the bumped CONNECT was prepared");
  } finally {
    await proxy.close();
  }
});

Deno.test("a spliced CONNECT's tunnel is dialled before its ClientHello; one whose SNI does not match is closed unused", async () => {
  // The upstream proxy records each CONNECT and the bytes sent through it;
  // behind it, a server that never answers.
  const server = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = (async () => {
    for await (const c of server) c.readable.cancel().catch(() => {});
  })();
  const upstream = startTestProxy({
    "allowed.example:443": (server.addr as Deno.NetAddr).port,
  });
  const proxy = await startProxy(false, {
    upstream: proxyEnv((n) => n === "HTTPS_PROXY" ? upstream.url : undefined),
    bump: null,
  });
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
    await conn.write(enc.encode("CONNECT allowed.example:443 HTTP/1.1\r\n\r\n"));
    const buf = new Uint8Array(4096);
    const n = await conn.read(buf);
    assert.match(dec.decode(buf.subarray(0, n ?? 0)), /^HTTP\/1\.1 200 /);
    // Nothing more sent by the client: the tunnel is already being opened.
    await until("the tunnel's CONNECT upstream", () => upstream.hits.length > 0, 2000);
    assert.deepEqual(upstream.hits.map((h) => h.target), ["allowed.example:443"]);
    // A ClientHello for another name: the client is refused, the tunnel closed unused.
    const tls = Deno.startTls(conn, { hostname: "other.example" });
    await assert.rejects(tls.then((t) => t.handshake()));
    await until("the tunnel's end", () => upstream.hits[0].sent !== undefined, 2000);
    assert.deepEqual(upstream.hits.map((h) => [h.target, h.sent]), [["allowed.example:443", 0]]);
    proxy.log.flush();
    assert.match(await Deno.readTextFile(proxy.logPath), /"rule":"sni-mismatch"/);
    tls.then((t) => t.close(), () => {});
  } finally {
    await proxy.close();
    await upstream.close();
    server.close();
    await accepting;
  }
});

Deno.test("a spliced tunnel whose client has left and whose server stays silent is closed after the linger", async () => {
  // A server that accepts and never answers nor closes (a hung backend).
  const server = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const front = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  try {
    const accepted = front.accept();
    const client = await Deno.connect({ hostname: "127.0.0.1", port: front.addr.port });
    const proxySide = await accepted;
    const upstream = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
    const backend = await server.accept();
    held.push(client, backend);
    const spliced = splice(proxySide, upstream, 300);
    await client.write(new TextEncoder().encode("GET /slow HTTP/1.1\r\n\r\n"));
    client.close(); // the client gives up
    const t0 = performance.now();
    const result = await Promise.race([
      spliced,
      new Promise<"hung">((r) => setTimeout(() => r("hung"), 5000)),
    ]);
    assert.notEqual(result, "hung", "the half-closed tunnel was never closed");
    assert.ok(performance.now() - t0 >= 250, "closed no sooner than the linger");
    // The backend sees its connection end (not left in FIN-WAIT for ever).
    const buf = new Uint8Array(1024);
    let n: number | null = 0;
    while (n !== null) n = await backend.read(buf).catch(() => null);
  } finally {
    for (const c of held) {
      try {
        c.close();
      } catch {
        // closed
      }
    }
    server.close();
    front.close();
  }
});
