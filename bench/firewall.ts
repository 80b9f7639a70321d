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
import { ownCpu, procCpu } from "./cpu.ts";
import { median, spread } from "./stats.ts";
import { benchBump } from "./firewall_bump.ts";

// `deno task bench:firewall [splice|bump]`: both parts, or only the one named.
const only = Deno.args[0];
if (only !== undefined && only !== "splice" && only !== "bump") {
  console.error(`error: unknown part "${only}"; use: deno task bench:firewall [splice|bump]`);
  Deno.exit(2);
}

/** Kept-alive 64 KiB requests per run. */
const KEEPALIVE_REQUESTS = 300;
/** Kept-alive runs per target and round, interleaved with the other targets'. */
const REPS = 3;
/** Kept-alive requests, 16 MiB downloads and new connections per target before the rounds. */
const WARM_UP = { requests: 1500, downloads: 2, connections: 20 };
/** New connections timed per target and round (their median is the round's sample). */
const CONNS = 5;
/** Measurement rounds; each figure is the median of its rounds. */
const ROUNDS = 7;

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

/** A path to the origin: direct, or through a proxy. */
interface Target {
  name: string;
  /** curl's proxy arguments. */
  via: string[];
  /** CPU time used so far, µs (forgekit and direct: this process's; squid: its own). */
  cpu: () => number;
}

const URL_64K = "https://localhost/64k";

/** Sequential 64 KiB requests over one kept-alive connection: seconds taken. */
async function keptAlive(t: Target, n: number): Promise<number> {
  const t0 = performance.now();
  await curl([
    ...t.via,
    ...Array(n).fill(URL_64K).flatMap((u) => [u, "-o", "/dev/null"]),
  ]);
  return (performance.now() - t0) / 1000;
}

async function download16m(t: Target): Promise<number> {
  const out = await curl([
    ...t.via,
    "-o",
    "/dev/null",
    "-w",
    "%{speed_download} %{size_download}",
    "https://localhost/16m",
  ]);
  const [speed, size] = out.split(" ").map(Number);
  if (size !== 16 * 1024 * 1024) throw new Error(`${t.name}: 16 MiB download got ${size} bytes`);
  return speed / 1e6;
}

/** Median time to TLS done on new connections (TCP + CONNECT + TLS handshake), ms. */
async function connectMs(t: Target, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    times.push(
      Number(await curl([...t.via, "-o", "/dev/null", "-w", "%{time_appconnect}", URL_64K])) *
        1000,
    );
  }
  return median(times);
}

async function startSquid(): Promise<{ url: string; pid: number; stop(): Promise<void> } | null> {
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
  // Squid logs each tunnel as forgekit does, as the user it runs as (proxy, when started as root).
  const logs = await Deno.makeTempDir({ prefix: "squid-bench-logs-" });
  await Deno.chmod(logs, 0o777);
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
      `access_log stdio:${join(logs, "access.log")} squid`,
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
        pid: child.pid,
        async stop() {
          try {
            child.kill("SIGKILL");
          } catch { /* gone */ }
          await child.status;
          await Deno.remove(logs, { recursive: true });
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
  await Deno.remove(logs, { recursive: true });
  return null;
}

/** One target's samples, one per round for each figure. */
interface Samples {
  rps: number[];
  mbps: number[];
  connectMs: number[];
  /** CPU per 64 KiB request and per MB of the 16 MiB download, µs. */
  cpuReq: number[];
  cpuMB: number[];
}

/**
 * Measures every target round by round, the order rotating, so that the
 * drift of this machine's speed hits each alike; each target's kept-alive
 * figure is the total of REPS runs interleaved with the others'.
 */
async function measureAll(targets: Target[]): Promise<{ cold: number[]; samples: Samples[] }> {
  const cold: number[] = [];
  for (const t of targets) {
    // The first requests, before any warm-up: what a short run gets.
    cold.push(KEEPALIVE_REQUESTS / await keptAlive(t, KEEPALIVE_REQUESTS));
    await keptAlive(t, WARM_UP.requests);
    for (let i = 0; i < WARM_UP.downloads; i++) await download16m(t);
    await connectMs(t, WARM_UP.connections);
  }
  const samples = targets.map((): Samples => ({
    rps: [],
    mbps: [],
    connectMs: [],
    cpuReq: [],
    cpuMB: [],
  }));
  for (let round = 0; round < ROUNDS; round++) {
    const each = async (measure: (t: Target, s: Samples) => Promise<void>) => {
      for (let k = 0; k < targets.length; k++) {
        const i = (round + k) % targets.length;
        await measure(targets[i], samples[i]);
      }
    };
    const seconds = targets.map(() => 0);
    const cpu = targets.map(() => 0);
    for (let rep = 0; rep < REPS; rep++) {
      await each(async (t) => {
        const i = targets.indexOf(t);
        const c0 = t.cpu();
        seconds[i] += await keptAlive(t, KEEPALIVE_REQUESTS);
        cpu[i] += t.cpu() - c0;
      });
    }
    targets.forEach((_, i) => {
      samples[i].rps.push((REPS * KEEPALIVE_REQUESTS) / seconds[i]);
      samples[i].cpuReq.push(cpu[i] / (REPS * KEEPALIVE_REQUESTS));
    });
    await each(async (t, s) => {
      const c0 = t.cpu();
      s.mbps.push(await download16m(t));
      s.cpuMB.push((t.cpu() - c0) / 16.777216);
    });
    await each(async (t, s) => void s.connectMs.push(await connectMs(t, CONNS)));
  }
  return { cold, samples };
}

function spliceLines(targets: Target[], cold: number[], samples: Samples[]): string[] {
  const m = samples.map((s) => ({
    rps: median(s.rps),
    mbps: median(s.mbps),
    ms: median(s.connectMs),
    cpuReq: median(s.cpuReq),
    cpuMB: median(s.cpuMB),
  }));
  const d = m[0];
  // forgekit runs in this process: its CPU less this process's own on the direct runs.
  const own = (t: Target, x: number, base: number) =>
    t.name === FORGEKIT ? Math.max(0, x - base) : x;
  const lines = [
    `firewall, splice mode (curl, HTTP/1.1, loopback; ${REPS} interleaved runs of ${KEEPALIVE_REQUESTS} kept-alive 64 KiB requests per round, one 16 MiB download, new-connection time to TLS done (median of ${CONNS}); median of ${ROUNDS} rounds; ratio to direct)`,
    ...targets.map((t, i) =>
      `${t.name.padEnd(24)} ${m[i].rps.toFixed(0).padStart(6)} req/s (${
        (m[i].rps / d.rps).toFixed(2)
      })  ${m[i].mbps.toFixed(0).padStart(5)} MB/s (${(m[i].mbps / d.mbps).toFixed(2)})  ${
        m[i].ms.toFixed(2).padStart(6)
      } ms (+${(m[i].ms - d.ms).toFixed(2)} ms)  ${
        i === 0
          ? `bench process CPU ${d.cpuReq.toFixed(0)} µs/req, ${
            d.cpuMB.toFixed(0)
          } µs/MB (taken off forgekit's)`
          : `CPU ${own(t, m[i].cpuReq, d.cpuReq).toFixed(0)} µs/req, ${
            own(t, m[i].cpuMB, d.cpuMB).toFixed(0)
          } µs/MB`
      }`
    ),
    `  cold start (each target's first ${KEEPALIVE_REQUESTS} kept-alive requests, before the rounds): ${
      targets.map((t, i) => `${t.name.split(" ")[0]} ${cold[i].toFixed(0)} req/s`).join(", ")
    }`,
  ];
  const fk = targets.findIndex((t) => t.name === FORGEKIT);
  const sq = targets.findIndex((t) => t.name.startsWith("squid"));
  if (fk === -1 || sq === -1) return lines;
  const [f, s, dir] = [samples[fk], samples[sq], samples[0]];
  const per = (k: (s: Samples, r: number) => number) => f.rps.map((_, r) => k(f, r) / k(s, r));
  lines.push(
    `  forgekit / squid, per round (median (lowest–highest) of ${ROUNDS}; above 1 = forgekit ahead, except CPU and ms):`,
    `    64 KiB req/s ${spread(per((x, r) => x.rps[r]))}x | 16 MiB ${
      spread(per((x, r) => x.mbps[r]))
    }x | new conn added ms, forgekit minus squid ${
      spread(f.connectMs.map((x, r) => x - s.connectMs[r]))
    } | CPU per request ${
      spread(f.cpuReq.map((x, r) => Math.max(0, x - dir.cpuReq[r]) / s.cpuReq[r]))
    }x, per MB ${spread(f.cpuMB.map((x, r) => Math.max(0, x - dir.cpuMB[r]) / s.cpuMB[r]))}x`,
  );
  return lines;
}

const FORGEKIT = "forgekit proxy";

/** The splice-mode figures, squid started for them and stopped after. */
async function benchSplice(): Promise<string[]> {
  const squid = await startSquid();
  const targets: Target[] = [
    { name: "direct", via: [], cpu: ownCpu },
    { name: FORGEKIT, via: ["--proxy", forgekitProxy], cpu: ownCpu },
  ];
  if (squid) {
    targets.push({
      name: "squid (same allow list)",
      via: ["--proxy", squid.url],
      cpu: () => procCpu(squid.pid),
    });
  }
  try {
    const { cold, samples } = await measureAll(targets);
    const lines = spliceLines(targets, cold, samples);
    if (!squid) lines.push("  squid: not installed (apt-get install squid-openssl to compare)");
    return lines;
  } finally {
    await squid?.stop();
  }
}

const lines = only === "bump" ? [] : await benchSplice();
if (only !== "splice") lines.push(...await benchBump());
console.log(lines.join("\n"));

listener.close();
await serving;
log.close();
origin.kill();
await origin.status;
await reader.cancel().catch(() => {});
await origin.stderr.cancel().catch(() => {});
await Deno.remove(dir, { recursive: true });
