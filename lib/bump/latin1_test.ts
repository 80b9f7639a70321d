import assert from "node:assert/strict";
import { latin1Decode, latin1Encode, latin1EncodeInto } from "./latin1.ts";

const ALL = Uint8Array.from({ length: 256 }, (_, i) => i);

Deno.test("latin1Decode gives each byte as one code unit, at every size", () => {
  const cases: [string, Uint8Array, string][] = [
    ["empty", new Uint8Array(0), ""],
    ["one byte", new Uint8Array([0xe9]), "\u00e9"],
    ["two bytes", new Uint8Array([0x80, 0x9f]), "\u0080\u009f"],
    ["three bytes", new Uint8Array([0x41, 0x00, 0xff]), "A\u0000\u00ff"],
    // Not windows-1252: 0x80 is U+0080, not €.
    ["all 256 bytes", ALL, Array.from(ALL, (b) => String.fromCharCode(b)).join("")],
  ];
  for (const [what, bytes, text] of cases) assert.equal(latin1Decode(bytes), text, what);
});

Deno.test("latin1Decode takes a range, and long ASCII and long mixed text whole", () => {
  const bytes = new TextEncoder().encode("xxGET / HTTP/1.1yy");
  assert.equal(latin1Decode(bytes, 2, 16), "GET / HTTP/1.1");
  const ascii = "a-z0-9 ".repeat(1000); // the native ASCII path, 7000 bytes
  assert.equal(latin1Decode(new TextEncoder().encode(ascii)), ascii);
  const mixed = new Uint8Array(10_000).map((_, i) => (i * 7) & 0xff); // chunked path
  const text = latin1Decode(mixed);
  assert.equal(text.length, mixed.length);
  assert.ok([...text].every((c, i) => c.charCodeAt(0) === mixed[i]));
});

Deno.test("latin1Encode is the inverse of latin1Decode", () => {
  assert.deepEqual(latin1Encode(latin1Decode(ALL)), ALL);
  assert.deepEqual(latin1Encode(""), new Uint8Array(0));
  assert.deepEqual(latin1Encode("caf\u00e9"), new Uint8Array([0x63, 0x61, 0x66, 0xe9]));
});

Deno.test("latin1EncodeInto writes at an offset and returns the end", () => {
  const buf = new Uint8Array(8).fill(0x2e);
  assert.equal(latin1EncodeInto("ab\u00ff", buf, 2), 5);
  assert.deepEqual(buf, new Uint8Array([0x2e, 0x2e, 0x61, 0x62, 0xff, 0x2e, 0x2e, 0x2e]));
});

Deno.test("a character above U+00FF is a TypeError naming it", () => {
  assert.throws(() => latin1Encode("price: 5\u20ac"), {
    name: "TypeError",
    message: /U\+20AC in "price: 5€"/,
  });
  assert.throws(() => latin1Encode("x\u{1f600}"), { name: "TypeError", message: /U\+1F600/ });
});
