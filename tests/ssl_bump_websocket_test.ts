/**
 * WebSocket over a bumped connection: an allowed `wss://` handshake is
 * relayed to the real origin (trusted only through `upstreamCaCerts`, reached
 * only through the upstream proxy) and frames flow both ways; a handshake to
 * a path no pattern allows never reaches the origin.
 */
import assert from "node:assert/strict";
import { startTestProxy } from "./support/proxy.ts";
import { makeTestCa } from "./support/tls.ts";
import { startBumpFront } from "./support/bump.ts";

/** An origin that echoes WebSocket frames, behind the firewall's proxy with a bump session. */
async function startFixture(allowUrls: string[]) {
  // Its own origin: startOrigins' request recording clones the request, which breaks upgrades.
  const ca = await makeTestCa();
  const leaf = await ca.issue(["api.github.com"]);
  const hits: string[] = [];
  const origin = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: leaf.cert, key: leaf.key, onListen() {} },
    (req) => {
      hits.push(new URL(req.url).pathname);
      if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") {
        return new Response("not found\n", { status: 404 });
      }
      const { socket, response } = Deno.upgradeWebSocket(req);
      socket.binaryType = "arraybuffer";
      socket.onmessage = (e) => {
        if (typeof e.data === "string") socket.send(`echo:${e.data}`);
        else socket.send(new Uint8Array(e.data as ArrayBuffer).map((b) => b ^ 0xff));
      };
      return response;
    },
  );
  const proxy = startTestProxy({ "api.github.com:443": origin.addr.port });
  const front = await startBumpFront({
    allowUrls,
    upstreamCaCerts: [ca.cert],
    upstreamProxy: proxy.url,
  });
  const client = Deno.createHttpClient({
    proxy: { url: front.proxyUrl },
    caCerts: [await Deno.readTextFile(front.caCertPath)],
  });
  return {
    hits,
    logs: front.logs,
    debug: front.debug,
    client,
    async close() {
      client.close();
      await front.close();
      await proxy.close();
      await origin.shutdown();
    },
  };
}

/** Opens a WebSocket through the bump front; resolves on open or on failure. */
function open(url: string, client: Deno.HttpClient): Promise<WebSocket | null> {
  // `client` is accepted by Deno's WebSocket (experimental option).
  const ws = new WebSocket(url, { client } as unknown as string[]);
  ws.binaryType = "arraybuffer";
  return new Promise((resolve) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => resolve(null);
    ws.onclose = () => resolve(null);
  });
}

function next(ws: WebSocket): Promise<string | ArrayBuffer> {
  return new Promise((resolve, reject) => {
    ws.onmessage = (e) => resolve(e.data);
    ws.onclose = () => reject(new Error("WebSocket closed before a message arrived"));
  });
}

function closed(ws: WebSocket): Promise<void> {
  return new Promise((resolve) => {
    if (ws.readyState === WebSocket.CLOSED) return resolve();
    ws.onclose = () => resolve();
  });
}

Deno.test("an allowed wss:// handshake is relayed to the origin and frames flow both ways", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const ws = await open("wss://api.github.com/allowed/socket", f.client);
    assert.ok(ws, "the allowed WebSocket handshake succeeds");
    ws.send("hello");
    assert.equal(await next(ws), "echo:hello");
    ws.send(new Uint8Array([1, 2, 3]));
    assert.deepEqual([...new Uint8Array((await next(ws)) as ArrayBuffer)], [254, 253, 252]);
    const done = closed(ws);
    ws.close();
    await done;
    assert.deepEqual(f.hits, ["/allowed/socket"]);
    // Deno's WebSocket offers HTTP/1.1 only: frames are relayed raw on the adopted connection.
    assert.ok(
      f.debug.some((l) => l.includes("HTTP/1.1 (on the client connection)")),
      f.debug.join("\n"),
    );
    // Logged once the relay is over, with the frames' bytes each way.
    const find = () => f.logs.find((e) => e.url === "https://api.github.com/allowed/socket");
    for (let i = 0; i < 100 && !find(); i++) await new Promise((r) => setTimeout(r, 20));
    const entry = find();
    assert.ok(entry, "the handshake is logged with its full URL");
    assert.equal(entry.decision, "allowed");
    assert.equal(entry.status, 101);
    assert.equal(entry.pattern, "https://api.github.com/allowed/*");
    // Client frames are masked: 2 + 4 + payload bytes each (text, binary, close).
    assert.ok(entry.bytes_out >= 11 + 9 + 6, `bytes_out ${entry.bytes_out}`);
    assert.ok(entry.bytes_in >= 2 + 10 + 2 + 3, `bytes_in ${entry.bytes_in}`);
  } finally {
    await f.close();
  }
});

Deno.test("a wss:// handshake to a path no pattern allows never reaches the origin", async () => {
  const f = await startFixture(["https://api.github.com/allowed/*"]);
  try {
    const ws = await open("wss://api.github.com/allowed/../secret", f.client);
    assert.equal(ws, null);
    assert.deepEqual(f.hits, []);
    const entry = f.logs.find((e) => e.decision === "blocked");
    assert.ok(entry, "the blocked handshake is logged");
    assert.equal(entry.url, "https://api.github.com/secret");
    assert.equal(entry.status, 403);
  } finally {
    await f.close();
  }
});
