/**
 * Bump-mode figures for `deno task bench:firewall`: requests per second on
 * kept-alive connections (HTTP/1.1, HTTP/2), MB/s for a 16 MiB download
 * (over each) and the added latency of a new connection, as ratios to a
 * direct connection, with squid-openssl (ssl_bump) and mitmproxy measured in
 * the same run when installed, and each proxy's CPU time per request and
 * per MB (forgekit runs in this process: its figure is this process's CPU
 * minus what the same run costs it with no proxy, direct; the others are
 * read from /proc).
 * "h2" is what an HTTP/2 client gets: squid answers it in HTTP/1.1. New
 * connections are timed over HTTP/1.1 (every target speaks it) and with h2
 * offered. The client is curl for every proxy; the origin is an HTTPS
 * server on port 443 under real names (test CA). As root the run happens in
 * private network and mount namespaces whose /etc/hosts maps those names to
 * the origin's address there (ORIGIN_ADDR), so every proxy dials the origin
 * directly; otherwise through a
 * CONNECT router (squid skipped). Nothing leaves loopback.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeTestCa } from "../tests/support/tls.ts";
import { startBumpFront } from "../tests/support/bump.ts";
import { ownCpu, procCpu } from "./cpu.ts";
import { median, spread } from "./stats.ts";
import { V8_FLAGS_ARG } from "../lib/v8_flags.ts";

const dec = new TextDecoder();
/**
 * The origin's address in the private namespace: on its loopback interface,
 * but not a loopback address, which forgekit refuses to dial for a name (a
 * name resolving to this machine could reach its services).
 */
const ORIGIN_ADDR = "10.255.0.1";
/**
 * Requests per kept-alive run. With 500, what a run costs once weighed on
 * it (its connection, and the compiled code V8 throws away when the rounds'
 * new connections take paths not seen before): the HTTP/2 ratio to squid
 * moved between 1.00 and 1.12 from run to run. Not more, so that a round
 * stays well under 30 s: forgekit closes origin connections idle that long,
 * and the cached-leaf hosts' connections must still be pooled at the next
 * round (a fresh connection to the bench origin may wait 40 ms for its
 * first response, see the README).
 */
const N = 1000;
/** The cold-start figure: each target's first COLD_N kept-alive requests. */
const COLD_N = 500;
/** Kept-alive runs of N requests per target, protocol and round (interleaved). */
const REPS = 3;
/** Kept-alive requests of each protocol every target serves before the rounds. */
const WARM_UP = 3000;
/**
 * New connections (to hosts whose leaf is cached, HTTP/1.1) each target
 * makes right after its leaves are made, printed as "cold new connections":
 * a connection's set-up runs once per connection, so forgekit's JavaScript
 * for it is compiled by V8 only over its first few hundred connections.
 */
const COLD_CONNS = 20;
/** Measurement rounds; each figure is the median of its rounds. */
const ROUNDS = 7;
/** Hosts timed per new-connection figure (their median is the round's sample). */
const PER_ROUND = 5;
/**
 * The protocols new connections are timed with: HTTP/1.1, which every
 * target speaks, and curl's default offer of h2 and http/1.1 (forgekit and
 * direct answer in HTTP/2, squid in HTTP/1.1).
 */
const NEW_CONN = ["--http1.1", "--http2"] as const;
/**
 * h0 for kept-alive runs and downloads; then PER_ROUND hosts whose leaves are
 * made at the start (new connections with a cached leaf); then PER_ROUND
 * unseen hosts per round and protocol (new connections whose leaf is signed then).
 */
const HOSTS = Array.from(
  { length: 1 + PER_ROUND * (1 + ROUNDS * NEW_CONN.length) },
  (_, i) => `h${i}.github.com`,
);
const CACHED = HOSTS.slice(1, 1 + PER_ROUND);
const freshHosts = (round: number, protocol: number) => {
  const from = 1 + PER_ROUND * (1 + round * NEW_CONN.length + protocol);
  return HOSTS.slice(from, from + PER_ROUND);
};

/**
 * A CONNECT splicer mapping the bench host names to the origin on loopback
 * (startTestProxy's role, with TCP_NODELAY so that it does not add
 * delayed-ACK stalls of its own to the upstream leg).
 */
function startRouter(originPort: number): { url: string; close(): Promise<void> } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const pump = async (from: Deno.Conn, to: Deno.Conn) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (let n = await from.read(buf); n !== null; n = await from.read(buf)) {
        for (let off = 0; off < n;) off += await to.write(buf.subarray(off, n));
      }
      await to.closeWrite();
    } catch {
      // the other side went away
    }
  };
  const accept = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      (async () => {
        const head = new Uint8Array(4096);
        const n = await conn.read(head);
        const host = dec.decode(head.subarray(0, n ?? 0)).split(" ")[1]?.split(":")[0] ?? "";
        if (!HOSTS.includes(host)) return conn.close();
        const up = await Deno.connect({ hostname: "127.0.0.1", port: originPort });
        conns.add(up);
        up.setNoDelay(true);
        conn.setNoDelay(true);
        await conn.write(new TextEncoder().encode("HTTP/1.1 200 Connection established\r\n\r\n"));
        await Promise.all([pump(conn, up), pump(up, conn)]);
        conn.close();
        up.close();
      })().catch(() => {}).finally(() => conns.delete(conn));
    }
  })();
  return {
    url: `http://127.0.0.1:${listener.addr.port}`,
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch {
          // already closed
        }
      }
      await accept;
    },
  };
}

/** The origin, in its own process as a real one would be (bench/origin.ts). */
async function startOrigin(
  leaf: { cert: string; key: string },
  port: number,
  hostname: string,
): Promise<{ port: number; close(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-bench-origin-" });
  await Deno.writeTextFile(join(dir, "leaf.pem"), leaf.cert);
  await Deno.writeTextFile(join(dir, "leaf.key"), leaf.key);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      fileURLToPath(new URL("./origin.ts", import.meta.url)),
      join(dir, "leaf.pem"),
      join(dir, "leaf.key"),
      String(port),
      hostname,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const first = (await reader.read()).value ?? "";
  const m = /ready (\d+)/.exec(first);
  if (!m) {
    child.kill();
    throw new Error(`the bench origin did not start on port ${port}`);
  }
  return {
    port: Number(m[1]),
    async close() {
      child.kill("SIGTERM");
      await child.status;
      await reader.cancel().catch(() => {});
      await Deno.remove(dir, { recursive: true });
    },
  };
}

interface Target {
  name: string;
  /** curl arguments reaching the origin through this path. */
  args: string[];
  /** CPU time the proxy has used so far, µs (for direct: this process's, the baseline). */
  cpu?: () => number;
  /**
   * The proxy runs in this process: its CPU is this process's minus what
   * the same run costs it with no proxy (direct: spawning and waiting for
   * curl, reading its output).
   */
  inBench?: boolean;
  close(): Promise<void>;
}

async function curl(args: string[]): Promise<string> {
  const out = await new Deno.Command("curl", {
    args: ["-s", ...args],
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  if (!out.success) throw new Error(`curl ${args.join(" ")}: ${dec.decode(out.stderr)}`);
  return dec.decode(out.stdout);
}

async function waitForPort(port: number, ms = 15000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`Nothing listens on 127.0.0.1:${port}`);
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const p = l.addr.port;
  l.close();
  return p;
}

async function has(cmd: string): Promise<boolean> {
  try {
    return (await new Deno.Command("sh", { args: ["-c", `command -v ${cmd}`], stdout: "null" })
      .output()).success;
  } catch {
    return false;
  }
}

/** Sequential requests over one kept-alive connection: requests per second. */
async function reqPerSec(t: Target, http: string, n = N): Promise<number> {
  const cfg = await Deno.makeTempFile();
  await Deno.writeTextFile(
    cfg,
    Array.from({ length: n }, () => `url = "https://h0.github.com/small"\noutput = "/dev/null"\n`)
      .join(""),
  );
  const start = performance.now();
  await curl([...t.args, http, "-K", cfg]);
  const s = (performance.now() - start) / 1000;
  await Deno.remove(cfg);
  return n / s;
}

async function mbPerSec(t: Target, http: string): Promise<number> {
  const out = await curl([
    ...t.args,
    http,
    "-o",
    "/dev/null",
    "-w",
    "%{time_total} %{size_download}",
    "https://h0.github.com/big",
  ]);
  const [seconds, size] = out.split(" ").map(Number);
  if (size !== 16 * 1024 * 1024) throw new Error(`${t.name}: 16 MiB download got ${size} bytes`);
  return 16 / seconds;
}

/** Median time to a response on a new connection (TCP + CONNECT + TLS + request), ms. */
async function newConnMs(t: Target, hosts: string[], http: string): Promise<number> {
  const times: number[] = [];
  for (const h of hosts) {
    const out = await curl([
      ...t.args,
      http,
      "-o",
      "/dev/null",
      "-w",
      "%{time_total}",
      `https://${h}/small`,
    ]);
    times.push(Number(out) * 1000);
  }
  return median(times);
}

async function forgekitTarget(routerUrl: string | undefined, testCa: string): Promise<Target> {
  // The firewall's own proxy and listener: CONNECT policy, SNI check, bump, access log.
  const front = await startBumpFront({
    allowUrls: [],
    upstreamCaCerts: [testCa],
    upstreamProxy: routerUrl,
    logToFile: true,
  });
  return {
    name: "forgekit --ssl-bump",
    cpu: ownCpu,
    inBench: true,
    args: ["--proxy", front.proxyUrl, "--cacert", front.caCertPath],
    close: () => front.close(),
  };
}

async function squidTarget(testCaPath: string): Promise<Target> {
  const dir = await Deno.makeTempDir({ prefix: "squid-bench-" });
  await Deno.chmod(dir, 0o777);
  const run = async (cmd: string, args: string[]) => {
    const o = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
    if (!o.success) throw new Error(`${cmd}: ${dec.decode(o.stderr)}`);
  };
  await run("openssl", [
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    join(dir, "ca.key"),
    "-out",
    join(dir, "ca.pem"),
    "-days",
    "1",
    "-subj",
    "/CN=squid bench CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign",
  ]);
  await run("/usr/lib/squid/security_file_certgen", [
    "-c",
    "-s",
    join(dir, "ssl_db"),
    "-M",
    "16MB",
  ]);
  await run("chown", ["-R", "proxy:proxy", dir]);
  await Deno.writeTextFile(join(dir, "hosts"), HOSTS.map((h) => `${ORIGIN_ADDR} ${h}\n`).join(""));
  const port = freePort();
  await Deno.writeTextFile(
    join(dir, "squid.conf"),
    `http_port 127.0.0.1:${port} ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB cert=${
      join(dir, "ca.pem")
    } key=${join(dir, "ca.key")}
sslcrtd_program /usr/lib/squid/security_file_certgen -s ${join(dir, "ssl_db")} -M 16MB
ssl_bump bump all
tls_outgoing_options cafile=${testCaPath}
hosts_file ${join(dir, "hosts")}
dns_nameservers 127.0.0.1
http_access allow all
cache deny all
access_log stdio:${join(dir, "access.log")} squid
cache_log ${join(dir, "cache.log")}
pid_filename ${join(dir, "squid.pid")}
coredump_dir ${dir}
shutdown_lifetime 0 seconds
`,
  );
  const child = new Deno.Command("squid", {
    args: ["-N", "-f", join(dir, "squid.conf")],
    stdout: "null",
    stderr: "null",
  }).spawn();
  await waitForPort(port);
  return {
    name: "squid-openssl ssl_bump",
    cpu: () => procCpu(child.pid),
    args: ["--proxy", `http://127.0.0.1:${port}`, "--cacert", join(dir, "ca.pem")],
    async close() {
      child.kill("SIGTERM");
      await child.status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function mitmTarget(routerUrl: string | undefined, testCaPath: string): Promise<Target> {
  const dir = await Deno.makeTempDir({ prefix: "mitm-bench-" });
  const port = freePort();
  const child = new Deno.Command("mitmdump", {
    args: [
      "-q",
      "--listen-host",
      "127.0.0.1",
      "-p",
      String(port),
      ...(routerUrl ? ["--mode", `upstream:${routerUrl}`] : []),
      "--set",
      `confdir=${dir}`,
      "--set",
      `ssl_verify_upstream_trusted_ca=${testCaPath}`,
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  await waitForPort(port, 30000);
  return {
    name: "mitmproxy (mitmdump)",
    cpu: () => procCpu(child.pid),
    args: ["--proxy", `http://127.0.0.1:${port}`, "--cacert", join(dir, "mitmproxy-ca-cert.pem")],
    async close() {
      child.kill("SIGTERM");
      await child.status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/**
 * Runs the bump-mode benchmark and returns printable lines.
 *
 * @example
 * ```ts
 * for (const line of await benchBump()) console.log(line);
 * ```
 */
export async function benchBump(): Promise<string[]> {
  if (Deno.env.get(INNER) !== "1") {
    const lines = await inPrivateHosts();
    if (lines) return lines;
  }
  return await measure(Deno.env.get(INNER) === "1");
}

const INNER = "FORGEKIT_BUMP_BENCH_INNER";

/**
 * Runs the measurement in private network and mount namespaces (own loopback,
 * own port 443) whose /etc/hosts maps the bench names to ORIGIN_ADDR, so every proxy dials the origin directly, as in
 * real use. Returns null when that is impossible (not root, no unshare).
 */
async function inPrivateHosts(): Promise<string[] | null> {
  const hosts = await Deno.makeTempFile({ prefix: "forgekit-bench-hosts-" });
  try {
    await Deno.writeTextFile(
      hosts,
      `127.0.0.1 localhost\n${ORIGIN_ADDR} ${HOSTS.join(" ")}\n::1 localhost\n`,
    );
    const env: Record<string, string> = { [INNER]: "1" };
    for (const v of ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"]) {
      env[v] = "";
    }
    const out = await new Deno.Command("unshare", {
      args: [
        "-m",
        "-n",
        "sh",
        "-c",
        `ip link set lo up && ip addr add ${ORIGIN_ADDR}/32 dev lo && ` +
        'mount --bind "$0" /etc/hosts && exec "$1" run -A "$2" "$3"',
        hosts,
        Deno.execPath(),
        V8_FLAGS_ARG, // forgekit runs in this process: with its own flags
        fileURLToPath(import.meta.url),
      ],
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) return null;
    return dec.decode(out.stdout).trimEnd().split("\n");
  } catch {
    return null;
  } finally {
    await Deno.remove(hosts);
  }
}

async function measure(directHosts: boolean): Promise<string[]> {
  const ca = await makeTestCa("forgekit bench CA");
  const leaf = await ca.issue(HOSTS);
  const originAddr = directHosts ? ORIGIN_ADDR : "127.0.0.1";
  const origin = await startOrigin(leaf, directHosts ? 443 : 0, originAddr);
  const router = directHosts ? null : startRouter(origin.port);
  const direct: Target = {
    name: "direct",
    args: [
      "--cacert",
      ca.certPath,
      ...HOSTS.flatMap((h) => ["--connect-to", `${h}:443:${originAddr}:${origin.port}`]),
    ],
    cpu: ownCpu,
    close: () => Promise.resolve(),
  };
  const targets: Target[] = [direct, await forgekitTarget(router?.url, ca.cert)];
  const skipped: string[] = [];
  if (!directHosts) {
    skipped.push("squid-openssl (needs the private namespace: run as root with unshare)");
  } else if (await has("squid") && await has("/usr/lib/squid/security_file_certgen")) {
    targets.push(await squidTarget(ca.certPath));
  } else skipped.push("squid-openssl (not installed: apt-get install -y squid-openssl)");
  if (await has("mitmdump")) targets.push(await mitmTarget(router?.url, ca.certPath));
  else skipped.push("mitmproxy (not installed: apt-get install -y mitmproxy)");

  // Rounds, the targets' order rotating in each, and the median per figure:
  // this machine's speed drifts, and drift must hit every target alike.
  const samples = targets.map(() => ({
    h1: [] as number[],
    h2: [] as number[],
    mbs: [] as number[],
    mbs1: [] as number[],
    cpuMB1: [] as number[],
    first: [] as number[],
    again: [] as number[],
    first2: [] as number[],
    again2: [] as number[],
    cpuH1: [] as number[],
    cpuH2: [] as number[],
    cpuMB: [] as number[],
  }));
  /** Each target's first kept-alive requests (HTTP/1.1), before any warm-up. */
  const cold: number[] = [];
  /** Each target's early new connections (cached leaf, HTTP/1.1), before the rounds. */
  const coldConn: number[] = [];
  try {
    for (const t of targets) {
      // The first requests, before anything else: what a short run gets.
      cold.push(await reqPerSec(t, "--http1.1", COLD_N));
      // Then the rounds measure the steady state: forgekit's JavaScript runs
      // at about half speed until V8 has compiled its hot paths (a few
      // thousand requests), which squid (C) and direct do not need.
      await reqPerSec(t, "--http1.1", WARM_UP);
      await reqPerSec(t, "--http2", WARM_UP);
      await mbPerSec(t, "--http1.1");
      await mbPerSec(t, "--http2");
      await newConnMs(t, CACHED, "--http1.1"); // their leaves are made (then cached)
      coldConn.push(
        await newConnMs(
          t,
          Array.from({ length: COLD_CONNS }, (_, i) => CACHED[i % CACHED.length]),
          "--http1.1",
        ),
      );
    }
    for (let round = 0; round < ROUNDS; round++) {
      // Each figure is measured for every target back to back (the order
      // rotating per round), so that a round's ratios compare measurements
      // taken a second or two apart, not the better part of a minute.
      const each = async (measure: (i: number, t: Target, cpu: () => number) => Promise<void>) => {
        for (let k = 0; k < targets.length; k++) {
          const i = (round + k) % targets.length;
          await measure(i, targets[i], targets[i].cpu ?? (() => 0));
        }
      };
      // Kept-alive runs are short (a tenth of a second or so), and this
      // machine's speed moves on that scale too: each target makes REPS
      // runs, interleaved with the others', and its figure is their total.
      const keptAlive = async (http: string, rate: "h1" | "h2", used: "cpuH1" | "cpuH2") => {
        const seconds = targets.map(() => 0);
        const cpuUsed = targets.map(() => 0);
        for (let rep = 0; rep < REPS; rep++) {
          await each(async (i, t, cpu) => {
            const c0 = cpu();
            seconds[i] += N / await reqPerSec(t, http);
            cpuUsed[i] += cpu() - c0;
          });
        }
        targets.forEach((_, i) => {
          samples[i][rate].push((REPS * N) / seconds[i]);
          samples[i][used].push(cpuUsed[i] / (REPS * N));
        });
      };
      await keptAlive("--http1.1", "h1", "cpuH1");
      await keptAlive("--http2", "h2", "cpuH2");
      await each(async (i, t, cpu) => {
        const c0 = cpu();
        samples[i].mbs.push(await mbPerSec(t, "--http2"));
        samples[i].cpuMB.push((cpu() - c0) / 16.777216);
      });
      await each(async (i, t, cpu) => {
        const c0 = cpu();
        samples[i].mbs1.push(await mbPerSec(t, "--http1.1"));
        samples[i].cpuMB1.push((cpu() - c0) / 16.777216);
      });
      for (const [p, http] of NEW_CONN.entries()) {
        const [first, again] = p === 0
          ? ["first", "again"] as const
          : ["first2", "again2"] as const;
        await each(async (i, t) =>
          void samples[i][first].push(await newConnMs(t, freshHosts(round, p), http))
        );
        await each(async (i, t) => void samples[i][again].push(await newConnMs(t, CACHED, http)));
      }
    }
  } finally {
    for (const t of targets) await t.close().catch(() => {});
    await router?.close();
    await origin.close();
  }
  // This process's own cost of a run, taken off forgekit's (it runs in here).
  const base = {
    h1: median(samples[0].cpuH1),
    h2: median(samples[0].cpuH2),
    mb1: median(samples[0].cpuMB1),
    mb: median(samples[0].cpuMB),
  };
  const rows = targets.map((t, i) => {
    const off = t.inBench ? base : { h1: 0, h2: 0, mb1: 0, mb: 0 };
    const cpu = (xs: number[], minus: number) => Math.max(0, median(xs) - minus).toFixed(0);
    return {
      name: t.name,
      h1: median(samples[i].h1),
      h2: median(samples[i].h2),
      mbs: median(samples[i].mbs),
      mbs1: median(samples[i].mbs1),
      first: median(samples[i].first),
      again: median(samples[i].again),
      first2: median(samples[i].first2),
      again2: median(samples[i].again2),
      cpu: i === 0
        ? `bench process CPU ${cpu(samples[i].cpuH1, 0)}/${
          cpu(samples[i].cpuH2, 0)
        } µs/req h1/h2, ${cpu(samples[i].cpuMB1, 0)}/${
          cpu(samples[i].cpuMB, 0)
        } µs/MB h1/h2 (taken off forgekit's)`
        : t.cpu
        ? `CPU ${cpu(samples[i].cpuH1, off.h1)} µs/req h1, ${
          cpu(samples[i].cpuH2, off.h2)
        } µs/req h2, ${cpu(samples[i].cpuMB1, off.mb1)}/${
          cpu(samples[i].cpuMB, off.mb)
        } µs/MB h1/h2`
        : "",
    };
  });
  const d = rows[0];
  const f = (n: number) => n.toFixed(n >= 100 ? 0 : 1);
  const lines = [
    `ssl-bump (curl client, origin on loopback ${
      directHosts ? "dialled directly via a private /etc/hosts" : "via a CONNECT router"
    }; ${REPS} interleaved runs of ${N} sequential requests per kept-alive figure and round; median of ${ROUNDS} rounds; ratio = value / direct)`,
  ];
  for (const r of rows) {
    lines.push(
      `  ${r.name.padEnd(24)} h1 ${f(r.h1)} req/s (${(r.h1 / d.h1).toFixed(2)}x) | h2 ${
        f(r.h2)
      } req/s (${(r.h2 / d.h2).toFixed(2)}x) | 16 MiB h1 ${f(r.mbs1)} MB/s (${
        (r.mbs1 / d.mbs1).toFixed(2)
      }x), h2 ${f(r.mbs)} MB/s (${(r.mbs / d.mbs).toFixed(2)}x) | new conn h1 +${
        f(r.first - d.first)
      } ms first/+${f(r.again - d.again)} ms cached leaf (${f(r.first)}/${
        f(r.again)
      } ms), h2 offered +${f(r.first2 - d.first2)}/+${f(r.again2 - d.again2)} ms${
        r.cpu ? ` | ${r.cpu}` : ""
      }`,
    );
  }
  lines.push(
    `  cold start (each target's first ${COLD_N} kept-alive HTTP/1.1 requests, before the rounds): ${
      targets.map((t, i) => `${t.name.split(" ")[0]} ${f(cold[i])} req/s`).join(", ")
    }`,
    `  cold new connections (${COLD_CONNS} per target to hosts whose leaf is cached, right after its first dozen connections, HTTP/1.1, median): ${
      targets.map((t, i) => `${t.name.split(" ")[0]} ${f(coldConn[i])} ms`).join(", ")
    }`,
  );
  const fk = targets.findIndex((t) => t.inBench);
  const sq = targets.findIndex((t) => t.name.startsWith("squid"));
  if (fk !== -1 && sq !== -1) lines.push(...versusSquid(samples[fk], samples[sq], samples[0]));
  for (const s of skipped) lines.push(`  skipped: ${s}`);
  return lines;
}

/** One target's samples, one per round for each figure. */
interface Samples {
  h1: number[];
  h2: number[];
  mbs: number[];
  mbs1: number[];
  first: number[];
  again: number[];
  first2: number[];
  again2: number[];
  cpuH1: number[];
  cpuH2: number[];
}

/**
 * forgekit against squid round by round: each round measures the two one
 * after the other, so a ratio taken within a round is spared the drift of
 * this machine's speed between rounds (which moves either one 2x and more).
 * Printed: the median of the rounds' ratios, then the lowest and highest.
 */
function versusSquid(fk: Samples, sq: Samples, direct: Samples): string[] {
  const ratio = (a: number[], b: number[]) => a.map((x, i) => x / b[i]);
  // A new connection's added latency, forgekit's minus squid's: direct's share cancels out.
  const minus = (a: number[], b: number[]) => a.map((x, i) => x - b[i]);
  // forgekit runs in this process: its CPU less this process's own on the direct run.
  const own = (xs: number[], base: number[]) => xs.map((x, i) => Math.max(0, x - base[i]));
  const n = fk.h1.length;
  return [
    `  forgekit / squid-openssl, per round (median (lowest–highest) of ${n}; above 1 = forgekit ahead, except CPU and ms):`,
    `    h1 req/s ${spread(ratio(fk.h1, sq.h1))}x | h2 req/s ${spread(ratio(fk.h2, sq.h2))}x` +
    ` | 16 MiB h1 ${spread(ratio(fk.mbs1, sq.mbs1))}x, h2 ${spread(ratio(fk.mbs, sq.mbs))}x`,
    `    new conn added ms, forgekit minus squid: HTTP/1.1 leaf signed ${
      spread(minus(fk.first, sq.first), 1)
    }, cached leaf ${spread(minus(fk.again, sq.again), 1)}; h2 offered leaf signed ${
      spread(minus(fk.first2, sq.first2), 1)
    }, cached leaf ${spread(minus(fk.again2, sq.again2), 1)}`,
    `    CPU per request h1 ${spread(ratio(own(fk.cpuH1, direct.cpuH1), sq.cpuH1))}x, h2 ${
      spread(ratio(own(fk.cpuH2, direct.cpuH2), sq.cpuH2))
    }x`,
  ];
}

if (import.meta.main) {
  for (const line of await benchBump()) console.log(line);
}
