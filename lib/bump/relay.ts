/**
 * The relay inside the sandbox: listens on 127.0.0.1 in the sandbox's network
 * namespace and passes each connection to the proxy's Unix socket.
 */
import { acceptEach, noDelay, splice } from "./proxy.ts";

/** Starts the relay; returns its port and a function that stops it. */
export function startRelay(socketPath: string): { port: number; stop(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  // The workload's only way out: a flood of connections that runs out of
  // descriptors pauses it, and it serves again once they are closed.
  acceptEach(listener, (conn) => {
    noDelay(conn);
    Deno.connect({ transport: "unix", path: socketPath })
      .then((up) => splice(conn, up))
      .catch(() => conn.close());
  }).catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    stop: () => {
      try {
        listener.close();
      } catch { /* closed */ }
    },
  };
}
