/**
 * A misbehaving HTTP server on loopback, written at the socket level: one
 * that never answers, stalls in the middle of a body, or closes before the
 * body is complete. Deno.serve cannot be made to do these.
 */

/** How the server answers each connection. */
export interface RawReply {
  /** Bytes sent once the request head has arrived; null: nothing, ever. */
  send: string | null;
  /** Close the connection after sending (a body cut short), or keep it open and silent. */
  close: boolean;
}

/** A running raw server. */
export interface RawServer {
  /** `http://127.0.0.1:PORT/` */
  url: string;
  /** Connections accepted so far. */
  readonly connections: number;
  close(): void;
}

/**
 * Starts a raw server on 127.0.0.1.
 *
 * @example
 * ```ts
 * const stalled = startRawServer({
 *   send: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc",
 *   close: false,
 * });
 * ```
 */
export function startRawServer(reply: RawReply): RawServer {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  let connections = 0;
  (async () => {
    for await (const conn of listener) {
      connections++;
      open.add(conn);
      (async () => {
        const buf = new Uint8Array(65536);
        let head = "";
        while (!head.includes("\r\n\r\n")) {
          const n = await conn.read(buf).catch(() => null);
          if (n === null) return;
          head += new TextDecoder().decode(buf.subarray(0, n));
        }
        if (reply.send !== null) {
          await conn.write(new TextEncoder().encode(reply.send)).catch(() => {});
        }
        if (reply.close) {
          open.delete(conn);
          conn.close();
        }
      })();
    }
  })().catch(() => {});
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/`,
    get connections() {
      return connections;
    },
    close() {
      listener.close();
      for (const c of open) {
        try {
          c.close();
        } catch { /* closed */ }
      }
    },
  };
}
