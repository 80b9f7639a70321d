/** Validating `--allow-domains` / `--block-domains` entries. Pure. */
import { usageError } from "../cli/mod.ts";

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

/** Whether a host is an IP literal (IPv4, or IPv6 with or without brackets). */
export function isIpLiteral(host: string): boolean {
  return IPV4.test(host) || host.replace(/^\[|\]$/g, "").includes(":");
}

/** Normalises a host for comparison: lower case, no trailing dot, no brackets. */
export function normalizeDomain(host: string): string {
  return host.trim().toLowerCase().replace(/\.$/, "").replace(/^\[|\]$/g, "");
}

/**
 * Why a domain entry is invalid, or null. Valid: `example.com` (the domain
 * and its subdomains), `*.example.com` (subdomains only), or an IP literal.
 */
export function domainProblem(entry: string): string | null {
  if (entry.trim() === "") return "empty entry";
  const d = normalizeDomain(entry);
  if (isIpLiteral(d)) return null;
  if ((d.match(/\*/g) ?? []).length > 1) return "more than one wildcard";
  if (d === "*" || d === "*.*" || /^\*\.[^.]*$/.test(d)) {
    return "matches everything or a whole top-level domain";
  }
  if (d.includes("*") && !d.startsWith("*.")) return 'a wildcard is only allowed as a leading "*."';
  const host = d.startsWith("*.") ? d.slice(2) : d;
  if (host.includes("..") || host.startsWith(".")) return "double dots or an empty label";
  if (!/^[a-z0-9.-]+$/.test(host)) return "characters that are not valid in a host name";
  if (!host.split(".").every((l) => LABEL.test(l))) {
    return "a label that is not valid in a host name";
  }
  if (!host.includes(".") && !d.startsWith("*.")) return null; // a single-label host such as "localhost"
  return null;
}

/**
 * Validates a domain list option and returns its normalised entries.
 *
 * @example
 * ```ts
 * validateDomains(["GitHub.com.", "*.npmjs.org"], "--allow-domains") // ["github.com", "*.npmjs.org"]
 * ```
 */
export function validateDomains(entries: string[], option: string): string[] {
  return entries.map((e) => {
    const problem = domainProblem(e);
    if (problem) {
      throw usageError(
        `${option}: ${JSON.stringify(e)} is not a valid domain: ${problem}`,
        "use example.com (with subdomains) or *.example.com (subdomains only)",
      );
    }
    return normalizeDomain(e);
  });
}

/** Splits a comma-separated list, or a file's lines (with `#` comments). */
export function splitDomainText(text: string): string[] {
  return text.split("\n").map((l) => l.replace(/#.*$/, "")).flatMap((l) => l.split(",")).map((s) =>
    s.trim()
  )
    .filter((s) => s !== "");
}
