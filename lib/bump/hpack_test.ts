/**
 * HPACK (RFC 7541): the Appendix C examples, a Huffman round trip against python's
 * `hpack` package (an independent implementation), malformed blocks, the header list
 * limit and the static-table encoder.
 */
import assert from "node:assert/strict";
import { decodeInteger, encodeInteger, HpackDecoder, HpackEncoder, HpackError } from "./hpack.ts";

type Fields = [string, string][];

/** "8286 8441" → bytes; whitespace is ignored. */
function hex(text: string): Uint8Array {
  const digits = text.replace(/\s+/g, "");
  assert.equal(digits.length % 2, 0, `odd hex: ${text}`);
  return Uint8Array.from({ length: digits.length / 2 }, (_, i) => {
    const byte = parseInt(digits.slice(i * 2, i * 2 + 2), 16);
    assert.ok(!Number.isNaN(byte), `bad hex: ${text}`);
    return byte;
  });
}

function toHex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function decodeOk(decoder: HpackDecoder, block: Uint8Array): Fields {
  const result = decoder.decode(block);
  assert.equal(result.tooLarge, false);
  assert.ok(result.fields !== null);
  return result.fields;
}

/** Asserts that `fn` throws an HpackError whose message matches `message`. */
function throwsHpack(fn: () => unknown, message: RegExp, what: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof HpackError, `${what}: not an HpackError: ${err}`);
    assert.equal(err.name, "HpackError");
    assert.match(err.message, message, what);
    return true;
  }, what);
}

/** Deterministic bytes (xorshift32), as a latin1 string. */
function randomLatin1(seed: number, length: number, alphabet = 256): string {
  let x = seed | 0 || 1;
  let text = "";
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    text += String.fromCharCode((x >>> 0) % alphabet);
  }
  return text;
}

const ALL_BYTES = Array.from({ length: 256 }, (_, i) => String.fromCharCode(i)).join("");

// --- C.1 integers ---

Deno.test("encodeInteger() and decodeInteger() follow RFC 7541 C.1 and §5.1", () => {
  const cases: [string, number, number, string][] = [
    ["C.1.1 10 with a 5-bit prefix", 10, 5, "0a"],
    ["C.1.2 1337 with a 5-bit prefix", 1337, 5, "1f9a0a"],
    ["C.1.3 42 at an octet boundary", 42, 8, "2a"],
    ["30: the largest that fits a 5-bit prefix", 30, 5, "1e"],
    ["31: the prefix full, a zero continuation", 31, 5, "1f00"],
    ["127 with a 7-bit prefix", 127, 7, "7f00"],
    ["128 with a 7-bit prefix", 128, 7, "7f01"],
    ["0 with a 1-bit prefix", 0, 1, "00"],
    ["255 with an 8-bit prefix", 255, 8, "ff00"],
    ["2^31 - 1 with a 1-bit prefix", 0x7fffffff, 1, "01feffffff07"],
    ["2^31 - 1 with an 8-bit prefix", 0x7fffffff, 8, "ff80feffff07"],
  ];
  for (const [what, value, prefix, bytes] of cases) {
    assert.equal(toHex(encodeInteger(value, prefix)), bytes, what);
    assert.deepEqual(decodeInteger(hex(bytes), prefix), { value, length: bytes.length / 2 }, what);
  }
});

Deno.test("decodeInteger() ignores the bits above the prefix and what follows", () => {
  // 0xea = 111 01010: flags 111, value 10.
  assert.deepEqual(decodeInteger(hex("ea ff ff"), 5), { value: 10, length: 1 });
  assert.deepEqual(decodeInteger(hex("ff 9a 0a 80"), 5), { value: 1337, length: 3 });
});

Deno.test("decodeInteger() refuses truncated and overlong integers", () => {
  const cases: [string, string, number, RegExp][] = [
    ["no bytes", "", 5, /Truncated HPACK integer at offset: 0/],
    ["a full prefix and nothing after", "1f", 5, /Truncated HPACK integer/],
    ["a continuation bit on the last byte", "1f 9a 8a", 5, /Truncated HPACK integer/],
    ["six continuation bytes", "1f 80 80 80 80 80 00", 5, /longer than 5 continuation bytes/],
    ["above 2^31 - 1", "ff ff ff ff ff 0f", 8, /overflows 31 bits: 4294967550/],
    ["2^31 exactly", "01 ff ff ff ff 07", 1, /overflows 31 bits: 2147483648/],
  ];
  for (const [what, bytes, prefix, message] of cases) {
    throwsHpack(() => decodeInteger(hex(bytes), prefix), message, what);
  }
});

Deno.test("encodeInteger() and decodeInteger() refuse bad arguments with RangeError", () => {
  for (const prefix of [0, 9, 1.5, NaN]) {
    assert.throws(() => encodeInteger(1, prefix), RangeError);
    assert.throws(() => decodeInteger(hex("01"), prefix), RangeError);
  }
  for (const value of [-1, 0.5, 0x80000000, NaN, Infinity]) {
    assert.throws(() => encodeInteger(value, 5), RangeError);
  }
});

// --- C.2 literal fields ---

Deno.test("HpackDecoder decodes the RFC 7541 C.2 header field representations", () => {
  const cases: [string, string, Fields, Fields][] = [
    [
      "C.2.1 literal with indexing",
      "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      [["custom-key", "custom-header"]],
      [["custom-key", "custom-header"]],
    ],
    [
      "C.2.2 literal without indexing",
      "040c 2f73 616d 706c 652f 7061 7468",
      [[":path", "/sample/path"]],
      [],
    ],
    [
      "C.2.3 literal never indexed",
      "1008 7061 7373 776f 7264 0673 6563 7265 74",
      [["password", "secret"]],
      [],
    ],
    ["C.2.4 indexed", "82", [[":method", "GET"]], []],
  ];
  for (const [what, block, fields, table] of cases) {
    const decoder = new HpackDecoder();
    assert.deepEqual(decodeOk(decoder, hex(block)), fields, what);
    assert.deepEqual(decoder.tableEntries(), table, what);
    assert.equal(
      decoder.tableSize,
      table.reduce((n, [k, v]) => n + k.length + v.length + 32, 0),
      what,
    );
  }
});

// --- C.3 to C.6: sequences of blocks on one decoder ---

interface Step {
  fields: Fields;
  /** The dynamic table after the block, newest first, with each entry's size. */
  table: [string, string, number][];
  size: number;
}

const AUTHORITY: [string, string] = [":authority", "www.example.com"];
const REQUESTS: Step[] = [
  {
    fields: [[":method", "GET"], [":scheme", "http"], [":path", "/"], AUTHORITY],
    table: [[...AUTHORITY, 57]],
    size: 57,
  },
  {
    fields: [
      [":method", "GET"],
      [":scheme", "http"],
      [":path", "/"],
      AUTHORITY,
      ["cache-control", "no-cache"],
    ],
    table: [["cache-control", "no-cache", 53], [...AUTHORITY, 57]],
    size: 110,
  },
  {
    fields: [
      [":method", "GET"],
      [":scheme", "https"],
      [":path", "/index.html"],
      AUTHORITY,
      ["custom-key", "custom-value"],
    ],
    table: [
      ["custom-key", "custom-value", 54],
      ["cache-control", "no-cache", 53],
      [...AUTHORITY, 57],
    ],
    size: 164,
  },
];

const DATE1 = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE2 = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION = "https://www.example.com";
const COOKIE = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
const RESPONSES: Step[] = [
  {
    fields: [
      [":status", "302"],
      ["cache-control", "private"],
      ["date", DATE1],
      ["location", LOCATION],
    ],
    table: [
      ["location", LOCATION, 63],
      ["date", DATE1, 65],
      ["cache-control", "private", 52],
      [":status", "302", 42],
    ],
    size: 222,
  },
  {
    // :status 302 is evicted to make room for :status 307.
    fields: [
      [":status", "307"],
      ["cache-control", "private"],
      ["date", DATE1],
      ["location", LOCATION],
    ],
    table: [
      [":status", "307", 42],
      ["location", LOCATION, 63],
      ["date", DATE1, 65],
      ["cache-control", "private", 52],
    ],
    size: 222,
  },
  {
    // Several entries are evicted; the set-cookie entry alone is 98 octets.
    fields: [
      [":status", "200"],
      ["cache-control", "private"],
      ["date", DATE2],
      ["location", LOCATION],
      ["content-encoding", "gzip"],
      ["set-cookie", COOKIE],
    ],
    table: [
      ["set-cookie", COOKIE, 98],
      ["content-encoding", "gzip", 52],
      ["date", DATE2, 65],
    ],
    size: 215,
  },
];

const SEQUENCES: { name: string; maxTableSize: number; steps: Step[]; blocks: string[] }[] = [
  {
    name: "C.3 requests without Huffman coding",
    maxTableSize: 4096,
    steps: REQUESTS,
    blocks: [
      "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
      "8286 84be 5808 6e6f 2d63 6163 6865",
      "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ],
  },
  {
    name: "C.4 requests with Huffman coding",
    maxTableSize: 4096,
    steps: REQUESTS,
    blocks: [
      "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
      "8286 84be 5886 a8eb 1064 9cbf",
      "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ],
  },
  {
    name: "C.5 responses without Huffman coding, 256-octet table",
    maxTableSize: 256,
    steps: RESPONSES,
    blocks: [
      "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 " +
      "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 " +
      "6c65 2e63 6f6d",
      "4803 3330 37c1 c0bf",
      "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d " +
      "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 " +
      "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e " +
      "3d31",
    ],
  },
  {
    name: "C.6 responses with Huffman coding, 256-octet table",
    maxTableSize: 256,
    steps: RESPONSES,
    blocks: [
      "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 " +
      "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
      "4883 640e ffc1 c0bf",
      "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab " +
      "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f " +
      "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ],
  },
];

for (const { name, maxTableSize, steps, blocks } of SEQUENCES) {
  Deno.test(`HpackDecoder decodes RFC 7541 ${name} and keeps the dynamic table`, () => {
    const decoder = new HpackDecoder({ maxTableSize });
    steps.forEach((step, i) => {
      const what = `${name}, block ${i + 1}`;
      assert.deepEqual(decodeOk(decoder, hex(blocks[i])), step.fields, what);
      assert.deepEqual(
        decoder.tableEntries(),
        step.table.map(([k, v]) => [k, v]),
        `${what}: table`,
      );
      for (const [k, v, size] of step.table) {
        assert.equal(k.length + v.length + 32, size, `${what}: entry ${k}`);
      }
      assert.equal(decoder.tableSize, step.size, `${what}: table size`);
    });
  });
}

// --- Huffman and table management against python's hpack ---

const PYTHON = "/usr/bin/python3";

/** Whether {@linkcode PYTHON} can import hpack (the tests that need it skip otherwise). */
function hasPythonHpack(): boolean {
  try {
    return new Deno.Command(PYTHON, {
      args: ["-c", "import hpack"],
      stdout: "null",
      stderr: "null",
    }).outputSync().success;
  } catch {
    return false;
  }
}
const ignore = !hasPythonHpack();

/**
 * Python's side. Strings cross as latin1 (one char per byte) in JSON.
 * encode: [{fields: [[name, value, sensitive]], tableSize?}] → hex blocks, one Encoder,
 * Huffman on; `tableSize` sets the encoder's table size before that block (each setting
 * becomes a size update at the start of the block).
 * decode: [hex] → field lists, one Decoder, raw bytes.
 */
const PY_SCRIPT = `
import json, sys
import hpack

job = json.load(sys.stdin)
out = []
if job["op"] == "encode":
    enc = hpack.Encoder()
    for block in job["blocks"]:
        for size in block.get("tableSizes", []):
            enc.header_table_size = size
        fields = [(n.encode("latin1"), v.encode("latin1"), s) for n, v, s in block["fields"]]
        out.append(enc.encode(fields, huffman=True).hex())
else:
    dec = hpack.Decoder(max_header_list_size=1 << 24)
    for block in job["blocks"]:
        out.append([[n.decode("latin1"), v.decode("latin1")]
                    for n, v in dec.decode(bytes.fromhex(block), raw=True)])
json.dump(out, sys.stdout)
`;

async function python<T>(job: unknown): Promise<T> {
  const child = new Deno.Command(PYTHON, {
    args: ["-c", PY_SCRIPT],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(job)));
  await writer.close();
  const { success, stdout, stderr } = await child.output();
  assert.ok(success, `python failed: ${new TextDecoder().decode(stderr)}`);
  return JSON.parse(new TextDecoder().decode(stdout));
}

/** Header lists that exercise every byte value, long and empty strings, and eviction. */
function varietyOfLists(): { fields: [string, string, boolean][]; tableSizes?: number[] }[] {
  const plain = (fields: Fields, sensitive = false) =>
    fields.map(([n, v]): [string, string, boolean] => [n, v, sensitive]);
  return [
    {
      fields: plain([
        [":method", "GET"],
        [":scheme", "https"],
        [":authority", "api.github.com"],
        [":path", "/repos/denoland/deno/issues?state=open&per_page=100"],
        ["accept", "application/vnd.github+json"],
        ["user-agent", "forgekit/0.1 (+https://example.invalid)"],
        ["x-empty", ""],
        ["", "empty name"],
        ["", ""],
      ]),
    },
    // Every byte value in one value, and again (an indexed repeat of the same entry).
    { fields: plain([["x-all-bytes", ALL_BYTES], ["x-all-bytes", ALL_BYTES]]) },
    // Every byte value on its own: each symbol's code alone plus padding. 256 entries
    // of 36 octets overflow the 4096-octet table, so the oldest are evicted.
    {
      fields: plain(
        Array.from({ length: 256 }, (_, i): [string, string] => [
          "x-b",
          String.fromCharCode(i),
        ]),
      ),
    },
    // Byte values in names too, sensitive (never indexed), and repeats of table entries.
    {
      fields: [
        [ALL_BYTES.slice(128), ALL_BYTES.slice(0, 128), true],
        [ALL_BYTES.slice(0, 32), "control", false],
        ["x-b", "\x00", false],
        ["x-b", "\xff", false],
        ["x-all-bytes", ALL_BYTES, false],
        ["Upper-Case", "Kept", false],
      ],
    },
    // Long values: longer than the table (inserting one empties it) and random bytes of
    // every length from 0 to 40, so that the padding takes every length.
    {
      fields: plain([
        ["x-long-text", randomLatin1(7, 20000, 128)],
        ["x-long-binary", randomLatin1(11, 5000)],
        ...Array.from({ length: 41 }, (_, i): [string, string] => [
          `x-r${i}`,
          randomLatin1(100 + i, i),
        ]),
      ]),
    },
    // The encoder shrinks its table to 0 and back: two size updates, then insertions.
    {
      tableSizes: [0, 256],
      fields: plain([
        ["cookie", "a=1"],
        ["cookie", "b=2"],
        ["cookie", "a=1"],
        ["x-after", randomLatin1(3, 150)],
        ["x-small", "y"],
        ["x-small", "y"],
      ]),
    },
    { tableSizes: [4096], fields: plain([["x-small", "y"], ["x-back", "to 4096"]]) },
  ];
}

Deno.test({
  name: "HpackDecoder decodes what python's hpack encodes (Huffman, indexing, size updates)",
  ignore,
  async fn() {
    const lists = varietyOfLists();
    const blocks = await python<string[]>({ op: "encode", blocks: lists });
    assert.equal(blocks.length, lists.length);
    const decoder = new HpackDecoder({ maxHeaderListSize: 1 << 20 });
    blocks.forEach((block, i) => {
      const expected = lists[i].fields.map(([n, v]): [string, string] => [n, v]);
      assert.deepEqual(decodeOk(decoder, hex(block)), expected, `block ${i}`);
    });
    // After the last block: the table was emptied at size 0, refilled within 256 octets
    // (x-after and x-small evicted both cookies), then grown back.
    assert.deepEqual(decoder.tableEntries(), [
      ["x-back", "to 4096"],
      ["x-small", "y"],
      ["x-after", lists[5].fields[3][1]],
    ]);
    assert.equal(decoder.tableSize, 45 + 40 + 189);
    // Huffman coding was used: the all-bytes value is far from its raw 256 octets.
    assert.ok(!blocks[1].includes(toHex(new TextEncoder().encode("x-all-bytes"))));
  },
});

Deno.test({
  name: "python's hpack decodes what HpackEncoder encodes",
  ignore,
  async fn() {
    const lists: Fields[] = [
      [[":status", "200"], ["content-type", "text/plain"], ["x-custom", "v"]],
      [[":status", "204"], [":status", "201"], ["content-length", "0"], ["www-authenticate", ""]],
      [["x-all-bytes", ALL_BYTES], [ALL_BYTES.slice(33, 127), ALL_BYTES.slice(128)]],
      [["x-empty", ""], ["", ""], ["", "v"]],
      [["x-long", randomLatin1(5, 70000)], ["set-cookie", randomLatin1(9, 127, 128)]],
      [],
    ];
    const encoder = new HpackEncoder();
    const blocks = lists.map((fields) => toHex(encoder.encode(fields)));
    assert.deepEqual(await python<Fields[]>({ op: "decode", blocks }), lists);
  },
});

// --- Malformed blocks ---

Deno.test("HpackDecoder refuses malformed blocks with an HpackError naming the problem", () => {
  const cases: [string, string, RegExp][] = [
    ["indexed field 0", "80", /Invalid HPACK index: 0$/],
    ["indexed field 0 after a valid one", "82 80", /Invalid HPACK index: 0$/],
    ["index 62 with an empty dynamic table", "be", /Invalid HPACK index: 62$/],
    ["index 127 (multi-byte)", "ff 00", /Invalid HPACK index: 127$/],
    ["index 63 with one dynamic entry", "40 01 61 01 62 bf", /Invalid HPACK index: 63$/],
    ["a name index beyond the table (with indexing)", "7e 01 61", /Invalid HPACK index: 62$/],
    ["a name index beyond the table (without indexing)", "0f 2f 01 61", /Invalid HPACK index: 62$/],
    ["a name index beyond the table (never indexed)", "1f 2f 01 61", /Invalid HPACK index: 62$/],
    ["a truncated index", "ff", /Truncated HPACK integer at offset: 0/],
    ["a truncated index after a field", "82 ff 80", /Truncated HPACK integer at offset: 1/],
    ["a truncated string length", "00 7f", /Truncated HPACK integer at offset: 1/],
    ["an index with 6 continuation bytes", "ff 80 80 80 80 80 00", /longer than 5 continuation/],
    ["an index above 2^31 - 1", "ff ff ff ff ff 0f", /overflows 31 bits/],
    ["a string length above 2^31 - 1", "00 7f ff ff ff ff 0f", /overflows 31 bits/],
    ["a missing name string", "40", /Truncated HPACK string at offset: 1/],
    ["a missing value string", "00 01 61", /Truncated HPACK string at offset: 3/],
    ["a missing value after an indexed name", "04", /Truncated HPACK string at offset: 1/],
    [
      "a string longer than the block",
      "00 05 61 62",
      /Truncated HPACK string at offset 1: 5 bytes declared, 2 left/,
    ],
    ["a Huffman string longer than the block", "00 01 61 85 1f", /5 bytes declared, 1 left/],
    // "a" is 00011: three 0 bits of padding.
    ["Huffman padding of 0 bits", "00 01 61 81 18", /Huffman padding is not all 1 bits/],
    // " " is 010100, ":" is 1011100: two and one bits of padding, not all 1s.
    ["Huffman padding of 10", "00 01 61 81 52", /Huffman padding is not all 1 bits/],
    ["Huffman padding of 01", "00 01 61 81 51", /Huffman padding is not all 1 bits/],
    ["Huffman padding of one 0 bit", "00 01 61 81 b8", /Huffman padding is not all 1 bits/],
    // 11111110 is the start of the 10-bit code of "!".
    ["a Huffman code cut short", "00 01 61 81 fe", /Huffman padding is not all 1 bits/],
    // "a" and 11 bits of 1s.
    ["Huffman padding of 11 bits", "00 01 61 82 1f ff", /Huffman padding is longer than 7 bits/],
    ["Huffman padding of a whole octet", "00 01 61 81 ff", /Huffman padding is longer than 7/],
    ["a Huffman name of padding only", "00 81 ff 00", /Huffman padding is longer than 7/],
    // EOS is 30 bits of 1s.
    ["EOS alone", "00 01 61 84 ff ff ff ff", /Huffman string contains EOS/],
    // "a", then EOS, then 5 bits of padding.
    ["EOS after a symbol", "00 01 61 85 1f ff ff ff ff", /Huffman string contains EOS/],
    ["EOS before a symbol", "00 01 61 85 ff ff ff fc 7f", /Huffman string contains EOS/],
    [
      "a table size update above the maximum",
      "3f e2 1f",
      /table size update above the maximum of 4096: 4097/,
    ],
    ["a table size update after a field", "82 20", /size update after a header field/],
    ["a table size update after a literal", "00 01 61 00 3f e1 1f", /after a header field/],
    ["three table size updates", "20 3f e1 1f 20", /More than two HPACK dynamic table size/],
  ];
  for (const [what, block, message] of cases) {
    throwsHpack(() => new HpackDecoder().decode(hex(block)), message, what);
  }
});

Deno.test("HpackDecoder accepts Huffman padding of 0 to 7 bits of 1s", () => {
  const cases: [string, string][] = [
    ["1f", "a"], // 5 bits + 3
    ["53", " "], // 6 bits + 2
    ["b9", ":"], // 7 bits + 1
    ["18 ff", "aa"], // 10 bits + 6: "a" is 00011
    ["00 3f", "00"], // 10 bits + 6: "0" is 00000
    ["fe 3f", "!"], // 10 bits + 6: "!" is 1111111000
    ["fe 3f 8f", "!!"], // 20 bits + 4
    ["ff ff fb bf", "\xff"], // 26 bits + 6
    ["1f fe 3f", "a\x00"], // 18 bits + 6
  ];
  for (const [bytes, text] of cases) {
    const n = hex(bytes).length;
    const block = hex(`00 01 61 ${(0x80 | n).toString(16)} ${bytes}`);
    assert.deepEqual(decodeOk(new HpackDecoder(), block), [["a", text]], bytes);
  }
});

Deno.test("HpackDecoder accepts table size updates at the block start, up to the maximum", () => {
  const decoder = new HpackDecoder({ maxTableSize: 4096 });
  assert.deepEqual(decodeOk(decoder, hex("40 01 61 01 62 40 01 63 01 64")), [["a", "b"], [
    "c",
    "d",
  ]]);
  assert.equal(decoder.tableSize, 68);
  // 4096 exactly, then 34: the oldest entry ("a", "b") is evicted.
  assert.deepEqual(decodeOk(decoder, hex("3f e1 1f 3f 03 be")), [["c", "d"]]);
  assert.deepEqual(decoder.tableEntries(), [["c", "d"]]);
  // An entry larger than the table empties it (§4.4) and is not an error.
  assert.deepEqual(decodeOk(decoder, hex("40 01 65 02 66 66")), [["e", "ff"]]);
  assert.deepEqual(decoder.tableEntries(), []);
  assert.equal(decoder.tableSize, 0);
  // Size 0, then back up within the same block; an empty block is fine too.
  assert.deepEqual(decodeOk(decoder, hex("20 3f e1 1f 40 01 67 01 68")), [["g", "h"]]);
  assert.deepEqual(decoder.tableEntries(), [["g", "h"]]);
  assert.deepEqual(decodeOk(decoder, new Uint8Array()), []);
});

Deno.test("HpackDecoder returns names as sent: it does not check their case", () => {
  // Upper-case names are malformed in HTTP/2 (RFC 9113 §8.2.1), but that is for the
  // request checks (h2_request.ts) to refuse; HPACK itself only carries the octets.
  const decoder = new HpackDecoder();
  const block = hex("400a 4375 7374 6f6d 2d4b 6579 0141 be 00 01 58 00");
  assert.deepEqual(decodeOk(decoder, block), [["Custom-Key", "A"], ["Custom-Key", "A"], ["X", ""]]);
  assert.deepEqual(decoder.tableEntries(), [["Custom-Key", "A"]]);
});

Deno.test("HpackDecoder decodes octets above 0x7f as latin1", () => {
  const decoder = new HpackDecoder();
  // A value of 0xe9 0xff 0x00, then a long one (the chunked path, not the ASCII one).
  assert.deepEqual(decodeOk(decoder, hex("00 01 78 03 e9 ff 00")), [["x", "\xe9\xff\x00"]]);
  const long = "\xe9".repeat(60) + "a".repeat(60);
  const raw = new HpackEncoder().encode([["x", long]]);
  assert.deepEqual(decodeOk(decoder, raw), [["x", long]]);
});

// --- The header list limit ---

Deno.test("HpackDecoder counts header list size as in §4.1 and its limit is inclusive", () => {
  // [":method", "GET"] costs 7 + 3 + 32 = 42 octets.
  assert.deepEqual(new HpackDecoder({ maxHeaderListSize: 42 }).decode(hex("82")), {
    fields: [[":method", "GET"]],
    tooLarge: false,
  });
  assert.deepEqual(new HpackDecoder({ maxHeaderListSize: 41 }).decode(hex("82")), {
    fields: null,
    tooLarge: true,
  });
  assert.deepEqual(new HpackDecoder({ maxHeaderListSize: 84 }).decode(hex("82 82")), {
    fields: [[":method", "GET"], [":method", "GET"]],
    tooLarge: false,
  });
  assert.deepEqual(new HpackDecoder({ maxHeaderListSize: 83 }).decode(hex("82 82")), {
    fields: null,
    tooLarge: true,
  });
  assert.deepEqual(new HpackDecoder({ maxHeaderListSize: 0 }).decode(new Uint8Array()), {
    fields: [],
    tooLarge: false,
  });
});

Deno.test("HpackDecoder keeps its dynamic table in sync through a too-large block", () => {
  // x-one: one costs 40 octets, x-big: 150 × "v" 187: together over the limit of 220.
  const decoder = new HpackDecoder({ maxHeaderListSize: 220 });
  const big = "v".repeat(150);
  const encoder = new HpackEncoder();
  // Block 1: an insertion, a field that goes over the limit (and is inserted), then more
  // of every kind after the limit: an insertion, a literal without indexing (its strings
  // skipped, not built), a Huffman literal with indexing and indexed fields.
  const block1 = new Uint8Array([
    ...hex("40 05 782d 6f6e 65 03 6f6e 65"), // x-one: one (with indexing)
    ...hex("40 05 782d 6269 67 7f 17"), // x-big: 150 × "v" (with indexing)
    ...new TextEncoder().encode(big),
    ...hex("40 05 782d 7477 6f 03 7477 6f"), // x-two: two (with indexing)
    ...encoder.encode([["x-skipped", big]]), // without indexing
    ...hex("5886 a8eb 1064 9cbf"), // cache-control: no-cache (with indexing, Huffman)
    ...hex("82 be"), // :method GET, then the newest entry
  ]);
  assert.deepEqual(decoder.decode(block1), { fields: null, tooLarge: true });
  const table: Fields = [
    ["cache-control", "no-cache"],
    ["x-two", "two"],
    ["x-big", big],
    ["x-one", "one"],
  ];
  assert.deepEqual(decoder.tableEntries(), table);
  assert.equal(decoder.tableSize, table.reduce((n, [k, v]) => n + k.length + v.length + 32, 0));
  // Block 2 refers to the entries block 1 inserted (62 newest .. 65 oldest), inserts a
  // new value under the name of entry 62, then refers to x-two at its new index 64.
  // 53 + 40 + 40 + 46 + 40 = 219 octets: within the limit.
  assert.deepEqual(decodeOk(decoder, hex("be bf c1 7e 01 33 c0")), [
    ["cache-control", "no-cache"],
    ["x-two", "two"],
    ["x-one", "one"],
    ["cache-control", "3"],
    ["x-two", "two"],
  ]);
  // x-big twice is too large; the next block is fine again.
  assert.deepEqual(decoder.decode(hex("c1 c1")), { fields: null, tooLarge: true });
  assert.deepEqual(decodeOk(decoder, hex("c2 c0")), [["x-one", "one"], ["x-two", "two"]]);
});

Deno.test("HpackDecoder still throws for malformed input after the limit is passed", () => {
  const decoder = new HpackDecoder({ maxHeaderListSize: 10 });
  throwsHpack(() => decoder.decode(hex("82 80")), /Invalid HPACK index: 0/, "index 0");
  throwsHpack(() => decoder.decode(hex("82 00 01 61 81 18")), /not all 1 bits/, "padding");
});

Deno.test("HpackDecoder refuses bad options with RangeError", () => {
  for (
    const options of [
      { maxTableSize: -1 },
      { maxTableSize: 1.5 },
      { maxTableSize: 0x80000000 },
      { maxHeaderListSize: -1 },
      { maxHeaderListSize: NaN },
    ]
  ) {
    assert.throws(() => new HpackDecoder(options), RangeError, JSON.stringify(options));
  }
});

// --- The encoder ---

Deno.test("HpackEncoder uses the static table, then literals without indexing", () => {
  const long = "x".repeat(200);
  const cases: [string, Fields, string][] = [
    ["a full match: :method GET", [[":method", "GET"]], "82"],
    ["a full match: :status 200", [[":status", "200"]], "88"],
    ["a full match: :status 404", [[":status", "404"]], "8d"],
    ["a full match with an empty value", [[":authority", ""]], "81"],
    ["a full match: accept-encoding", [["accept-encoding", "gzip, deflate"]], "90"],
    ["the last static entry", [["www-authenticate", ""]], "bd"],
    ["a name match: :status 201", [[":status", "201"]], "08 03 323031"],
    ["a name match: first index of :method", [[":method", "PUT"]], "02 03 505554"],
    ["a name match at index 15", [["accept-charset", "utf-8"]], "0f 00 05 7574662d38"],
    [
      "a name match above index 15",
      [["content-type", "text/plain"]],
      "0f 10 0a 746578742f706c61696e",
    ],
    ["a name match: the last static entry", [["www-authenticate", "x"]], "0f 2e 01 78"],
    ["an unknown name", [["x-custom", "v"]], "00 08 782d637573746f6d 01 76"],
    ["an empty name and value", [["", ""]], "00 00 00"],
    ["a latin1 value", [["x", "\xe9\xff\x00"]], "00 01 78 03 e9ff00"],
    ["a 200-octet value", [["x", long]], `00 01 78 7f 49 ${toHex(new TextEncoder().encode(long))}`],
    [
      "several fields in order",
      [[":status", "200"], ["server", "forgekit"], ["x-a", "b"]],
      "88 0f 27 08 666f7267656b6974 00 03 782d61 01 62",
    ],
    ["no fields", [], ""],
  ];
  const encoder = new HpackEncoder();
  for (const [what, fields, bytes] of cases) {
    const block = encoder.encode(fields);
    assert.equal(toHex(block), bytes.replace(/\s+/g, ""), what);
    assert.deepEqual(decodeOk(new HpackDecoder(), block), fields, what);
  }
});

Deno.test("HpackEncoder blocks decode back, and later blocks do not change earlier ones", () => {
  const encoder = new HpackEncoder();
  const lists: Fields[] = [
    [[":status", "200"], ["content-length", "12"], ["set-cookie", "a=1"], ["set-cookie", "b=2"]],
    [["x-big", randomLatin1(1, 10000)], ["x-all-bytes", ALL_BYTES], [ALL_BYTES, ALL_BYTES]],
    [[":status", "304"], ["etag", '"abc"'], ["vary", "accept-encoding"]],
  ];
  const blocks = lists.map((fields) => encoder.encode(fields));
  const copies = blocks.map((block) => block.slice());
  encoder.encode([["x-overwrite", "z".repeat(20000)]]);
  const decoder = new HpackDecoder({ maxHeaderListSize: 1 << 20 });
  blocks.forEach((block, i) => {
    assert.deepEqual(block, copies[i]);
    assert.deepEqual(decodeOk(decoder, block), lists[i]);
  });
  // Literals without indexing never touch the decoder's table.
  assert.deepEqual(decoder.tableEntries(), []);
});

Deno.test("HpackEncoder refuses characters above U+00FF with TypeError", () => {
  const encoder = new HpackEncoder();
  assert.throws(() => encoder.encode([["x", "price: 5€"]]), {
    name: "TypeError",
    message: /U\+20AC in "price: 5€"/,
  });
  assert.throws(() => encoder.encode([["naïve-ü-\u{1f600}", "v"]]), {
    name: "TypeError",
    message: /U\+1F600/,
  });
  // The encoder stays usable.
  assert.deepEqual(encoder.encode([[":method", "GET"]]), hex("82"));
});
