/**
 * A load generator for the benchmarks, run as its own process so that it does
 * not share an event loop with the server it measures.
 *
 * Usage: deno run -A bench/load.ts URL SECONDS CONCURRENCY [HEADER_JSON]
 * Prints one JSON line: {"requests": N, "seconds": S, "rps": R, "errors": E}.
 */
const [url, secondsRaw = "3", concRaw = "16", headersRaw = "{}"] = Deno.args;
const seconds = Number(secondsRaw);
const headers = JSON.parse(headersRaw) as Record<string, string>;
let requests = 0;
let errors = 0;
const end = performance.now() + seconds * 1000;
async function loop() {
  while (performance.now() < end) {
    try {
      const res = await fetch(url, { headers });
      await res.arrayBuffer();
      if (res.ok) requests++;
      else errors++;
    } catch {
      errors++;
    }
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: Number(concRaw) }, loop));
const took = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ requests, seconds: took, rps: requests / took, errors }));
