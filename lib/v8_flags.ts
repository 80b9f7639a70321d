/**
 * The V8 flags forgekit runs with: baked into the binaries by `deno
 * compile`, put in the bundle's shebang, and given by the `deno task`
 * commands that run it (deno.json; a test keeps them all equal to this).
 *
 * `--invocation-count-for-turbofan=1000` (V8's default is 3000). A proxy's
 * per-request functions each run about once a request, and V8 compiled them
 * with its top tier only after about 17,000 requests (seen with
 * `--trace-opt`); until then a bumped HTTP/2 request cost about 100 µs of
 * CPU instead of 65. With 1000 that point comes after about 5,000.
 * `v8.setFlagsFromString` at run time does not change it: the flag must be
 * given at start.
 *
 * `--no-memory-reducer`. When the process is idle for a while, V8's memory
 * reducer runs garbage collections that shrink the heap, and those drop the
 * object shapes ("maps") that only a finished connection's objects used.
 * All optimized code that depended on them is thrown away (`--trace-deopt`:
 * "embedded weak objects cleared", about 60 functions each time), so the
 * next connections run slowly until V8 has compiled it all again. In the
 * bench, whose other proxies keep forgekit idle for seconds, two such
 * collections threw away code 137 times in one run, and forgekit's HTTP/2
 * requests cost 1.2–1.5x squid's CPU; without the reducer, code was thrown
 * away once, and they cost 0.89x. The price: the heap does not shrink back
 * after a burst while idle (tens of MB, given back at exit).
 *
 * @module
 */

/** The flags, for `--v8-flags=` or `DENO_V8_FLAGS`. */
export const V8_FLAGS: readonly string[] = [
  "--invocation-count-for-turbofan=1000",
  "--no-memory-reducer",
];

/** The `deno run` / `deno compile` argument carrying {@linkcode V8_FLAGS}. */
export const V8_FLAGS_ARG = `--v8-flags=${V8_FLAGS.join(",")}`;
