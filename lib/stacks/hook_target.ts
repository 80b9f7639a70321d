/**
 * Where a webhook may be sent. As on GitHub, a hook reaches only addresses on
 * the public internet: a user who may create a hook must not make the server
 * post to its own loopback, the cloud metadata service (169.254.169.254) or
 * the operator's private network. The URL is checked when the hook is saved,
 * and the addresses its name resolves to when each delivery is sent. A plain
 * HTTP delivery then connects to the address that was checked, so a name that
 * resolves differently a moment later (DNS rebinding) reaches nothing else;
 * an HTTPS one is protected from that by the receiver's certificate.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";

/**
 * Why an IP address is not on the public internet ("loopback", "private",
 * …), or null when it is.
 *
 * @example
 * ```ts
 * addressProblem("169.254.169.254"); // "link-local"
 * addressProblem("::ffff:10.0.0.1"); // "private"
 * addressProblem("93.184.216.34"); // null
 * ```
 */
export function addressProblem(address: string): string | null {
  const ip = address.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  switch (isIP(ip)) {
    case 4:
      return v4Problem(ip.split(".").map(Number));
    case 6:
      return v6Problem(v6Groups(ip));
    default:
      return "not an IP address";
  }
}

/** IPv4 ranges that are not public (RFC 6890 and its updates), most specific first where they nest. */
const V4_RANGES: [number[], number, string][] = [
  [[0, 0, 0, 0], 8, "unspecified"],
  [[10, 0, 0, 0], 8, "private"],
  [[100, 64, 0, 0], 10, "shared (carrier-grade NAT)"],
  [[127, 0, 0, 0], 8, "loopback"],
  [[169, 254, 0, 0], 16, "link-local"],
  [[172, 16, 0, 0], 12, "private"],
  [[192, 0, 0, 0], 24, "reserved"],
  [[192, 0, 2, 0], 24, "documentation"],
  [[192, 88, 99, 0], 24, "reserved"],
  [[192, 168, 0, 0], 16, "private"],
  [[198, 18, 0, 0], 15, "benchmarking"],
  [[198, 51, 100, 0], 24, "documentation"],
  [[203, 0, 113, 0], 24, "documentation"],
  [[224, 0, 0, 0], 4, "multicast"],
  [[240, 0, 0, 0], 4, "reserved"],
];

function v4Problem(octets: number[]): string | null {
  const n = ((octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]) >>> 0;
  for (const [net, bits, why] of V4_RANGES) {
    const base = ((net[0] << 24) | (net[1] << 16) | (net[2] << 8) | net[3]) >>> 0;
    const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
    if (((n & mask) >>> 0) === base) return why;
  }
  return null;
}

/** The eight 16-bit groups of an IPv6 address (which `isIP` has accepted). */
function v6Groups(ip: string): number[] {
  let text = ip.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const o = dotted[1].split(".").map(Number);
    text = text.slice(0, dotted.index) +
      `${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const [head, tail] = text.split("::");
  const part = (s: string | undefined) => s ? s.split(":").map((g) => parseInt(g, 16)) : [];
  const h = part(head);
  const t = part(tail);
  return tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill(0), ...t];
}

function v6Problem(g: number[]): string | null {
  const embeddedV4 = (hi: number, lo: number) => [hi >> 8, hi & 255, lo >> 8, lo & 255];
  const zeros = (n: number) => g.slice(0, n).every((x) => x === 0);
  if (zeros(8)) return "unspecified";
  if (zeros(7) && g[7] === 1) return "loopback";
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) reach the IPv4 address inside.
  if (zeros(5) && g[5] === 0xffff) return v4Problem(embeddedV4(g[6], g[7]));
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) {
    return v4Problem(embeddedV4(g[6], g[7]));
  }
  // 6to4 (2002::/16) carries its IPv4 address in groups 1 and 2.
  if (g[0] === 0x2002) return v4Problem(embeddedV4(g[1], g[2]));
  if ((g[0] & 0xfe00) === 0xfc00) return "unique local (private)";
  if ((g[0] & 0xffc0) === 0xfe80) return "link-local";
  if ((g[0] & 0xffc0) === 0xfec0) return "site-local (private)";
  if ((g[0] & 0xff00) === 0xff00) return "multicast";
  if (g[0] === 0x2001 && g[1] === 0x0db8) return "documentation";
  if (g[0] === 0x3fff && (g[1] & 0xf000) === 0) return "documentation";
  if (g[0] === 0x2001 && g[1] === 0) return "Teredo tunnel";
  if (g[0] === 0x2001 && g[1] === 2 && g[2] === 0) return "benchmarking";
  if (g[0] === 0x2001 && (g[1] & 0xfff0) === 0x10) return "reserved";
  // Global unicast is 2000::/3; everything else is reserved or special.
  if ((g[0] & 0xe000) !== 0x2000) return "reserved";
  return null;
}

/** The URL's host without IPv6 brackets and a final dot, lower-case. */
function bareHost(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, "").replace(/\.+$/, "").toLowerCase();
}

/**
 * Why a hook URL can never reach the public internet, judged from the URL
 * alone (an IP address, or `localhost`), or null. Names are resolved only
 * when a delivery is sent ({@linkcode resolvePublicTarget}).
 *
 * @example
 * ```ts
 * hookUrlProblem(new URL("http://127.0.0.1:8080/hook")); // "127.0.0.1 is a loopback address"
 * hookUrlProblem(new URL("https://ci.example/hook")); // null
 * ```
 */
export function hookUrlProblem(url: URL): string | null {
  const host = bareHost(url);
  if (host === "localhost" || host.endsWith(".localhost")) {
    return `${host} is a loopback address`;
  }
  if (isIP(host) === 0) return null;
  const why = addressProblem(host);
  return why === null ? null : `${host} is a ${why} address`;
}

/** A resolver of host names: every address, as `node:dns` `lookup(name, { all: true })`. */
export type Lookup = (hostname: string) => Promise<{ address: string }[]>;

const systemLookup: Lookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/** Thrown when a hook's URL does not lead to the public internet. */
export class HookTargetError extends Error {
  override name = "HookTargetError";
}

/**
 * The public address (and port) a delivery to `url` connects to. Every
 * address the name resolves to must be public: a name that also resolves to
 * a private one is refused, not sent to its public half.
 *
 * @example
 * ```ts
 * const { hostname, port } = await resolvePublicTarget(new URL("https://ci.example/hook"));
 * const client = Deno.createHttpClient({ proxy: { transport: "tcp", hostname, port } });
 * ```
 */
export async function resolvePublicTarget(
  url: URL,
  options: { lookup?: Lookup; signal?: AbortSignal } = {},
): Promise<{ hostname: string; port: number }> {
  const port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
  const literal = hookUrlProblem(url);
  if (literal !== null) throw new HookTargetError(`Hook URL ${url.host} is refused: ${literal}`);
  const host = bareHost(url);
  if (isIP(host) !== 0) return { hostname: host, port };
  const signal = options.signal;
  signal?.throwIfAborted();
  const addresses = await new Promise<{ address: string }[]>((resolve, reject) => {
    const onAbort = () => reject(signal!.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    (options.lookup ?? systemLookup)(host).then(resolve, reject)
      .finally(() => signal?.removeEventListener("abort", onAbort));
  });
  if (addresses.length === 0) {
    throw new HookTargetError(`Hook URL ${url.host} is refused: ${host} has no address`);
  }
  for (const { address } of addresses) {
    const why = addressProblem(address);
    if (why !== null) {
      throw new HookTargetError(
        `Hook URL ${url.host} is refused: ${host} resolves to ${address}, a ${why} address`,
      );
    }
  }
  return { hostname: addresses[0].address, port };
}
