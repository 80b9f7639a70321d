import tls from "node:tls";
import process from "node:process";
import { makeTestCa } from "../tests/support/tls.ts";
const ca = await makeTestCa("x");
const leaf = await ca.issue(["localhost"]);
const dir = await Deno.makeTempDir();
await Deno.writeTextFile(dir + "/c.pem", leaf.cert); await Deno.writeTextFile(dir + "/k.pem", leaf.key);
const child = new Deno.Command(Deno.execPath(), { args: ["run", "-A", "../bench/origin.ts", dir + "/c.pem", dir + "/k.pem", "0"], stdout: "piped" }).spawn();
const rd = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
const port = Number(/ready (\d+)/.exec((await rd.read()).value!)![1]);
const req = new TextEncoder().encode("GET /small HTTP/1.1\r\nHost: localhost\r\n\r\n");
const N = 3000;
const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
async function denoLoop() {
  const c = await Deno.connectTls({ hostname: "localhost", port, caCerts: [ca.cert] });
  const buf = new Uint8Array(65536);
  await c.write(req); await c.read(buf);
  const c0 = cpu(); const t0 = performance.now();
  for (let i = 0; i < N; i++) { await c.write(req); await c.read(buf); }
  const r = [(N / ((performance.now() - t0) / 1000)).toFixed(0), ((cpu() - c0) / N).toFixed(0)];
  c.close(); return r;
}
async function nodeLoop() {
  const s = tls.connect({ host: "127.0.0.1", port, servername: "localhost", ca: ca.cert });
  await new Promise((r) => s.once("secureConnect", r));
  s.setNoDelay(true);
  let wake: (() => void) | null = null;
  s.on("data", () => { const w = wake; wake = null; w?.(); });
  const once = () => new Promise<void>((r) => wake = r);
  s.write(req); await once();
  const c0 = cpu(); const t0 = performance.now();
  for (let i = 0; i < N; i++) { const p = once(); s.write(req); await p; }
  const r = [(N / ((performance.now() - t0) / 1000)).toFixed(0), ((cpu() - c0) / N).toFixed(0)];
  s.destroy(); return r;
}
for (let i = 0; i < 3; i++) {
  console.log("deno TLS req/s, cpu µs:", await denoLoop(), " node TLS:", await nodeLoop());
}
child.kill(); Deno.exit(0);
