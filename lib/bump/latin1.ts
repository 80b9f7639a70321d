/**
 * HTTP heads as byte strings: each byte one UTF-16 code unit (U+0000 to
 * U+00FF), both ways. Field values may carry obs-text (bytes 0x80 to 0xFF,
 * RFC 9110 §5.5), which must pass through a proxy unchanged: decoding as
 * latin1 and encoding as latin1 keeps every byte, where UTF-8 on the way
 * out (or WHATWG "latin1", which is windows-1252, on the way in) would not.
 * HTTP/1.1 heads and HPACK strings both go through here.
 *
 * @module
 */

const ascii = new TextDecoder();

/**
 * Bytes `start` to `end` of `buf` as a byte string.
 *
 * @example
 * ```ts
 * import { latin1Decode } from "./latin1.ts";
 * latin1Decode(new Uint8Array([0x63, 0x61, 0x66, 0xe9]), 0, 4); // "café"
 * ```
 */
export function latin1Decode(buf: Uint8Array, start = 0, end = buf.length): string {
  switch (end - start) {
    case 0:
      return "";
    case 1:
      return String.fromCharCode(buf[start]);
    case 2:
      return String.fromCharCode(buf[start], buf[start + 1]);
    case 3:
      return String.fromCharCode(buf[start], buf[start + 1], buf[start + 2]);
  }
  if (end - start >= 48) {
    let high = 0;
    for (let i = start; i < end; i++) high |= buf[i];
    // For long ASCII text, UTF-8 (the same bytes) is a native call and faster.
    if (high < 0x80) return ascii.decode(buf.subarray(start, end));
  }
  let text = "";
  for (let i = start; i < end; i += 4096) {
    const chunk = buf.subarray(i, Math.min(i + 4096, end));
    text += String.fromCharCode.apply(null, chunk as unknown as number[]);
  }
  return text;
}

/**
 * Writes a byte string's bytes into `buf` at `at` (the caller makes room:
 * `text.length` bytes); returns the offset after them. Throws TypeError for
 * a character above U+00FF, which no byte string holds.
 */
export function latin1EncodeInto(text: string, buf: Uint8Array, at: number): number {
  const n = text.length;
  let high = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    high |= c;
    buf[at + i] = c;
  }
  if (high > 0xff) {
    const bad = [...text].find((c) => c.codePointAt(0)! > 0xff)!;
    const code = bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0");
    throw new TypeError(
      `Cannot send a character above U+00FF in an HTTP field: U+${code} in ${
        JSON.stringify(text.length > 40 ? text.slice(0, 40) + "..." : text)
      }`,
    );
  }
  return at + n;
}

/**
 * A byte string's bytes (see {@linkcode latin1EncodeInto} for the error).
 *
 * @example
 * ```ts
 * import { latin1Encode } from "./latin1.ts";
 * latin1Encode("café"); // Uint8Array [0x63, 0x61, 0x66, 0xe9]
 * ```
 */
export function latin1Encode(text: string): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(text.length);
  latin1EncodeInto(text, out, 0);
  return out;
}
