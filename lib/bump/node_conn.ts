/**
 * The proxy's listener and client connections, on `node:net`.
 *
 * Why not `Deno.listen` (which the proxy keeps when nothing is bumped,
 * {@linkcode listenProxy}): a bumped client's TLS must be terminated on the
 * connection the proxy accepted, and Deno's own API has no server-side
 * `startTls`. A `node:net` socket can be handed to `node:tls` as it is
 * ({@linkcode NodeConn.startTls}), so bumped requests are served on the
 * client's own connection instead of through a loopback hop. Everything
 * else sees a {@linkcode ByteConn} (read, write, closeWrite, close), the
 * same shape as a `Deno.Conn`.
 *
 * @module
 */
import net from "node:net";
import tls from "node:tls";
import { Buffer } from "node:buffer";
import { type InputControl, SocketIo } from "./socket_io.ts";
import type { ByteConn } from "./conn_io.ts";

/** An accepted client connection. */
export class NodeConn implements ByteConn {
  #io: SocketIo;
  #adopted = false;

  constructor(readonly socket: net.Socket, readonly transport: "tcp" | "unix") {
    this.#io = new SocketIo(socket);
  }

  /** Reads into `p`: the number of bytes, or null at the end of input. */
  async read(p: Uint8Array): Promise<number | null> {
    const chunk = await this.#io.read(p.byteLength);
    if (chunk === null || chunk === "expired") return null;
    p.set(chunk);
    return chunk.byteLength;
  }

  /** Writes all of `p` (copied: callers reuse their buffers). */
  async write(p: Uint8Array): Promise<number> {
    await this.#io.write(p.slice());
    return p.byteLength;
  }

  /** Half-closes: the client reads the end of the stream, and can still send. */
  closeWrite(): Promise<void> {
    this.#io.end();
    return Promise.resolve();
  }

  close(): void {
    if (!this.#adopted) this.#io.destroy();
  }

  /**
   * Starts server-side TLS on this connection, with the ClientHello already
   * read off it (`clientHello`) put back in front. The TLS socket owns the
   * connection from then on: `close()` no longer touches it. `input` stops
   * and restarts reading the TCP connection under it, which pausing the TLS
   * socket does not do (give it to the {@linkcode SocketIo} reading it).
   */
  startTls(
    clientHello: Uint8Array,
    options: { secureContext: tls.SecureContext; alpn: string[] },
  ): { socket: tls.TLSSocket; input: InputControl } {
    this.#adopted = true;
    const raw = this.#io.detach() as net.Socket;
    // Errors surface on the TLS socket; the raw one must not throw them unheard.
    raw.on("error", () => {});
    raw.unshift(Buffer.from(clientHello));
    const socket = new tls.TLSSocket(raw, {
      isServer: true,
      secureContext: options.secureContext,
      ALPNProtocols: options.alpn,
    });
    return { socket, input: tcpInput(raw) };
  }
}

/**
 * Reading on a socket's TCP handle. Deno's `node:tls` server socket reads
 * its TCP connection natively and goes on while paused: a client sending a
 * large body to an origin that reads slowly made the proxy hold all of it
 * (1 GB in 5 s). Stopping the handle's reads stops it; the kernel's window
 * then holds the client back.
 */
function tcpInput(raw: net.Socket): InputControl {
  const handle = (raw as unknown as { _handle?: { readStop?(): void; readStart?(): void } })
    ._handle;
  const call = (op: "readStop" | "readStart") => {
    try {
      if (!raw.destroyed) handle?.[op]?.();
    } catch {
      // the connection is closing
    }
  };
  return { pause: () => call("readStop"), resume: () => call("readStart") };
}

/** Where to listen: loopback TCP, or a Unix socket path. */
export type ListenOptions = { hostname: string; port: number } | { path: string };

/** A listening socket; iterate it for connections. */
export class NodeListener implements AsyncIterable<NodeConn> {
  #server: net.Server;
  #transport: "tcp" | "unix";
  #pending: NodeConn[] = [];
  #wake: (() => void) | null = null;
  #closed = false;

  private constructor(server: net.Server, transport: "tcp" | "unix") {
    this.#server = server;
    this.#transport = transport;
    server.on("connection", (socket: net.Socket) => {
      if (this.#closed) return socket.destroy();
      if (transport === "tcp") socket.setNoDelay(true);
      this.#pending.push(new NodeConn(socket, transport));
      this.#notify();
    });
    // An accept that fails (too many open files) drops that connection only.
    server.on("error", () => {});
    server.on("close", () => {
      this.#closed = true;
      this.#notify();
    });
  }

  /**
   * Starts listening.
   *
   * @example
   * ```ts
   * const l = await NodeListener.listen({ hostname: "127.0.0.1", port: 0 });
   * for await (const conn of l) conn.close();
   * ```
   */
  static listen(options: ListenOptions): Promise<NodeListener> {
    // Half-open: a client's end of input must not end the answer it waits for.
    const server = net.createServer({ allowHalfOpen: true });
    const transport = "path" in options ? "unix" : "tcp";
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      const ready = () => {
        server.off("error", reject);
        resolve(new NodeListener(server, transport));
      };
      if ("path" in options) server.listen(options.path, ready);
      else server.listen(options.port, options.hostname, ready);
    });
  }

  /** The bound address. */
  get addr(): Deno.NetAddr | Deno.UnixAddr {
    const a = this.#server.address();
    if (this.#transport === "unix" || typeof a === "string" || a === null) {
      return { transport: "unix", path: typeof a === "string" ? a : "" };
    }
    return { transport: "tcp", hostname: a.address, port: a.port };
  }

  /** Stops accepting; connections already accepted go on. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.close();
    for (const conn of this.#pending.splice(0)) conn.close();
    this.#notify();
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<NodeConn> {
    for (;;) {
      const conn = this.#pending.shift();
      if (conn) {
        yield conn;
        continue;
      }
      if (this.#closed) return;
      await new Promise<void>((resolve) => this.#wake = resolve);
    }
  }
}

/** The proxy's listener: connections to filter, its address, and close. */
export type ProxyListener = AsyncIterable<ByteConn> & { readonly addr: Deno.Addr; close(): void };

/**
 * Listens for the proxy. With `tlsOnAccepted` (`--ssl-bump`) the listener
 * is node:net, whose sockets can be handed to node:tls; otherwise it is
 * Deno's own, whose connections splice natively and faster.
 */
export async function listenProxy(
  where: ListenOptions,
  tlsOnAccepted: boolean,
): Promise<ProxyListener> {
  if (tlsOnAccepted) return await NodeListener.listen(where);
  return "path" in where
    ? Deno.listen({ transport: "unix", path: where.path })
    : Deno.listen(where);
}
