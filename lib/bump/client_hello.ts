/** Reading the SNI (and the ALPN offer) from a TLS ClientHello. Pure: bytes in, answer out. */

/** The outcome of looking at the bytes read so far. */
export type HelloResult =
  | { status: "more" }
  | { status: "invalid"; why: string }
  | {
    status: "ok";
    sni: string | null;
    length: number;
    /** The protocols offered in ALPN (RFC 7301), in the client's order. */
    alpn: string[];
  };

/** The largest ClientHello read (several TLS records are allowed). */
export const MAX_HELLO = 64 * 1024;

/**
 * The most TLS records a ClientHello may be spread over. Clients split one
 * only at 16 KiB (a few records at most); thousands of tiny records would
 * only cost the proxy time.
 */
export const MAX_HELLO_RECORDS = 64;

/**
 * Parses a ClientHello (possibly spread over several TLS records) and returns
 * its server_name, null when it has none, and its ALPN offer, or asks for
 * more bytes. A ClientHello naming more than one server is invalid: which
 * one a server would take is not for the proxy to guess. Each call costs time in the
 * number of records until the ClientHello is whole, so calling it again as
 * bytes arrive stays cheap.
 */
export function parseClientHello(buf: Uint8Array): HelloResult {
  // Where each record's payload is; the handshake message is assembled only once it is whole.
  const spans: [number, number][] = [];
  let payload = 0;
  let off = 0;
  let need = -1;
  while (true) {
    if (buf.length < off + 5) return { status: "more" };
    if (buf[off] !== 0x16) return { status: "invalid", why: "not a TLS handshake" };
    if (buf[off + 1] !== 0x03) return { status: "invalid", why: "not TLS" };
    const len = (buf[off + 3] << 8) | buf[off + 4];
    if (spans.length === MAX_HELLO_RECORDS) {
      return {
        status: "invalid",
        why: `ClientHello spread over more than ${MAX_HELLO_RECORDS} records`,
      };
    }
    if (buf.length < off + 5 + len) return { status: "more" };
    spans.push([off + 5, len]);
    payload += len;
    off += 5 + len;
    if (need < 0 && payload >= 4) {
      const head = gather(buf, spans, 4);
      if (head[0] !== 0x01) return { status: "invalid", why: "not a ClientHello" };
      need = 4 + ((head[1] << 16) | (head[2] << 8) | head[3]);
    }
    if (need >= 0 && payload >= need) break;
    if (off > MAX_HELLO || need > MAX_HELLO) {
      return { status: "invalid", why: "ClientHello too large" };
    }
  }
  const m = gather(buf, spans, need).subarray(4);
  let p = 2 + 32; // version, random
  const skip = (n: number) => {
    p += n;
    if (!(p <= m.length)) throw new RangeError("truncated");
  };
  const names: string[] = [];
  const alpn: string[] = [];
  try {
    skip(0);
    skip(1 + m[p]); // session id
    skip(2 + ((m[p] << 8) | m[p + 1])); // cipher suites
    skip(1 + m[p]); // compression
    if (p + 2 > m.length) return { status: "ok", sni: null, length: off, alpn };
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
            if (q + 3 + nameLen > body + len || body + len > m.length) {
              throw new RangeError("truncated");
            }
            names.push(String.fromCharCode(...m.subarray(q + 3, q + 3 + nameLen)));
          }
          q += 3 + nameLen;
        }
      } else if (type === 16 && body + len <= m.length) {
        // application_layer_protocol_negotiation: length-prefixed names. Only
        // a hint (an origin connection opened early): a malformed list is
        // read as far as it is well-formed, never refused.
        for (let q = body + 2; q < body + len && q + 1 + m[q] <= body + len; q += 1 + m[q]) {
          alpn.push(String.fromCharCode(...m.subarray(q + 1, q + 1 + m[q])));
        }
      }
      p = body + len;
    }
  } catch {
    return { status: "invalid", why: "truncated ClientHello" };
  }
  if (names.length > 1) return { status: "invalid", why: "ClientHello names more than one server" };
  return { status: "ok", sni: names[0] ?? null, length: off, alpn };
}

/** The first `n` payload bytes of the records at `spans`. */
function gather(buf: Uint8Array, spans: [number, number][], n: number): Uint8Array {
  const out = new Uint8Array(n);
  let at = 0;
  for (const [start, len] of spans) {
    if (at === n) break;
    const take = Math.min(len, n - at);
    out.set(buf.subarray(start, start + take), at);
    at += take;
  }
  return out;
}

/** What forgekit speaks on a bumped client connection, in its order of preference. */
const SPOKEN = ["h2", "http/1.1", "http/1.0"];

/**
 * The ALPN protocols offered back to a client that offered `alpn` (see
 * {@linkcode parseClientHello}): those of forgekit's it named, h2 first
 * (`http/1.0` only when it named nothing newer: a client offering it alone,
 * as `curl --http1.0` does, is otherwise refused the handshake with
 * `no_application_protocol`). A client that named none of them, or offered
 * no ALPN, gets the full list: the former is refused as RFC 7301 says, the
 * latter speaks HTTP/1.1 without ALPN.
 */
export function serverAlpn(alpn: readonly string[]): string[] {
  const both = SPOKEN.filter((p) => alpn.includes(p));
  if (both.length === 0) return SPOKEN.slice(0, 2);
  return both[0] === "http/1.0" ? both : both.filter((p) => p !== "http/1.0");
}
