/** Validating `--allow-domains` / `--block-domains` entries. Pure. */
import { usageError } from "../cli/mod.ts";

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
/** An IPv4 address as four decimal numbers, without leading zeros. */
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
/** A last label that is a number, decimal or hex (how the WHATWG URL host parser spots IPv4). */
const NUMERIC_LABEL = /(^|\.)(\d+|0x[0-9a-f]*)\.?$/i;

/** Whether a host is an IP literal (IPv4 as a.b.c.d, or IPv6 with or without brackets). */
export function isIpLiteral(host: string): boolean {
  return IPV4.test(host) || isIpv6(host);
}

/**
 * Whether the resolver reads a host as an IPv4 address written otherwise
 * than a.b.c.d (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`): a host
 * whose last label is a number.
 *
 * @example
 * ```ts
 * isOtherIpv4Form("2130706433"); // true: 127.0.0.1
 * isOtherIpv4Form("127.0.0.1"); // false: an IP literal
 * ```
 */
export function isOtherIpv4Form(host: string): boolean {
  return !isIpLiteral(host) && NUMERIC_LABEL.test(host);
}

function isIpv6(host: string): boolean {
  return host.replace(/^\[|\]$/g, "").includes(":");
}

/** Whether a host (without brackets) is a valid IPv6 address, as the URL parser reads one. */
function isIpv6Address(host: string): boolean {
  if (!/^[0-9a-f:.]+$/.test(host)) return false;
  try {
    new URL(`http://[${host}]/`);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether a normalised host is something to connect to: a name of letters,
 * digits, hyphens, underscores and dots, or an IP address. Anything else
 * (`/`, `#`, `?`, `\`, `@`, `*`, spaces, control characters) could be read
 * as another host by whatever takes the name next, such as an upstream
 * proxy that parses its CONNECT target as a URL.
 *
 * @example
 * ```ts
 * isDialable("api.github.com"); // true
 * isDialable("evil.example/.github.com"); // false
 * ```
 */
export function isDialable(host: string): boolean {
  return isIpv6(host) ? /^[0-9a-f:.]+$/.test(host) : /^[a-z0-9_.-]+$/.test(host);
}

/**
 * Normalises a host for comparison: lower case, no trailing dot, no
 * brackets, and an IPv6 address in its one canonical form (`0:0::1` is
 * `::1`), so that any spelling of a listed address matches it.
 */
export function normalizeDomain(host: string): string {
  const h = host.trim().toLowerCase().replace(/\.$/, "").replace(/^\[|\]$/g, "");
  if (!h.includes(":") || !/^[0-9a-f:.]+$/.test(h)) return h;
  try {
    return new URL(`http://[${h}]/`).hostname.slice(1, -1);
  } catch {
    return h; // not an address: refused elsewhere
  }
}

/**
 * Why a domain entry is invalid, or null. Valid: `example.com` (the domain
 * and its subdomains), `*.example.com` (subdomains only), or an IP literal.
 */
export function domainProblem(entry: string): string | null {
  if (entry.trim() === "") return "empty entry";
  const d = normalizeDomain(entry);
  if (isIpv6(d) && !isIpv6Address(d)) {
    // `github.com:443` is no host name; `1::2::3` is no address.
    return /^[0-9a-f:.]+$/.test(d)
      ? "an IPv6 address that is not valid"
      : "characters that are not valid in a host name";
  }
  if (isIpLiteral(d)) return null;
  if (isOtherIpv4Form(d)) return "an IP address not written as four decimal numbers (a.b.c.d)";
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
  // A single label is a whole top-level domain (`com` covers every .com name);
  // `localhost` names this machine only.
  if (!host.includes(".") && host !== "localhost") {
    return "matches everything or a whole top-level domain";
  }
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

/**
 * Validates the entries of a domain option (`what` names it, or the file
 * they came from). A URL or a host with a port, which people paste into
 * these lists, is named as such, with the entry to write instead.
 */
export function checkDomains(entries: string[], what: string): string[] {
  for (const entry of entries) {
    const e = entry.trim();
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(e)) {
      let host = "";
      let path = "";
      try {
        const url = new URL(e);
        [host, path] = [normalizeDomain(url.hostname), url.pathname];
      } catch { /* no host to suggest */ }
      const write = host !== "" && domainProblem(host) === null
        ? `write the host name only: ${host}`
        : "write a host name only, e.g. github.com";
      throw usageError(
        `${what}: ${JSON.stringify(entry)} is a URL, not a domain`,
        path.length > 1 ? `${write}; paths are filtered with --ssl-bump --allow-urls` : write,
      );
    }
    const port = /^([^:\[\]]+):(\d+)$/.exec(e);
    if (port && domainProblem(port[1]) === null) {
      throw usageError(
        `${what}: ${JSON.stringify(entry)} has a port`,
        `write ${port[1]}: every allowed domain is reached on ports 80 and 443 only`,
      );
    }
  }
  return validateDomains(entries, what);
}
