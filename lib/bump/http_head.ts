/** Reading an HTTP/1.x message head off a connection. */

/** The largest head accepted. */
export const MAX_HEAD = 64 * 1024;

/**
 * Reads up to the blank line that ends an HTTP head. Returns the head text
 * (without the blank line) and any bytes read after it, or null when the
 * connection ended first or the head is too large.
 */
export async function readHttpHead(
  conn: Deno.Conn,
): Promise<{ head: string; rest: Uint8Array } | null> {
  let buf = new Uint8Array(0);
  const chunk = new Uint8Array(16384);
  let scanned = 0;
  while (buf.length < MAX_HEAD) {
    const n = await conn.read(chunk);
    if (n === null) return null;
    const next = new Uint8Array(buf.length + n);
    next.set(buf);
    next.set(chunk.subarray(0, n), buf.length);
    buf = next;
    for (let i = Math.max(3, scanned); i < buf.length; i++) {
      if (buf[i - 3] === 13 && buf[i - 2] === 10 && buf[i - 1] === 13 && buf[i] === 10) {
        return {
          head: new TextDecoder().decode(buf.subarray(0, i - 3)),
          rest: buf.subarray(i + 1),
        };
      }
    }
    scanned = buf.length;
  }
  return null;
}
