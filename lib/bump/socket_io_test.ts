import assert from "node:assert/strict";
import net from "node:net";
import process from "node:process";
import { relay, SocketIo } from "./socket_io.ts";
import { Linger } from "./conn_io.ts";

Deno.test("many writes waiting on one slow socket raise no listener-leak warning", async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on("warning", onWarning);
  // A peer that accepts and does not read: writes soon wait for room.
  const peers: net.Socket[] = [];
  const server = net.createServer((peer) => peers.push(peer.pause()));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  const socket = net.connect(port, "127.0.0.1");
  await new Promise((resolve) => socket.once("connect", resolve));
  const io = new SocketIo(socket);
  try {
    // As HTTP/2 streams do: 30 writers at once on one connection.
    const writes = Array.from({ length: 30 }, () => io.write(new Uint8Array(1 << 20)));
    writes.forEach((w) => w.catch(() => {}));
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.ok(socket.listenerCount("drain") > 10, "the writes are waiting");
    assert.deepEqual(warnings, []);
  } finally {
    process.off("warning", onWarning);
    io.destroy();
    for (const peer of peers) peer.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

/**
 * A relay between a client socket (accepted half-open, as the proxy's are)
 * and a held origin connection that never writes nor closes: what each
 * test's relay got, and everything to close afterwards.
 */
async function relayToSilentOrigin(lingerMs: number) {
  const server = net.createServer({ allowHalfOpen: true });
  const accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = net.connect({
    port: (server.address() as net.AddressInfo).port,
    host: "127.0.0.1",
    allowHalfOpen: true,
  });
  const clientEnded = new Promise<void>((resolve) => {
    client.on("end", resolve);
    client.on("close", resolve);
  });
  client.on("error", () => {});
  const origin = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: origin.addr.port });
  const backend = await origin.accept();
  const io = new SocketIo(await accepted);
  let settled = false;
  const relayed = relay(io, conn, new Uint8Array(0), lingerMs).finally(() => settled = true);
  return {
    client,
    clientEnded,
    backend,
    relayed,
    settled: () => settled,
    async close() {
      client.destroy();
      io.destroy();
      for (const c of [conn, backend]) {
        try {
          c.close();
        } catch {
          // closed
        }
      }
      origin.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** `p`, or "hung" once `ms` have passed. */
function within<T>(p: Promise<T>, ms: number): Promise<T | "hung"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<"hung">((resolve) => timer = setTimeout(() => resolve("hung"), ms)),
  ]).finally(() => clearTimeout(timer));
}

Deno.test("a relay whose client has left and whose origin stays silent is closed after the linger", async () => {
  const r = await relayToSilentOrigin(300);
  try {
    // Both sides open and idle: a WebSocket may stay so for as long as it likes.
    await new Promise((resolve) => setTimeout(resolve, 600));
    assert.equal(r.settled(), false, "an idle relay with both sides open was closed");
    r.client.end(); // the client goes away; the origin never answers nor closes
    const t0 = performance.now();
    const result = await within(r.relayed, 5000);
    assert.notEqual(result, "hung", "the half-closed relay was never closed");
    assert.ok(performance.now() - t0 >= 250, "closed no sooner than the linger");
  } finally {
    await r.close();
  }
});

Deno.test("a relay whose origin has ended and whose client stays silent is closed after the linger", async () => {
  const r = await relayToSilentOrigin(300);
  try {
    await r.backend.closeWrite(); // the origin is done; the client holds on, silent
    const result = await within(r.relayed, 5000);
    assert.notEqual(result, "hung", "the half-closed relay was never closed");
    assert.notEqual(await within(r.clientEnded, 1000), "hung", "the client's connection ended");
  } finally {
    await r.close();
  }
});

Deno.test("a linger counts its silence from the half-close, not from the last byte", async () => {
  // Checked once a second for a 60 s linger: a tunnel idle for longer with
  // both sides open was closed at the first check after one side ended.
  let closed = false;
  const linger = new Linger(1500, () => closed = true);
  try {
    await new Promise((resolve) => setTimeout(resolve, 1600)); // idle, both sides open
    linger.halfClosed();
    await new Promise((resolve) => setTimeout(resolve, 1200));
    assert.equal(closed, false, "closed before its linger had passed since the half-close");
  } finally {
    linger.stop();
  }
});
