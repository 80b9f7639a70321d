/**
 * Host names and host patterns of auth.json: validation, normalisation and
 * matching. Pure functions.
 */

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

/**
 * Normalises a host for comparison: lower case, ASCII (punycode) form of
 * internationalised names, no trailing dot, no port, no IPv6 brackets.
 * Returns null when the text is not a host name.
 *
 * @example
 * ```ts
 * normalizeHost("API.GitHub.com.") // "api.github.com"
 * normalizeHost("bücher.example")  // "xn--bcher-kva.example"
 * ```
 */
export function normalizeHost(host: string): string | null {
  let h = host.trim();
  if (h === "" || /[\s/?#@\\]/.test(h)) return null;
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    return end > 0 ? h.slice(1, end).toLowerCase() : null;
  }
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
 * Supported: an exact host (`api.github.com`), or `*.` followed by a host of
 * at least two labels (`*.example.com`).
 */
export function hostPatternProblem(pattern: string): string | null {
  if (pattern === "") return "is empty";
  if (/\s/.test(pattern)) return "contains whitespace";
  if (pattern.includes("://")) return "has a scheme";
  if (pattern.includes("/")) return "has a path";
  const rest = pattern.startsWith("*.") ? pattern.slice(2) : pattern;
  if (rest.includes("*") || rest.includes("?") || /[\[\]{}!]/.test(rest)) {
    return "is not a supported pattern";
  }
  if (/:\d*$/.test(rest) && !rest.includes("::")) return "has a port";
  const host = normalizeHost(rest);
  if (host === null) return "is not a valid host name";
  if (!IPV4.test(host) && !host.includes(":")) {
    const labels = host.split(".");
    if (!labels.every((l) => LABEL.test(l))) return "is not a valid host name";
    if (pattern.startsWith("*.") && labels.length < 2) return "matches a whole top-level domain";
  } else if (pattern.startsWith("*.")) {
    return "is not a supported pattern";
  }
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
