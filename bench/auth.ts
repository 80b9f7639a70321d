/**
 * `deno task bench:auth`: the fetch wrapper's overhead against a plain fetch
 * of the same loopback URL, measured in the same run, as a ratio.
 */
import { join } from "node:path";
import { authFetch, loadAuthConfig } from "../lib/auth/mod.ts";

const ROUNDS = 10;
const PER_ROUND = 1000;

const server = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  () => new Response("ok"),
);
const url = `http://127.0.0.1:${server.addr.port}/bench`;
const dir = await Deno.makeTempDir({ prefix: "forgekit-bench-" });
const file = join(dir, "auth.json");
await Deno.writeTextFile(
  file,
  JSON.stringify({
    providers: [{
      hosts: ["127.0.0.1"],
      provider: "codehost",
      auth: "bearer",
      token_env: "BENCH_TOKEN",
    }],
  }),
  { mode: 0o600 },
);
Deno.env.set("BENCH_TOKEN", "bench-token-value");

async function timeLoop(get: () => Promise<Response>): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < PER_ROUND; i++) await (await get()).arrayBuffer();
  return ((performance.now() - t0) / PER_ROUND) * 1000; // µs per request
}

// The baseline sends the same Authorization header by hand, so the ratio is
// what the wrapper adds (matching, token resolution, redirect handling).
const plain = () => fetch(url, { headers: { authorization: "Bearer bench-token-value" } });
const bare = () => fetch(url);
const wrapped = () => authFetch(url, {}, { authFile: file });
// Warm-up: connections, JIT, the config cache.
await loadAuthConfig(file);
await timeLoop(plain);
await timeLoop(wrapped);

const p: number[] = [];
const w: number[] = [];
const b: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? [0, 1, 2] : [2, 1, 0];
  for (const k of order) {
    if (k === 0) p.push(await timeLoop(plain));
    else if (k === 1) w.push(await timeLoop(wrapped));
    else b.push(await timeLoop(bare));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ratio = median(w) / median(p);
console.log(
  `auth wrapper overhead: ${
    ratio.toFixed(3)
  }x at the median vs a plain fetch sending the same header ` +
    `(plain ${median(p).toFixed(1)}µs, authFetch ${median(w).toFixed(1)}µs per request); ` +
    `${(median(w) / median(b)).toFixed(3)}x vs a header-less fetch (${median(b).toFixed(1)}µs); ` +
    `${ROUNDS} interleaved rounds × ${PER_ROUND} sequential requests, loopback HTTP, bearer entry matched`,
);
await server.shutdown();
await Deno.remove(dir, { recursive: true });
