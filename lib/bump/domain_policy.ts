/** The domain-level filter: which destinations the proxy lets through. Pure. */
import { isIpLiteral, isOtherIpv4Form, normalizeDomain } from "./host_validation.ts";

/** The validated lists a run filters with. */
export interface DomainPolicy {
  allow: string[];
  block: string[];
}

/** A decision and the rule that made it. */
export interface Decision {
  allowed: boolean;
  /** e.g. `allow-domains:example.com`, `block-domains:x`, `no-rule`, `ip-literal`, `port`. */
  rule: string;
  /** For blocks: the `X-Proxy-Error` reason (`blocked-by-<reason>`). */
  reason?: "domain-policy" | "ip-literal" | "port";
}

/** Ports the proxy connects to. */
export const ALLOWED_PORTS = [80, 443];

/** Whether a domain entry matches a host: `a.com` covers it and subdomains, `*.a.com` only subdomains. */
export function domainMatches(entry: string, host: string): boolean {
  if (entry.startsWith("*.")) return host.endsWith(entry.slice(1));
  return host === entry || host.endsWith(`.${entry}`);
}

/**
 * Decides a destination. Block entries win over allow entries; an empty
 * allow list blocks everything; IP literals pass only when listed exactly,
 * and other spellings of an IPv4 address never.
 */
export function decide(policy: DomainPolicy, rawHost: string, port: number): Decision {
  const host = normalizeDomain(rawHost);
  if (!ALLOWED_PORTS.includes(port)) {
    return { allowed: false, rule: `port:${port}`, reason: "port" };
  }
  // An address in another spelling is never listed: allow lists hold a.b.c.d.
  if (isIpLiteral(host) || isOtherIpv4Form(host)) {
    if (policy.block.includes(host)) {
      return { allowed: false, rule: `block-domains:${host}`, reason: "domain-policy" };
    }
    return policy.allow.includes(host)
      ? { allowed: true, rule: `allow-domains:${host}` }
      : { allowed: false, rule: "ip-literal", reason: "ip-literal" };
  }
  const blocked = policy.block.find((b) => domainMatches(b, host));
  if (blocked) return { allowed: false, rule: `block-domains:${blocked}`, reason: "domain-policy" };
  const allowed = policy.allow.find((a) => domainMatches(a, host));
  if (allowed) return { allowed: true, rule: `allow-domains:${allowed}` };
  return { allowed: false, rule: "no-rule", reason: "domain-policy" };
}

/**
 * Why a name must not be connected to at an address it resolved to, or
 * null. A name (other than `localhost`) that resolves to this machine
 * (loopback, unspecified) or to a link-local address (such as a cloud
 * metadata service) would take the workload where the sandbox keeps it
 * from: whoever controls that name's DNS records decides. IP literals were
 * decided on by {@linkcode decide} already.
 *
 * @example
 * ```ts
 * addressProblem("api.github.com", "140.82.112.6"); // null
 * addressProblem("rebind.example", "127.0.0.1"); // "rebind.example resolves to 127.0.0.1, …"
 * ```
 */
export function addressProblem(rawHost: string, address: string): string | null {
  const host = normalizeDomain(rawHost);
  if (isIpLiteral(host) || host === "localhost" || host.endsWith(".localhost")) return null;
  if (!isLocalAddress(address)) return null;
  return `${host} resolves to ${address}, an address of this machine or a link-local one ` +
    "(list the address in --allow-domains and connect to it by address to allow it)";
}

/** Loopback, unspecified and link-local addresses, IPv4-mapped ones included. */
function isLocalAddress(address: string): boolean {
  const a = normalizeDomain(address).replace(/%.*$/, "");
  const mapped = /^::ffff:(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/.exec(a);
  let v4 = mapped ? mapped[1] : a;
  if (mapped?.[2] !== undefined) {
    const [hi, lo] = [parseInt(mapped[2], 16), parseInt(mapped[3], 16)];
    v4 = [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff].join(".");
  }
  if (/^\d+\.\d+\.\d+\.\d+$/.test(v4)) {
    const [x, y] = v4.split(".").map(Number);
    return x === 127 || x === 0 || (x === 169 && y === 254);
  }
  return a === "::1" || a === "::" || /^fe[89ab][0-9a-f]:/.test(a);
}

/**
 * Whether two domain entries (`a.com`: it and its subdomains, `*.a.com`:
 * subdomains only, or an IP address) share a host: exactly when one of
 * them holds the other's base name or a subdomain of it.
 */
export function domainsOverlap(a: string, b: string): boolean {
  if (isIpLiteral(a) || isIpLiteral(b)) return a === b;
  const candidates = [a, b].map((d) => d.replace(/^\*\./, "")).flatMap((h) => [h, `x.${h}`]);
  return candidates.some((h) => domainMatches(a, h) && domainMatches(b, h));
}
