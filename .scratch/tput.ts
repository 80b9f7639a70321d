import tls from "node:tls";
import net from "node:net";
import process from "node:process";
import { makeTestCa } from "../tests/support/tls.ts";
const ca = await makeTestCa("x");
const leaf = await ca.issue(["localhost"]);
const dir = await Deno.makeTempDir();
await Deno.writeTextFile(dir + "/c.pem", leaf.cert); await Deno.writeTextFile(dir + "/k.pem", leaf.key); await Deno.writeTextFile(dir + "/ca.pem", ca.cert);
const child = new Deno.Command(Deno.execPath(), { args: ["run", "-A", "../bench/origin.ts", dir + "/c.pem", dir + "/k.pem", "0"], stdout: "piped" }).spawn();
const rd = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
const port = Number(/ready (\d+)/.exec((await rd.read()).value!)![1]);
const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
// (a) Deno TLS read of /big
for (let i = 0; i < 2; i++) {
  const c = await Deno.connectTls({ hostname: "localhost", port, caCerts: [ca.cert] });
  await c.write(new TextEncoder().encode("GET /big HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
  const c0 = cpu(); const t0 = performance.now(); let n = 0;
  const buf = new Uint8Array(64 * 1024);
  for (let r = await c.read(buf); r !== null; r = await c.read(buf)) n += r;
  console.log("deno TLS read", n, "bytes", ((cpu() - c0) / (n / 1048576)).toFixed(0), "µs/MB", (n / 1048576 / ((performance.now() - t0) / 1000)).toFixed(0), "MB/s");
  c.close();
}
// (c) relay: Deno TLS read from origin -> node TLS write to curl
const srv2 = tls.createServer({ cert: leaf.cert, key: leaf.key }, (s) => {
  s.once("data", async () => {
    const c = await Deno.connectTls({ hostname: "localhost", port, caCerts: [ca.cert] });
    await c.write(new TextEncoder().encode("GET /big HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
    let sizes = 0, reads = 0;
    const B = Number(Deno.env.get("BUF") ?? 65536);
    let done = false;
    while (!done) {
      const buf = new Uint8Array(B);
      let filled = 0;
      while (filled < B - 16384) {
        const n = await c.read(buf.subarray(filled));
        if (n === null) { done = true; break; }
        reads++; sizes += n; filled += n;
      }
      if (filled && !s.write(buf.subarray(0, filled))) await new Promise((r) => s.once("drain", r));
    }
    console.log("avg read", (sizes / reads).toFixed(0));
    c.close(); s.end();
  });
});
await new Promise<void>((r) => srv2.listen(0, "127.0.0.1", () => r()));
const sport2 = (srv2.address() as net.AddressInfo).port;
for (let i = 0; i < 2; i++) {
  const c0 = cpu(); const t0 = performance.now();
  await new Deno.Command("curl", { args: ["-s", "-o", "/dev/null", "--http0.9", "--cacert", dir + "/ca.pem", "--resolve", `localhost:${sport2}:127.0.0.1`, `https://localhost:${sport2}/`] }).output();
  console.log("relay deno->node 16 MiB", ((cpu() - c0) / 16).toFixed(0), "µs/MB", (16 / ((performance.now() - t0) / 1000)).toFixed(0), "MB/s");
}
// (b) node TLS server writing 16 MiB to curl
const big = new Uint8Array(16 << 20);
const srv = tls.createServer({ cert: leaf.cert, key: leaf.key }, (s) => {
  s.once("data", () => {
    s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${big.length}\r\nconnection: close\r\n\r\n`);
    let off = 0;
    const pump = () => { while (off < big.length) { const ok = s.write(big.subarray(off, off + 65536)); off += 65536; if (!ok) return s.once("drain", pump); } s.end(); };
    pump();
  });
});
await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
const sport = (srv.address() as net.AddressInfo).port;
for (let i = 0; i < 2; i++) {
  const c0 = cpu(); const t0 = performance.now();
  await new Deno.Command("curl", { args: ["-s", "-o", "/dev/null", "--cacert", dir + "/ca.pem", "--resolve", `localhost:${sport}:127.0.0.1`, `https://localhost:${sport}/`] }).output();
  console.log("node TLS server write 16 MiB", ((cpu() - c0) / 16).toFixed(0), "µs/MB", (16 / ((performance.now() - t0) / 1000)).toFixed(0), "MB/s");
}
child.kill(); Deno.exit(0);
