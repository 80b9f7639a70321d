import assert from "node:assert/strict";
import { LeafCache } from "./leaf_cache.ts";

Deno.test("LeafCache shares one making between concurrent requests for a key", async () => {
  const cache = new LeafCache<number>({ capacity: 4 });
  let made = 0;
  const make = async () => {
    await new Promise((r) => setTimeout(r, 5));
    return ++made;
  };
  const got = await Promise.all([cache.get("a", make), cache.get("a", make), cache.get("a", make)]);
  assert.deepEqual(got, [1, 1, 1]);
  assert.equal(made, 1);
});

Deno.test("LeafCache evicts the least recently used entry beyond its capacity", async () => {
  const evicted: string[] = [];
  const cache = new LeafCache<string>({ capacity: 2, onEvict: (v) => evicted.push(v) });
  await cache.get("a", () => Promise.resolve("A"));
  await cache.get("b", () => Promise.resolve("B"));
  await cache.get("a", () => Promise.resolve("A2")); // a is now most recent
  await cache.get("c", () => Promise.resolve("C"));
  await Promise.resolve();
  assert.deepEqual(evicted, ["B"]);
  assert.equal(cache.has("a"), true);
  assert.equal(cache.has("b"), false);
  assert.equal(cache.size, 2);
});

Deno.test("LeafCache does not keep a failed making", async () => {
  const cache = new LeafCache<string>({ capacity: 2 });
  await assert.rejects(cache.get("a", () => Promise.reject(new Error("no"))));
  assert.equal(cache.has("a"), false);
  assert.equal(await cache.get("a", () => Promise.resolve("ok")), "ok");
});

Deno.test("LeafCache refuses a capacity below 1", () => {
  assert.throws(() => new LeafCache({ capacity: 0 }), /at least 1: got 0/);
});
