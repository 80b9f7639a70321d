/** Reading the SNI from a TLS ClientHello. Pure: bytes in, answer out. */

/** The outcome of looking at the bytes read so far. */
export type HelloResult =
  | { status: "more" }
  | { status: "invalid"; why: string }
  | { status: "ok"; sni: string | null; length: number };

/** The largest ClientHello read (several TLS records are allowed). */
export const MAX_HELLO = 64 * 1024;

/**
 * Parses a ClientHello (possibly spread over several TLS records) and returns
 * its server_name, null when it has none, or asks for more bytes.
 */
export function parseClientHello(buf: Uint8Array): HelloResult {
  // Reassemble the handshake message from TLS records.
  const hs: number[] = [];
  let off = 0;
  let need = -1;
  while (true) {
    if (buf.length < off + 5) return { status: "more" };
    if (buf[off] !== 0x16) return { status: "invalid", why: "not a TLS handshake" };
    if (buf[off + 1] !== 0x03) return { status: "invalid", why: "not TLS" };
    const len = (buf[off + 3] << 8) | buf[off + 4];
    if (buf.length < off + 5 + len) return { status: "more" };
    for (let i = 0; i < len; i++) hs.push(buf[off + 5 + i]);
    off += 5 + len;
    if (need < 0 && hs.length >= 4) {
      if (hs[0] !== 0x01) return { status: "invalid", why: "not a ClientHello" };
      need = 4 + ((hs[1] << 16) | (hs[2] << 8) | hs[3]);
    }
    if (need >= 0 && hs.length >= need) break;
    if (off > MAX_HELLO) return { status: "invalid", why: "ClientHello too large" };
  }
  const m = hs.slice(4, need);
  let p = 2 + 32; // version, random
  const skip = (n: number) => {
    p += n;
    if (p > m.length) throw new RangeError("truncated");
  };
  try {
    skip(1 + m[p]); // session id
    skip(2 + ((m[p] << 8) | m[p + 1])); // cipher suites
    skip(1 + m[p]); // compression
    if (p + 2 > m.length) return { status: "ok", sni: null, length: off };
    const extEnd = p + 2 + ((m[p] << 8) | m[p + 1]);
    p += 2;
    while (p + 4 <= extEnd) {
      const type = (m[p] << 8) | m[p + 1];
      const len = (m[p + 2] << 8) | m[p + 3];
      const body = p + 4;
      if (type === 0) {
        let q = body + 2; // server_name_list length
        while (q + 3 <= body + len) {
          const nameType = m[q];
          const nameLen = (m[q + 1] << 8) | m[q + 2];
          if (nameType === 0) {
            const name = String.fromCharCode(...m.slice(q + 3, q + 3 + nameLen));
            return { status: "ok", sni: name, length: off };
          }
          q += 3 + nameLen;
        }
      }
      p = body + len;
    }
    return { status: "ok", sni: null, length: off };
  } catch {
    return { status: "invalid", why: "truncated ClientHello" };
  }
}
