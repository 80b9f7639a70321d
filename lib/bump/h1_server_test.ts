/** The HTTP/1.1 server with a raw node:net client: what happens when the client goes away. */
import assert from "node:assert/strict";
import net from "node:net";
import { SocketIo } from "./socket_io.ts";
import { serveH1 } from "./h1_server.ts";

Deno.test("serveH1() cancels a streamed body when the client is gone before the head is written", async () => {
  let cancelled = false;
  let served!: Promise<void>;
  const server = net.createServer((sock) => {
    const io = new SocketIo(sock);
    served = serveH1(io, {
      answer: async () => {
        // The origin's head arrives after the client has gone.
        await new Promise((r) => setTimeout(r, 300));
        return {
          status: 200,
          statusText: "OK",
          headers: [],
          length: null,
          body: new ReadableStream<Uint8Array>({
            pull() {
              return new Promise(() => {}); // a silent origin
            },
            cancel() {
              cancelled = true; // bodyStream's cancel() closes the OriginConn (frees the slot)
            },
          }),
        };
      },
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  const c = net.connect(port, "127.0.0.1");
  await new Promise((r) => c.once("connect", r));
  c.write("GET / HTTP/1.1\r\nhost: x.example\r\n\r\n");
  await new Promise((r) => setTimeout(r, 50));
  c.destroy();
  await new Promise((r) => setTimeout(r, 600));
  await served.catch(() => {});
  await new Promise<void>((r) => server.close(() => r()));
  assert.equal(cancelled, true, "the response body (origin connection) was never cancelled");
});
