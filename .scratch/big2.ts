import { curl, startBumpFixture } from "../tests/support/bump.ts";
const body = new Uint8Array(16 << 20);
const f = await startBumpFixture([], () => new Response(body));
for (const v of ["--http1.1", "--http2"]) {
  const t0 = performance.now();
  const r = await curl(f, [v, "-m", "10", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{http_version}", "https://api.github.com/big"]);
  console.log(v, r.code, r.out, (performance.now() - t0).toFixed(0), "ms");
}
console.log(f.debug.slice(-6).join("\n"));
await f.close();
