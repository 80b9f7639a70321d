/**
 * A TLS origin for the firewall benchmarks, in its own process (as a real
 * origin would be: it must not share the event loop of the proxy measured):
 * `deno run -A bench/origin.ts CERT_FILE KEY_FILE [PORT [ADDRESS]]` serves /64k,
 * /16m, /small ("ok\n") and /big (16 MiB) on ADDRESS (default 127.0.0.1) and
 * prints "ready PORT".
 */
const [certFile, keyFile, port = "443", hostname = "127.0.0.1"] = Deno.args;
const small = new Uint8Array(64 * 1024).fill(97);
const big = new Uint8Array(16 * 1024 * 1024).fill(98);
Deno.serve({
  hostname,
  port: Number(port),
  cert: Deno.readTextFileSync(certFile),
  key: Deno.readTextFileSync(keyFile),
  onListen(addr) {
    console.log(`ready ${addr.port}`);
  },
}, (req) => {
  const path = new URL(req.url).pathname;
  if (path === "/64k") return new Response(small);
  if (path === "/16m" || path === "/big") return new Response(big);
  if (path === "/small") return new Response("ok\n");
  return new Response("not found", { status: 404 });
});
