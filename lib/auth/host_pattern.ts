/**
 * Host names and host patterns of auth.json: validation, normalisation and
 * matching. Pure functions.
 */

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

/**
 * Whether host text is an IPv6 literal: in brackets (`[::1]`, `[::1]:8443`),
 * or bare with two or more colons (`::1`, `fe80::`), which is never a name
 * with a port.
 */
function isIpv6Literal(text: string): boolean {
  return text.startsWith("[") || text.indexOf(":") !== text.lastIndexOf(":");
}

/** The canonical form of an IPv6 address (`2001:db8:0:0:0:0:0:1` is `2001:db8::1`), or null. */
function canonicalIpv6(address: string): string | null {
  try {
    return new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    return null;
  }
}

/**
 * Normalises a host for comparison: lower case, ASCII (punycode) form of
 * internationalised names, no trailing dot, no port, and IPv6 addresses in
 * their canonical form without brackets. Returns null when the text is not
 * a host name or address.
 *
 * @example
 * ```ts
 * normalizeHost("API.GitHub.com.") // "api.github.com"
 * normalizeHost("bücher.example")  // "xn--bcher-kva.example"
 * normalizeHost("[::1]:8080")      // "::1"
 * normalizeHost("fe80::")          // "fe80::"
 * ```
 */
export function normalizeHost(host: string): string | null {
  let h = host.trim();
  if (h === "" || /[\s/?#@\\]/.test(h)) return null;
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0 || !/^(:\d*)?$/.test(h.slice(end + 1))) return null;
    return canonicalIpv6(h.slice(1, end));
  }
  if (isIpv6Literal(h)) return canonicalIpv6(h);
  h = h.replace(/:\d*$/, "");
  if (h.endsWith(".")) h = h.slice(0, -1);
  try {
    const ascii = new URL(`http://${h}/`).hostname;
    return ascii.endsWith(".") ? ascii.slice(0, -1) : ascii;
  } catch {
    return null;
  }
}

/**
 * Why a host pattern of auth.json is not supported, or null when it is.
 * Supported: an exact host (`api.github.com`), an IP address (`127.0.0.1`,
 * `::1`, `[::1]`), or `*.` followed by a host name of at least two labels
 * (`*.example.com`).
 */
export function hostPatternProblem(pattern: string): string | null {
  if (pattern === "") return "is empty";
  if (/\s/.test(pattern)) return "contains whitespace";
  if (pattern.includes("://")) return "has a scheme";
  if (pattern.includes("/")) return "has a path";
  const wildcard = pattern.startsWith("*.");
  const rest = wildcard ? pattern.slice(2) : pattern;
  if (isIpv6Literal(rest)) {
    if (wildcard) return "is not a supported pattern";
    if (/\]:\d*$/.test(rest)) return "has a port";
    return normalizeHost(rest) === null ? "is not a valid IPv6 address" : null;
  }
  if (rest.includes("*") || rest.includes("?") || /[\[\]{}!]/.test(rest)) {
    return "is not a supported pattern";
  }
  if (/:\d*$/.test(rest)) return "has a port";
  const host = normalizeHost(rest);
  if (host === null) return "is not a valid host name";
  if (IPV4.test(host)) return wildcard ? "is not a supported pattern" : null;
  const labels = host.split(".");
  if (!labels.every((l) => LABEL.test(l))) return "is not a valid host name";
  if (wildcard && labels.length < 2) return "matches a whole top-level domain";
  return null;
}

/** Normalises a valid host pattern (lower case, punycode, no trailing dot). */
export function normalizePattern(pattern: string): string {
  if (pattern.startsWith("*.")) return `*.${normalizeHost(pattern.slice(2))}`;
  return normalizeHost(pattern) ?? pattern;
}

/**
 * Whether a normalised host matches a normalised pattern. `*.example.com`
 * matches `a.example.com` and `a.b.example.com`, never `example.com` or
 * `badexample.com`.
 */
export function matchHost(pattern: string, host: string): boolean {
  if (pattern.startsWith("*.")) {
    return host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1;
  }
  return pattern === host;
}

/** Whether a host matches any of the patterns. */
export function matchAnyHost(patterns: readonly string[], host: string): boolean {
  return patterns.some((p) => matchHost(p, host));
}
