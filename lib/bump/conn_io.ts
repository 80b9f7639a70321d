/**
 * Byte plumbing between connections, shared by the proxy (splice mode) and
 * the ssl-bump interceptor: write everything, copy until EOF, close quietly.
 */

/**
 * What the proxy needs of a connection: a `Deno.Conn` has it, and so has a
 * client connection accepted with node:net (`node_conn.ts`).
 */
export interface ByteConn {
  read(p: Uint8Array): Promise<number | null>;
  write(p: Uint8Array): Promise<number>;
  closeWrite(): Promise<void>;
  close(): void;
}

/** The parts in one array (a lone part, or a second after an empty first, as is). */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0];
  if (parts.length === 2 && parts[0].byteLength === 0) return parts[1];
  let size = 0;
  for (const p of parts) size += p.byteLength;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** Writes all of `data` (a write may take only part of it). */
export async function writeAll(conn: ByteConn, data: Uint8Array): Promise<void> {
  for (let off = 0; off < data.length;) off += await conn.write(data.subarray(off));
}

/**
 * One read that gives up at `deadline` (a performance.now() time): the
 * bytes read, null at the end of the connection, or "expired". An expired
 * read stays pending until the caller closes the connection.
 */
export async function readBefore(
  conn: ByteConn,
  into: Uint8Array,
  deadline: number,
): Promise<number | null | "expired"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<"expired">((resolve) => {
    timer = setTimeout(() => resolve("expired"), Math.max(0, deadline - performance.now()));
  });
  const reading = conn.read(into);
  try {
    const n = await Promise.race([reading, expired]);
    if (n === "expired") reading.catch(() => {}); // settles when the connection is closed
    return n;
  } finally {
    clearTimeout(timer);
  }
}

/** Closes a connection that may already be closed. */
export function closeQuietly(conn: ByteConn | undefined): void {
  try {
    conn?.close();
  } catch {
    // already closed
  }
}

/**
 * Copies `from` → `to` until EOF with one reused buffer (cheaper than
 * piping the stream wrappers), counting bytes, then half-closes `to`. An
 * error on either side ends the copy.
 */
export async function pump(
  from: ByteConn,
  to: ByteConn,
  count: (n: number) => void = () => {},
): Promise<void> {
  const buf = new Uint8Array(64 * 1024);
  try {
    while (true) {
      const n = await from.read(buf);
      if (n === null) break;
      count(n);
      await writeAll(to, buf.subarray(0, n));
    }
  } catch {
    // one side went away
  }
  try {
    await to.closeWrite();
  } catch {
    // closed
  }
}

/**
 * Sends a final response and closes without losing it: the write side is
 * shut first, and whatever the client still sends is read and dropped (for
 * at most `ms`), so that unread input does not make the kernel reset the
 * connection before the client has read the response.
 */
export async function refuse(conn: ByteConn, response: Uint8Array, ms = 1000): Promise<void> {
  const timer = setTimeout(() => closeQuietly(conn), ms);
  try {
    await writeAll(conn, response);
    await conn.closeWrite();
    const sink = new Uint8Array(16 * 1024);
    while ((await conn.read(sink)) !== null) { /* drop */ }
  } catch {
    // the client went away, or the timer closed the connection
  } finally {
    clearTimeout(timer);
    closeQuietly(conn);
  }
}

/**
 * How long a half-closed tunnel (one side has ended) may pass no bytes the
 * other way before both connections are closed: a client that gave up on
 * a server that never answers must not hold two sockets for ever.
 */
export const HALF_CLOSED_LINGER_MS = 60_000;

/**
 * A tunnel's half-closed linger: once one direction has ended, the tunnel
 * is closed (`closeBoth`) when no bytes have passed for `ms`. A tunnel with
 * both directions open may stay idle.
 */
export class Linger {
  #last = performance.now();
  #watch: ReturnType<typeof setInterval> | undefined;

  constructor(readonly ms: number, readonly closeBoth: () => void) {}

  /** Bytes passed, either way. */
  moved(): void {
    this.#last = performance.now();
  }

  /** One direction has ended: silence from now on closes the tunnel. */
  halfClosed(): void {
    if (this.#watch !== undefined) return;
    // Counted from the end, not from the last byte: a tunnel idle for longer
    // than `ms` with both sides open would otherwise be closed at the first
    // check (within a second), before the other side could answer the end.
    this.#last = performance.now();
    this.#watch = setInterval(() => {
      if (performance.now() - this.#last >= this.ms) this.closeBoth();
    }, Math.min(this.ms, 1000));
  }

  /** The tunnel is over. */
  stop(): void {
    clearInterval(this.#watch);
  }
}
