import assert from "node:assert/strict";
import net from "node:net";
import process from "node:process";
import { SocketIo } from "./socket_io.ts";

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
