/**
 * `deno task bench:auth`: the fetch wrapper's overhead against a plain fetch
 * of the same loopback URL, measured in the same run, as a ratio.
 */
import { join } from "node:path";
import { authFetch, loadAuthConfig } from "../lib/auth/mod.ts";
import { median } from "./stats.ts";

/** Requests per variant; they alternate one by one, so drift hits all alike. */
const SAMPLES = 10_000;
const WARMUP = 2_000;

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

/** One request, body read, in µs. */
async function once(get: () => Promise<Response>): Promise<number> {
  const t0 = performance.now();
  await (await get()).arrayBuffer();
  return (performance.now() - t0) * 1000;
}

// The baseline sends the same Authorization header by hand, so the ratio is
// what the wrapper adds (matching, token resolution, redirect handling).
const plain = () => fetch(url, { headers: { authorization: "Bearer bench-token-value" } });
const bare = () => fetch(url);
const wrapped = () => authFetch(url, {}, { authFile: file });
const variants = [plain, wrapped, bare];
// Warm-up: connections, JIT, the config cache.
await loadAuthConfig(file);
for (let i = 0; i < WARMUP; i++) for (const v of variants) await once(v);

// Interleaved request by request, the order rotating, so that drift in the
// machine's speed (a shared VM) hits every variant alike.
const samples: number[][] = variants.map(() => []);
for (let i = 0; i < SAMPLES; i++) {
  for (let k = 0; k < variants.length; k++) {
    const j = (i + k) % variants.length;
    samples[j].push(await once(variants[j]));
  }
}
const [p, w, b] = samples.map(median);
console.log(
  `auth wrapper overhead: ${
    (w / p).toFixed(3)
  }x at the median vs a plain fetch sending the same header ` +
    `(plain ${p.toFixed(1)}µs, authFetch ${w.toFixed(1)}µs per request); ` +
    `${(w / b).toFixed(3)}x vs a header-less fetch (${b.toFixed(1)}µs); ` +
    `${SAMPLES} requests each, interleaved one by one, loopback HTTP, bearer entry matched; target < 1.10`,
);
await server.shutdown();
await Deno.remove(dir, { recursive: true });
