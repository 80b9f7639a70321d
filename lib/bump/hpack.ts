/**
 * HPACK (RFC 7541): the header compression of HTTP/2. Pure: bytes in, fields out.
 *
 * The decoder keeps one connection's dynamic table; the encoder only uses the static
 * table, so the peer's SETTINGS_HEADER_TABLE_SIZE never matters to it.
 */
import { latin1Decode, latin1EncodeInto } from "./latin1.ts";

/**
 * Thrown for any malformed header block; the connection must end with COMPRESSION_ERROR.
 *
 * @example
 * ```ts
 * import { HpackDecoder, HpackError } from "./hpack.ts";
 *
 * try {
 *   new HpackDecoder().decode(new Uint8Array([0x80]));
 * } catch (err) {
 *   if (!(err instanceof HpackError)) throw err;
 *   // Send GOAWAY with COMPRESSION_ERROR.
 * }
 * ```
 */
export class HpackError extends Error {
  /** Creates the error with a message that names the problem and the value. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "HpackError";
  }
}

/** RFC 7541 Appendix A, index 1 first. */
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];
const STATIC_COUNT = STATIC_TABLE.length;
const STATIC_NAMES = STATIC_TABLE.map(([name]) => name);
const STATIC_VALUES = STATIC_TABLE.map(([, value]) => value);

/** Per §4.1, every table entry and header list field costs 32 octets besides its strings. */
const ENTRY_OVERHEAD = 32;

// --- Huffman code (RFC 7541 Appendix B) ---

/**
 * The bit length of the code of each symbol, 0x00..0xff then EOS (256). The code is
 * canonical: codes of one length are consecutive and ordered by symbol, so the lengths
 * alone define it.
 */
const HUFFMAN_LENGTHS = (
  "13 23 28 28 28 28 28 28 28 24 30 28 28 30 28 28 " + // 0x00
  "28 28 28 28 28 28 30 28 28 28 28 28 28 28 28 28 " + // 0x10
  " 6 10 10 12 13  6  8 11 10 10  8 11  8  6  6  6 " + // 0x20
  " 5  5  5  6  6  6  6  6  6  6  7  8 15  6 12 10 " + // 0x30
  "13  6  7  7  7  7  7  7  7  7  7  7  7  7  7  7 " + // 0x40
  " 7  7  7  7  7  7  7  7  8  7  8 13 19 13 14  6 " + // 0x50
  "15  5  6  5  6  5  6  6  6  5  7  7  6  6  6  5 " + // 0x60
  " 6  7  6  5  5  6  7  7  7  7  7 15 11 14 13 28 " + // 0x70
  "20 22 20 20 22 22 22 23 22 23 23 23 23 23 24 23 " + // 0x80
  "24 24 22 23 24 23 23 23 23 21 22 23 22 23 23 24 " + // 0x90
  "22 21 20 22 22 23 23 21 23 22 22 24 21 22 23 23 " + // 0xa0
  "21 21 22 21 23 22 23 23 20 22 22 22 23 22 22 23 " + // 0xb0
  "26 26 20 19 22 23 22 25 26 26 26 27 27 26 24 25 " + // 0xc0
  "19 21 26 27 27 26 27 24 21 21 26 26 28 27 27 27 " + // 0xd0
  "20 24 20 21 22 21 21 23 22 22 25 25 24 24 26 23 " + // 0xe0
  "26 27 26 26 27 27 27 27 27 28 27 27 27 27 27 26 " + // 0xf0
  "30" // EOS
).trim().split(/ +/).map(Number);

const EOS = 256;
const MAX_CODE_LENGTH = 30;
/** Symbols sorted by (code length, symbol): the canonical order. */
const HUFFMAN_SYMBOLS = new Uint16Array(257);
/** For each code length: the first code, the number of codes and where they start in HUFFMAN_SYMBOLS. */
const FIRST_CODE = new Int32Array(MAX_CODE_LENGTH + 1);
const CODE_COUNT = new Int32Array(MAX_CODE_LENGTH + 1);
const SYMBOL_OFFSET = new Int32Array(MAX_CODE_LENGTH + 1);
/** The next 8 input bits → (code length << 9 | symbol) of a code of at most 8 bits, else 0. */
const FAST_DECODE = new Uint16Array(256);

{
  for (const length of HUFFMAN_LENGTHS) CODE_COUNT[length]++;
  let code = 0;
  let offset = 0;
  for (let length = 1; length <= MAX_CODE_LENGTH; length++) {
    code = (code + CODE_COUNT[length - 1]) << 1;
    FIRST_CODE[length] = code;
    SYMBOL_OFFSET[length] = offset;
    offset += CODE_COUNT[length];
  }
  const next = SYMBOL_OFFSET.slice();
  for (let symbol = 0; symbol <= EOS; symbol++) {
    HUFFMAN_SYMBOLS[next[HUFFMAN_LENGTHS[symbol]]++] = symbol;
  }
  for (let length = 1; length <= 8; length++) {
    for (let k = 0; k < CODE_COUNT[length]; k++) {
      const symbol = HUFFMAN_SYMBOLS[SYMBOL_OFFSET[length] + k];
      const from = (FIRST_CODE[length] + k) << (8 - length);
      FAST_DECODE.fill((length << 9) | symbol, from, from + (1 << (8 - length)));
    }
  }
}

// --- Decoding primitives ---
// decode() is synchronous, so one cursor and one scratch buffer serve every decoder.

let cursor = 0;
let scratch = new Uint8Array(1024);

/** Reads an integer (§5.1) whose prefix is `mask` (2^N - 1) in the byte at the cursor. */
function readInt(buf: Uint8Array, mask: number): number {
  const start = cursor;
  if (cursor >= buf.length) throw new HpackError(`Truncated HPACK integer at offset: ${start}`);
  let value = buf[cursor++] & mask;
  if (value < mask) return value;
  let factor = 1;
  for (let n = 0;; n++) {
    if (cursor >= buf.length) throw new HpackError(`Truncated HPACK integer at offset: ${start}`);
    if (n === 5) {
      throw new HpackError(`HPACK integer longer than 5 continuation bytes at offset: ${start}`);
    }
    const b = buf[cursor++];
    value += (b & 0x7f) * factor;
    factor *= 128;
    if (b < 0x80) break;
  }
  if (value > 0x7fffffff) throw new HpackError(`HPACK integer overflows 31 bits: ${value}`);
  return value;
}

function checkPrefix(prefixBits: number): number {
  if (!Number.isInteger(prefixBits) || prefixBits < 1 || prefixBits > 8) {
    throw new RangeError(`Invalid HPACK integer prefix length: ${prefixBits}`);
  }
  return (1 << prefixBits) - 1;
}

/**
 * Decodes the integer (§5.1) at the start of `bytes`, whose first byte holds an N-bit
 * prefix (the bits above it are ignored). Returns the value and the number of bytes it
 * took. Throws HpackError when it is truncated or overflows 31 bits.
 *
 * @example
 * ```ts
 * import { decodeInteger } from "./hpack.ts";
 *
 * decodeInteger(new Uint8Array([0x1f, 0x9a, 0x0a]), 5); // { value: 1337, length: 3 }
 * ```
 */
export function decodeInteger(
  bytes: Uint8Array,
  prefixBits: number,
): { value: number; length: number } {
  const mask = checkPrefix(prefixBits);
  cursor = 0;
  const value = readInt(bytes, mask);
  return { value, length: cursor };
}

/**
 * Encodes `value` as an integer (§5.1) with an N-bit prefix; the bits above the prefix
 * are 0, for the caller to fill.
 *
 * @example
 * ```ts
 * import { encodeInteger } from "./hpack.ts";
 *
 * encodeInteger(1337, 5); // Uint8Array [0x1f, 0x9a, 0x0a]
 * ```
 */
export function encodeInteger(value: number, prefixBits: number): Uint8Array {
  const mask = checkPrefix(prefixBits);
  if (!Number.isInteger(value) || value < 0 || value > 0x7fffffff) {
    throw new RangeError(`Invalid HPACK integer: ${value}`);
  }
  const buf = new Uint8Array(6);
  return buf.slice(0, writeInt(buf, 0, value, mask, 0));
}

/**
 * Decodes the Huffman string `buf[start..end)` into `scratch` and returns its length.
 * `at` is the string's offset in the block, for errors.
 */
function huffmanDecode(buf: Uint8Array, start: number, end: number, at: number): number {
  const most = Math.ceil(((end - start) * 8) / 5);
  if (scratch.length < most) scratch = new Uint8Array(Math.max(most, scratch.length * 2));
  const out = scratch;
  let n = 0;
  let acc = 0; // only the low `bits` bits are unread; higher ones are ignored
  let bits = 0;
  let i = start;
  while (true) {
    if (bits < 8) {
      if (i < end) {
        acc = (acc << 8) | buf[i++];
        bits += 8;
      } else {
        // The last bits: a short code or padding (§5.2: at most 7 bits, all 1s).
        if (bits === 0) return n;
        const ones = (1 << bits) - 1;
        const rest = acc & ones;
        if (rest === ones) return n;
        const entry = FAST_DECODE[(rest << (8 - bits)) | (0xff >>> bits)];
        if (entry === 0 || entry >>> 9 > bits) {
          throw new HpackError(`HPACK Huffman padding is not all 1 bits at offset: ${at}`);
        }
        out[n++] = entry & 0x1ff;
        bits -= entry >>> 9;
        continue;
      }
    }
    const entry = FAST_DECODE[(acc >>> (bits - 8)) & 0xff];
    if (entry !== 0) {
      out[n++] = entry & 0x1ff;
      bits -= entry >>> 9;
      continue;
    }
    // A code longer than 8 bits: walk the canonical code bit by bit.
    let code = (acc >>> (bits - 8)) & 0xff;
    bits -= 8;
    for (let length = 9;; length++) {
      if (bits === 0) {
        if (i === end) {
          throw new HpackError(
            code === (1 << (length - 1)) - 1
              ? `HPACK Huffman padding is longer than 7 bits at offset: ${at}`
              : `HPACK Huffman padding is not all 1 bits at offset: ${at}`,
          );
        }
        acc = buf[i++];
        bits = 8;
      }
      code = (code << 1) | ((acc >>> --bits) & 1);
      const k = code - FIRST_CODE[length];
      if (k < CODE_COUNT[length]) {
        const symbol = HUFFMAN_SYMBOLS[SYMBOL_OFFSET[length] + k];
        if (symbol === EOS) {
          throw new HpackError(`HPACK Huffman string contains EOS at offset: ${at}`);
        }
        out[n++] = symbol;
        break;
      }
    }
  }
}

/** Reads a string literal (§5.2); with `keep` false it is checked but not built. */
function readString(buf: Uint8Array, keep: boolean): string {
  const at = cursor;
  if (cursor >= buf.length) throw new HpackError(`Truncated HPACK string at offset: ${at}`);
  const huffman = buf[cursor] >= 0x80;
  const length = readInt(buf, 0x7f);
  const start = cursor;
  if (length > buf.length - start) {
    throw new HpackError(
      `Truncated HPACK string at offset ${at}: ${length} bytes declared, ${
        buf.length - start
      } left`,
    );
  }
  cursor = start + length;
  if (!huffman) return keep ? latin1Decode(buf, start, cursor) : "";
  const n = huffmanDecode(buf, start, cursor, at);
  return keep ? latin1Decode(scratch, 0, n) : "";
}

/**
 * Decodes header blocks of one connection (keeps the dynamic table between blocks).
 *
 * @example
 * ```ts
 * import { HpackDecoder } from "./hpack.ts";
 *
 * const decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 65536 });
 * const result = decoder.decode(new Uint8Array([0x82, 0x87, 0x84]));
 * // result.fields: [[":method", "GET"], [":scheme", "https"], [":path", "/"]]
 * if (result.tooLarge) {
 *   // Answer 431 (or RST_STREAM); the connection stays usable.
 * }
 * ```
 */
export class HpackDecoder {
  readonly #maxTableSize: number;
  readonly #maxHeaderListSize: number;
  /** The table size the encoder last chose (§6.3), at most #maxTableSize. */
  #capacity: number;
  #size = 0;
  /** Ring buffers, newest entry at #head - 1. Entries cost ≥ 32 octets, which bounds their number. */
  readonly #names: string[];
  readonly #values: string[];
  #head = 0;
  #count = 0;

  /**
   * Creates a decoder for one connection.
   *
   * `maxTableSize` is the SETTINGS_HEADER_TABLE_SIZE we advertise (default 4096);
   * `maxHeaderListSize` is the largest decoded header list (§4.1 sizing) that
   * decode() returns (default 65536).
   */
  constructor(options: { maxTableSize?: number; maxHeaderListSize?: number } = {}) {
    const { maxTableSize = 4096, maxHeaderListSize = 65536 } = options;
    if (!Number.isSafeInteger(maxTableSize) || maxTableSize < 0 || maxTableSize > 0x7fffffff) {
      throw new RangeError(`Invalid HPACK maxTableSize: ${maxTableSize}`);
    }
    if (!Number.isSafeInteger(maxHeaderListSize) || maxHeaderListSize < 0) {
      throw new RangeError(`Invalid HPACK maxHeaderListSize: ${maxHeaderListSize}`);
    }
    this.#maxTableSize = maxTableSize;
    this.#maxHeaderListSize = maxHeaderListSize;
    this.#capacity = maxTableSize;
    const slots = Math.max(1, Math.floor(maxTableSize / ENTRY_OVERHEAD));
    this.#names = new Array<string>(slots).fill("");
    this.#values = new Array<string>(slots).fill("");
  }

  /** The size of the dynamic table in octets (§4.1: name + value + 32 per entry). */
  get tableSize(): number {
    return this.#size;
  }

  /** A copy of the dynamic table, newest entry (index 62) first. */
  tableEntries(): [string, string][] {
    const entries: [string, string][] = [];
    for (let i = 1; i <= this.#count; i++) {
      const slot = this.#slot(i);
      entries.push([this.#names[slot], this.#values[slot]]);
    }
    return entries;
  }

  /**
   * Decodes one complete header block (HEADERS + CONTINUATION payloads joined).
   *
   * Returns the fields in order, names as sent (bytes decoded as latin1). Throws
   * HpackError on malformed input. When the header list exceeds maxHeaderListSize,
   * it still decodes the whole block (to keep the dynamic table in sync) but returns
   * `{ fields: null, tooLarge: true }`.
   */
  decode(
    block: Uint8Array,
  ): { fields: [string, string][]; tooLarge: false } | { fields: null; tooLarge: true } {
    const fields: [string, string][] = [];
    const limit = this.#maxHeaderListSize;
    let listSize = 0;
    let keep = true;
    let sizeUpdates = 0;
    const end = block.length;
    cursor = 0;
    while (cursor < end) {
      const at = cursor;
      const b = block[cursor];
      let name: string;
      let value: string;
      if (b >= 0x80) {
        // §6.1 indexed field
        const index = readInt(block, 0x7f);
        if (index === 0) throw new HpackError(`Invalid HPACK index: 0`);
        if (index <= STATIC_COUNT) {
          name = STATIC_NAMES[index - 1];
          value = STATIC_VALUES[index - 1];
        } else {
          const slot = this.#dynamicSlot(index);
          name = this.#names[slot];
          value = this.#values[slot];
        }
      } else if (b >= 0x40) {
        // §6.2.1 literal with incremental indexing: always built, the table needs it
        const index = readInt(block, 0x3f);
        name = index === 0 ? readString(block, true) : this.#name(index);
        value = readString(block, true);
        this.#insert(name, value);
      } else if (b >= 0x20) {
        // §6.3 dynamic table size update
        if (sizeUpdates === -1) {
          throw new HpackError(
            `HPACK dynamic table size update after a header field at offset: ${at}`,
          );
        }
        if (++sizeUpdates > 2) {
          throw new HpackError(`More than two HPACK dynamic table size updates at offset: ${at}`);
        }
        const size = readInt(block, 0x1f);
        if (size > this.#maxTableSize) {
          throw new HpackError(
            `HPACK dynamic table size update above the maximum of ${this.#maxTableSize}: ${size}`,
          );
        }
        this.#capacity = size;
        this.#evictTo(size);
        continue;
      } else {
        // §6.2.2 without indexing (0000) and §6.2.3 never indexed (0001)
        const index = readInt(block, 0x0f);
        name = index === 0 ? readString(block, keep) : this.#name(index);
        value = readString(block, keep);
      }
      sizeUpdates = -1;
      if (keep) {
        listSize += name.length + value.length + ENTRY_OVERHEAD;
        if (listSize > limit) {
          keep = false;
          fields.length = 0;
        } else {
          fields.push([name, value]);
        }
      }
    }
    return keep ? { fields, tooLarge: false } : { fields: null, tooLarge: true };
  }

  /** The ring slot of dynamic entry `i` (1 = newest). */
  #slot(i: number): number {
    const slot = this.#head - i;
    return slot < 0 ? slot + this.#names.length : slot;
  }

  #dynamicSlot(index: number): number {
    const i = index - STATIC_COUNT;
    if (i > this.#count) throw new HpackError(`Invalid HPACK index: ${index}`);
    return this.#slot(i);
  }

  #name(index: number): string {
    return index <= STATIC_COUNT ? STATIC_NAMES[index - 1] : this.#names[this.#dynamicSlot(index)];
  }

  /** Adds an entry (§4.4): evicts the oldest entries to make room, or empties the table. */
  #insert(name: string, value: string): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    if (size > this.#capacity) {
      this.#evictTo(0);
      return;
    }
    this.#evictTo(this.#capacity - size);
    this.#names[this.#head] = name;
    this.#values[this.#head] = value;
    this.#head = this.#head + 1 === this.#names.length ? 0 : this.#head + 1;
    this.#count++;
    this.#size += size;
  }

  /** Evicts the oldest entries until the table takes at most `size` octets. */
  #evictTo(size: number): void {
    while (this.#size > size) {
      const slot = this.#slot(this.#count);
      this.#size -= this.#names[slot].length + this.#values[slot].length + ENTRY_OVERHEAD;
      this.#names[slot] = "";
      this.#values[slot] = "";
      this.#count--;
    }
  }
}

// --- Encoding ---

/** Static table lookups: name → its first index and the index of each of its values. */
const STATIC_BY_NAME = new Map<string, { index: number; values: Map<string, number> }>();
STATIC_TABLE.forEach(([name, value], i) => {
  let entry = STATIC_BY_NAME.get(name);
  if (entry === undefined) STATIC_BY_NAME.set(name, entry = { index: i + 1, values: new Map() });
  entry.values.set(value, i + 1);
});

/** Writes `value` as an integer (§5.1) with prefix `mask` (2^N - 1) after the `flags` bits. */
function writeInt(buf: Uint8Array, p: number, value: number, mask: number, flags: number): number {
  if (value < mask) {
    buf[p++] = flags | value;
    return p;
  }
  buf[p++] = flags | mask;
  value -= mask;
  while (value >= 0x80) {
    buf[p++] = (value & 0x7f) | 0x80;
    value >>>= 7;
  }
  buf[p++] = value;
  return p;
}

/** Writes a string literal (§5.2) without Huffman coding. */
function writeString(buf: Uint8Array, p: number, text: string): number {
  return latin1EncodeInto(text, buf, writeInt(buf, p, text.length, 0x7f, 0));
}

/**
 * Encodes response header blocks. Stateless: it uses the static table and never inserts
 * into the dynamic table, so the peer's table size settings never matter.
 *
 * @example
 * ```ts
 * import { HpackEncoder } from "./hpack.ts";
 *
 * const block = new HpackEncoder().encode([[":status", "200"], ["content-type", "text/plain"]]);
 * // Send `block` as the HEADERS payload (split into CONTINUATION frames if needed).
 * ```
 */
export class HpackEncoder {
  #buf = new Uint8Array(512);

  /**
   * Encodes fields (names already lower-case) into one header block: fully indexed when
   * name and value are in the static table, else a literal without indexing, with an
   * indexed name when the name is in the static table. No Huffman coding.
   * Throws TypeError for a character above U+00FF.
   */
  encode(fields: [string, string][]): Uint8Array {
    let buf = this.#buf;
    let p = 0;
    for (let f = 0; f < fields.length; f++) {
      const [name, value] = fields[f];
      // Each integer takes at most 6 octets.
      const need = p + name.length + value.length + 18;
      if (need > buf.length) {
        const grown = new Uint8Array(Math.max(need, buf.length * 2));
        grown.set(buf.subarray(0, p));
        this.#buf = buf = grown;
      }
      const entry = STATIC_BY_NAME.get(name);
      if (entry === undefined) {
        buf[p++] = 0;
        p = writeString(buf, p, name);
      } else {
        const index = entry.values.get(value);
        if (index !== undefined) {
          p = writeInt(buf, p, index, 0x7f, 0x80);
          continue;
        }
        p = writeInt(buf, p, entry.index, 0x0f, 0);
      }
      p = writeString(buf, p, value);
    }
    return buf.slice(0, p);
  }
}
