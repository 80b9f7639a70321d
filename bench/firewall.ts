/**
 * `deno task bench:firewall`: HTTPS downloads (64 KiB and 16 MiB) from a
 * loopback origin directly, through forgekit's proxy (splice mode), and
 * through Squid where installed (same allow list), in one run: requests per
 * second on a kept-alive connection, MB/s, and the added latency of a new
 * connection (CONNECT + TLS handshake), as ratios to direct.
 *
 * The origin listens on 127.0.0.1:443 as "localhost" (the proxy allows ports
 * 80 and 443 only), so this needs root and a free port 443.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeTestCa } from "../tests/support/tls.ts";
import { AccessLog } from "../lib/bump/access_log.ts";
import { serveProxy } from "../lib/bump/proxy.ts";
import { listenProxy } from "../lib/bump/node_conn.ts";
import { proxyEnv } from "../lib/bump/upstream.ts";

const KEEPALIVE_REQUESTS = 300;
const LATENCY_RUNS = 25;
const BIG_RUNS = 5;

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const dir = await Deno.makeTempDir({ prefix: "forgekit-bench-fw-" });
const ca = await makeTestCa("forgekit bench CA");
const leaf = await ca.issue(["localhost"]);
await Deno.writeTextFile(join(dir, "leaf.pem"), leaf.cert);
await Deno.writeTextFile(join(dir, "leaf.key"), leaf.key);

const origin = new Deno.Command(Deno.execPath(), {
  args: ["run", "-A", here("./origin.ts"), join(dir, "leaf.pem"), join(dir, "leaf.key"), "443"],
  stdout: "piped",
  stderr: "piped",
}).spawn();
const reader = origin.stdout.pipeThrough(new TextDecoderStream()).getReader();
const first = await reader.read();
if (!first.value?.includes("ready")) {
  console.error(
    `error: the bench origin could not listen on 127.0.0.1:443 (run as root, with port 443 free)`,
  );
  Deno.exit(1);
}

// forgekit's proxy, as the firewall runs it (splice mode), on a TCP port.
const log = new AccessLog(join(dir, "access.log"));
const listener = await listenProxy({ hostname: "127.0.0.1", port: 0 }, false);
const serving = serveProxy(listener, {
  policy: { allow: ["localhost"], block: [] },
  log,
  upstream: proxyEnv(() => undefined),
  bump: null,
});
const forgekitProxy = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;

async function curl(args: string[]): Promise<string> {
  const out = await new Deno.Command("curl", {
    // HTTP/1.1: with h2, curl and the origin hit a delayed-ACK stall that hides everything else.
    args: ["-sS", "--http1.1", "--cacert", ca.certPath, "--noproxy", "", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`curl ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return new TextDecoder().decode(out.stdout);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

interface Figures {
  rps64k: number;
  mbps16m: number;
  connectMs: number;
}

async function measure(proxy: string | null): Promise<Figures> {
  const via = proxy ? ["--proxy", proxy] : [];
  const url = "https://localhost/64k";
  // Kept-alive: many URLs in one curl invocation reuse the connection.
  const t0 = performance.now();
  await curl([
    ...via,
    "-o",
    "/dev/null",
    ...Array(KEEPALIVE_REQUESTS).fill(url).flatMap((u) => [u, "-o", "/dev/null"]),
  ]);
  const rps64k = KEEPALIVE_REQUESTS / ((performance.now() - t0) / 1000);
  const speeds: number[] = [];
  for (let i = 0; i < BIG_RUNS; i++) {
    speeds.push(
      Number(
        await curl([...via, "-o", "/dev/null", "-w", "%{speed_download}", "https://localhost/16m"]),
      ) / 1e6,
    );
  }
  const connects: number[] = [];
  for (let i = 0; i < LATENCY_RUNS; i++) {
    connects.push(
      Number(await curl([...via, "-o", "/dev/null", "-w", "%{time_appconnect}", url])) * 1000,
    );
  }
  return { rps64k, mbps16m: median(speeds), connectMs: median(connects) };
}

async function startSquid(): Promise<{ url: string; stop(): Promise<void> } | null> {
  const squid = ["/usr/sbin/squid", "/usr/bin/squid"].find((p) => {
    try {
      return Deno.statSync(p).isFile;
    } catch {
      return false;
    }
  });
  if (!squid) return null;
  const port = 3128 + Math.floor(Math.random() * 1000);
  const conf = join(dir, "squid.conf");
  await Deno.writeTextFile(
    conf,
    [
      `http_port 127.0.0.1:${port}`,
      "acl allowed dstdomain localhost",
      "acl SSL_ports port 443",
      "acl Safe_ports port 80 443",
      "acl CONNECT method CONNECT",
      "http_access deny !Safe_ports",
      "http_access deny CONNECT !SSL_ports",
      "http_access allow allowed",
      "http_access deny all",
      "cache deny all",
      "pid_filename none",
      "access_log none",
      "cache_log /dev/null",
      "cache_mem 8 MB",
      "shutdown_lifetime 0 seconds",
    ].join("\n") + "\n",
  );
  const child = new Deno.Command(squid, {
    args: ["-N", "-f", conf],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const end = Date.now() + 15_000;
  while (Date.now() < end) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return {
        url: `http://127.0.0.1:${port}`,
        async stop() {
          try {
            child.kill("SIGKILL");
          } catch { /* gone */ }
          await child.status;
        },
      };
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  try {
    child.kill("SIGKILL");
  } catch { /* exited: squid refused the configuration */ }
  await child.status;
  return null;
}

const direct = await measure(null);
const ours = await measure(forgekitProxy);
const squid = await startSquid();
const theirs = squid ? await measure(squid.url) : null;
await squid?.stop();

const row = (name: string, f: Figures) =>
  `${name.padEnd(22)} ${f.rps64k.toFixed(0).padStart(6)} req/s (${
    (f.rps64k / direct.rps64k).toFixed(2)
  })  ${f.mbps16m.toFixed(0).padStart(5)} MB/s (${(f.mbps16m / direct.mbps16m).toFixed(2)})  ${
    f.connectMs.toFixed(2).padStart(6)
  } ms (+${(f.connectMs - direct.connectMs).toFixed(2)} ms)`;
const lines = [
  "firewall, splice mode: 64 KiB kept-alive req/s, 16 MiB MB/s, new-connection time to TLS done (curl, loopback; ratio to direct)",
  row("direct", direct),
  row("forgekit proxy", ours),
  theirs
    ? row("squid (same allow list)", theirs)
    : "squid: not installed (apt-get install squid-openssl to compare)",
];

try {
  const mod = await import("./firewall_bump.ts");
  if (typeof mod.benchBump === "function") lines.push(...await mod.benchBump());
} catch (err) {
  if (!(err instanceof TypeError && /Module not found|Cannot find/.test(String(err)))) {
    lines.push(`ssl-bump figures unavailable: ${(err as Error).message}`);
  }
}
console.log(lines.join("\n"));

listener.close();
await serving;
log.close();
origin.kill();
await origin.status;
await reader.cancel().catch(() => {});
await origin.stderr.cancel().catch(() => {});
await Deno.remove(dir, { recursive: true });
