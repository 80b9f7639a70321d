/** The domain-level filter: which destinations the proxy lets through. Pure. */
import { isIpLiteral, normalizeDomain } from "./host_validation.ts";

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
 * allow list blocks everything; IP literals pass only when listed exactly.
 */
export function decide(policy: DomainPolicy, rawHost: string, port: number): Decision {
  const host = normalizeDomain(rawHost);
  if (!ALLOWED_PORTS.includes(port)) {
    return { allowed: false, rule: `port:${port}`, reason: "port" };
  }
  if (isIpLiteral(host)) {
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
