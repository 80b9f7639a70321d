/**
 * A TLS origin for the firewall benchmarks, in its own process:
 * `deno run -A bench/origin.ts CERT_FILE KEY_FILE PORT` serves /64k and /16m
 * on 127.0.0.1 and prints "ready".
 */
const [certFile, keyFile, port = "443"] = Deno.args;
const small = new Uint8Array(64 * 1024).fill(97);
const big = new Uint8Array(16 * 1024 * 1024).fill(98);
Deno.serve({
  hostname: "127.0.0.1",
  port: Number(port),
  cert: Deno.readTextFileSync(certFile),
  key: Deno.readTextFileSync(keyFile),
  onListen() {
    console.log("ready");
  },
}, (req) => {
  const path = new URL(req.url).pathname;
  if (path === "/64k") return new Response(small);
  if (path === "/16m") return new Response(big);
  return new Response("not found", { status: 404 });
});
