import assert from "node:assert/strict";
import { type CachedResponse, ResponseCache } from "./response_cache.ts";

const entry = (version: number, bytes: number): CachedResponse => ({
  version,
  body: new Uint8Array(bytes),
  headers: [["content-type", "application/json"]],
  etag: 'W/"x"',
});

Deno.test("ResponseCache holds at most maxBytes, dropping the least recently used first", () => {
  const cache = new ResponseCache({ maxBytes: 10_000, maxEntryBytes: 5_000 });
  for (let i = 0; i < 100; i++) {
    cache.set(`k${i}`, entry(1, 3_000));
    assert.ok(cache.bytes <= 10_000, `${cache.bytes} bytes after ${i + 1} entries`);
  }
  assert.equal(cache.size, 3);
  assert.ok(cache.get("k99", 1) && cache.get("k97", 1));
  assert.equal(cache.get("k96", 1), undefined);
  cache.get("k97", 1); // k97 is now the most recently used; k98 the least
  cache.set("k100", entry(1, 3_000));
  assert.equal(cache.get("k98", 1), undefined);
  assert.ok(cache.get("k97", 1));
});

Deno.test("ResponseCache never keeps a body over maxEntryBytes", () => {
  const cache = new ResponseCache({ maxBytes: 100_000, maxEntryBytes: 1_000 });
  cache.set("small", entry(1, 1_000));
  cache.set("big", entry(1, 1_001));
  assert.ok(cache.get("small", 1));
  assert.equal(cache.get("big", 1), undefined);
  cache.set("small", entry(1, 5_000)); // replacing with a body too big drops the old one too
  assert.equal(cache.get("small", 1), undefined);
  assert.equal(cache.bytes, 0);
});

Deno.test("ResponseCache drops every entry once a newer data version is seen, and keeps none of an older one", () => {
  const cache = new ResponseCache();
  cache.set("a", entry(1, 100));
  cache.set("b", entry(1, 100));
  assert.ok(cache.get("a", 1));
  assert.equal(cache.get("b", 2), undefined, "stale at version 2");
  assert.equal(cache.size, 0, "all of version 1 is gone");
  assert.equal(cache.bytes, 0);
  cache.set("c", entry(1, 100)); // computed before the commit, finished after it
  assert.equal(cache.size, 0);
  cache.set("c", entry(2, 100));
  assert.equal(cache.get("c", 1), undefined, "a late reader of version 1 is not served version 2");
  assert.ok(cache.get("c", 2));
});
