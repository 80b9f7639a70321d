/**
 * URL patterns for `--allow-urls`: validation, path normalisation and
 * matching. Pure: no I/O.
 *
 * @module
 */
import { usageError } from "../cli/mod.ts";
import { decide, domainMatches, type DomainPolicy, domainsOverlap } from "./domain_policy.ts";

/** A validated `--allow-urls` pattern. */
export interface UrlPattern {
  /** The pattern as the user wrote it. */
  source: string;
  /** Lower-case host: exact (`github.com`) or a leading wildcard (`*.github.com`). */
  host: string;
  /** The port requests must use (443 unless written). */
  port: number;
  /** Normalised path segments; `*` globs within a segment, a last `**` matches the rest. */
  segments: string[];
  /** The query glob, or null when the pattern has no `?` (the query is then ignored). */
  query: string | null;
}

/** What a request is matched on. `path` is the raw path the client sent. */
export interface UrlRequest {
  /** "https" unless given: plain "http" matches no pattern. */
  scheme?: "https" | "http";
  host: string;
  port: number;
  path: string;
  /** The raw query without `?`, or "" when there is none. */
  query: string;
}

/** The outcome of {@linkcode decideUrl}. */
export interface UrlDecision {
  allowed: boolean;
  /** Log rule: `url-pattern:<source>`, `url-policy:no-match`, `url-policy:unsafe-path`, `url-policy:no-pattern-for-host`. */
  rule: string;
  /** The pattern that allowed the request. */
  pattern?: UrlPattern;
  /** The patterns naming this host (for block messages). */
  hostPatterns: UrlPattern[];
  /** The normalised path, or null when it could not be normalised safely. */
  normalisedPath: string | null;
}

const EXAMPLE = "e.g. https://github.com/myorg/*";
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
const HOST_CHARS = /^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;

/**
 * Normalises a raw request path: percent-encoded unreserved characters are
 * decoded, other escapes are upper-cased and kept (so `%2F` never becomes a
 * separator), then dot segments are resolved. Returns null when the path
 * cannot be normalised safely: invalid escapes, NUL, control characters,
 * backslashes (raw or encoded), or `..` above the root.
 *
 * @example
 * ```ts
 * normalisePath("/a/%2e%2e/b"); // "/b"
 * normalisePath("/a%2fb"); // "/a%2Fb"
 * normalisePath("/a/%00"); // null
 * ```
 */
export function normalisePath(raw: string): string | null {
  if (!raw.startsWith("/")) return null;
  const out: string[] = [];
  const parts = raw.slice(1).split("/");
  for (let i = 0; i < parts.length; i++) {
    const seg = decodeSegment(parts[i]);
    if (seg === null) return null;
    const last = i === parts.length - 1;
    if (seg === ".") {
      if (last) out.push("");
    } else if (seg === "..") {
      if (out.length === 0) return null;
      out.pop();
      if (last) out.push("");
    } else {
      out.push(seg);
    }
  }
  return "/" + out.join("/");
}

function decodeSegment(seg: string): string | null {
  let out = "";
  for (let i = 0; i < seg.length; i++) {
    const c = seg[i];
    const code = c.charCodeAt(0);
    if (code < 0x21 || code === 0x7f || c === "\\") return null;
    if (c !== "%") {
      out += c;
      continue;
    }
    const hex = seg.slice(i + 1, i + 3);
    if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return null;
    const byte = parseInt(hex, 16);
    if (byte < 0x20 || byte === 0x7f || byte === 0x5c) return null;
    const ch = String.fromCharCode(byte);
    out += UNRESERVED.test(ch) ? ch : `%${hex.toUpperCase()}`;
    i += 2;
  }
  return out;
}

/**
 * Parses and validates one pattern; throws a usage error (exit 2) that says
 * why and shows a good example.
 */
export function parseUrlPattern(text: string): UrlPattern {
  // deno-lint-ignore no-control-regex
  if (/[\s"'`\x00-\x1f\x7f]/.test(text)) {
    throw usageError(
      `URL pattern contains whitespace, quotes or control characters (got: ${
        JSON.stringify(text)
      })`,
      `write plain patterns separated by commas, ${EXAMPLE}`,
    );
  }
  if (text === "") {
    throw usageError('URL pattern is empty (got: "")', `write ${EXAMPLE}`);
  }
  if (!/^https:\/\//i.test(text)) {
    // No scheme at all (`github.com/myorg/**`): the pattern meant is the same with https://.
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
    const rest = scheme ? text.slice(scheme[0].length) : text;
    const meant = /^[a-z0-9*][a-z0-9.*-]*(:\d+)?\//i.test(rest) ? `https://${rest}` : null;
    const write = meant ? `write ${meant}` : `write ${EXAMPLE.slice("e.g. ".length)}`;
    throw usageError(
      `URL patterns must start with https:// (got: ${text}); use --allow-domains for domain-level filtering`,
      scheme?.[1].toLowerCase() === "http"
        ? `or ${write}: patterns match HTTPS requests only, and plain http:// to a host they ` +
          "name is blocked"
        : `or ${write}`,
    );
  }
  const rest = text.slice("https://".length);
  const slash = rest.search(/[/?]/);
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const pathAndQuery = slash < 0 ? "" : rest.slice(slash);
  if (/[@#\[\]]/.test(authority) || pathAndQuery.includes("#")) {
    throw usageError(
      `URL pattern must be https://HOST[:PORT]/PATH without user, fragment or IPv6 literal (got: ${text})`,
      `write ${EXAMPLE}`,
    );
  }
  const portMatch = /^(.*?)(?::(\d*))?$/.exec(authority)!;
  const host = portMatch[1].toLowerCase();
  let port = 443;
  if (portMatch[2] !== undefined) {
    port = Number(portMatch[2]);
    if (!/^\d{1,5}$/.test(portMatch[2]) || port < 1 || port > 65535) {
      throw usageError(`URL pattern port is invalid (got: ${text})`, "use a port from 1 to 65535");
    }
  }
  if (host === "" || host === "*" || host.startsWith("*.*") || host === "**") {
    throw usageError(
      `URL pattern is too broad: its host is a bare wildcard (got: ${text})`,
      `name a host, ${EXAMPLE}`,
    );
  }
  if (!HOST_CHARS.test(host)) {
    throw usageError(
      `URL pattern host is invalid (got: ${text})`,
      `use a DNS name, optionally with a leading *., ${EXAMPLE}`,
    );
  }
  const labels = host.replace(/^\*\./, "").split(".");
  if (labels.length < 2 && host !== "localhost") {
    throw usageError(
      `URL pattern is too broad: its host is a whole top-level domain (got: ${text})`,
      `name a host, ${EXAMPLE}`,
    );
  }
  if (pathAndQuery === "" || pathAndQuery.startsWith("?")) {
    throw usageError(
      `URL pattern has no path (got: ${text})`,
      `add one, e.g. https://${authority}/myorg/*; use --allow-domains for a whole domain`,
    );
  }
  const q = pathAndQuery.indexOf("?");
  const rawPath = q < 0 ? pathAndQuery : pathAndQuery.slice(0, q);
  const query = q < 0 ? null : pathAndQuery.slice(q + 1);
  const path = normalisePath(rawPath);
  if (path === null || path !== rawPath.replace(/%[0-9a-f]{2}/g, (m) => m.toUpperCase())) {
    throw usageError(
      `URL pattern path is not in normal form (got: ${text})`,
      `write it without dot segments, backslashes or invalid escapes, ${EXAMPLE}`,
    );
  }
  const segments = path.slice(1).split("/");
  if (segments.some((s, i) => s.includes("**") && (s !== "**" || i !== segments.length - 1))) {
    throw usageError(
      `URL pattern uses ** other than as its whole last segment (got: ${text})`,
      "write e.g. https://github.com/myorg/** for everything below /myorg",
    );
  }
  return { source: text, host, port, segments, query };
}

/**
 * Parses every `--allow-urls` entry; throws a usage error for the first bad one.
 *
 * @example
 * ```ts
 * const patterns = parseUrlPatterns(["https://github.com/myorg/*"]);
 * ```
 */
export function parseUrlPatterns(list: string[]): UrlPattern[] {
  return list.map(parseUrlPattern);
}

/** Whether a pattern host (`x.com` or `*.x.com`) names `host` (case-insensitive). */
export function hostMatches(patternHost: string, host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, "");
  if (patternHost.startsWith("*.")) return h.endsWith(patternHost.slice(1));
  return h === patternHost;
}

/**
 * Whether `value` matches `pattern`, whose `*` stands for any run of
 * characters. Linear in the value's length (no backtracking regex: a
 * request head may hold a 64 KiB path, and the proxy decides on one
 * thread): the first piece is a prefix, the last a suffix, and each piece
 * between is found in order, leftmost first.
 */
function glob(pattern: string, value: string): boolean {
  if (!pattern.includes("*")) return pattern === value;
  const pieces = pattern.split("*");
  const first = pieces[0];
  const last = pieces[pieces.length - 1];
  if (value.length < first.length + last.length) return false;
  if (!value.startsWith(first) || !value.endsWith(last)) return false;
  let at = first.length;
  const end = value.length - last.length;
  for (let i = 1; i < pieces.length - 1; i++) {
    const piece = pieces[i];
    if (piece === "") continue;
    const found = value.indexOf(piece, at);
    if (found === -1 || found + piece.length > end) return false;
    at = found + piece.length;
  }
  return true;
}

function pathMatches(segments: string[], path: string): boolean {
  const got = path.slice(1).split("/");
  if (segments.at(-1) === "**") {
    const head = segments.slice(0, -1);
    if (got.length < head.length) return false;
    return head.every((s, i) => glob(s, got[i]));
  }
  return got.length === segments.length && segments.every((s, i) => glob(s, got[i]));
}

/**
 * Decides one request: allowed when no pattern names the host, or when one
 * of the patterns naming it matches the port, the normalised path (and the
 * query, when the pattern has one). Fail closed: a host named by patterns
 * is held to them on every port and scheme, so a plain-HTTP request
 * (`scheme: "http"`, which no `https://` pattern matches) or a port no
 * pattern names is blocked, and so is a path that cannot be normalised
 * safely.
 *
 * @example
 * ```ts
 * const d = decideUrl(parseUrlPatterns(["https://x.com/a/*"]), {
 *   host: "x.com", port: 443, path: "/a/../b", query: "",
 * });
 * d.allowed; // false
 * ```
 */
export function decideUrl(patterns: UrlPattern[], req: UrlRequest): UrlDecision {
  const hostPatterns = patterns.filter((p) => hostMatches(p.host, req.host));
  const normalisedPath = normalisePath(req.path);
  if (hostPatterns.length === 0) {
    return { allowed: true, rule: "url-policy:no-pattern-for-host", hostPatterns, normalisedPath };
  }
  if (normalisedPath === null) {
    return { allowed: false, rule: "url-policy:unsafe-path", hostPatterns, normalisedPath };
  }
  if ((req.scheme ?? "https") !== "https") {
    return { allowed: false, rule: "url-policy:no-match", hostPatterns, normalisedPath };
  }
  for (const p of hostPatterns) {
    if (p.port !== req.port || !pathMatches(p.segments, normalisedPath)) continue;
    if (p.query !== null && !glob(p.query, req.query)) continue;
    return {
      allowed: true,
      rule: `url-pattern:${p.source}`,
      pattern: p,
      hostPatterns,
      normalisedPath,
    };
  }
  return { allowed: false, rule: "url-policy:no-match", hostPatterns, normalisedPath };
}

/**
 * The body of a 403 for a URL the patterns block: the URL, why, and the
 * patterns naming its host.
 *
 * @example
 * ```ts
 * urlBlockMessage("https://x.com/b", "x.com", decision);
 * ```
 */
export function urlBlockMessage(url: string, host: string, d: UrlDecision): string {
  const list = d.hostPatterns.map((p) => p.source).join(", ");
  let why = "";
  if (d.normalisedPath === null) why = " (the path cannot be normalised safely)";
  else if (/^http:/i.test(url)) {
    why = " (patterns match https:// only: plain HTTP to this host is blocked)";
  } else {
    // What was matched, when it is not what the client wrote (`/a/../b` is `/b`).
    const raw = /^[a-z]+:\/\/[^/?]*([^?]*)/i.exec(url)?.[1] ?? "";
    if (raw !== "" && raw !== d.normalisedPath) why = ` (its path reads as ${d.normalisedPath})`;
  }
  return `Blocked by forgekit: ${url} matches no --allow-urls pattern for ${host}${why}; ` +
    `patterns for this host: ${list}\n`;
}

/**
 * The first pattern naming a host that a `--no-bump-domains` entry splices,
 * with that entry: such a host's URLs are never seen, so the pattern could
 * not be enforced (the host would be open at the domain level). Two host
 * sets overlap exactly when one of them holds the more specific base name,
 * or a subdomain of it.
 *
 * @example
 * ```ts
 * splicedPattern(parseUrlPatterns(["https://github.com/a/*"]), ["github.com"]);
 * // { pattern: …, entry: "github.com" }
 * ```
 */
export function splicedPattern(
  patterns: UrlPattern[],
  noBump: string[],
): { pattern: UrlPattern; entry: string } | null {
  for (const pattern of patterns) {
    for (const entry of noBump) {
      const bases = [pattern.host, entry].map((h) => h.replace(/^\*\./, ""));
      const candidates = bases.flatMap((b) => [b, `x.${b}`]);
      if (candidates.some((h) => hostMatches(pattern.host, h) && domainMatches(entry, h))) {
        return { pattern, entry };
      }
    }
  }
  return null;
}

/**
 * Why a URL pattern's host could never be reached, with the fix, or null:
 * no `--allow-domains` entry allows it, or `--block-domains` blocks it (the
 * domain policy decides before any pattern is looked at).
 */
export function unreachableHost(
  p: UrlPattern,
  policy: DomainPolicy,
): { why: string; hint: string } | null {
  let blocked: string | undefined;
  if (p.host.startsWith("*.")) {
    // `*.x.com` names only subdomains of x.com: all blocked when an entry covers x.com's.
    const base = p.host.slice(2);
    blocked = policy.block.find((b) => domainMatches(b.replace(/^\*\./, ""), base));
    if (!blocked && policy.allow.some((a) => domainsOverlap(a, p.host))) return null;
  } else {
    const d = decide(policy, p.host, p.port);
    if (d.allowed) return null;
    if (d.rule.startsWith("block-domains:")) blocked = d.rule.slice("block-domains:".length);
  }
  return blocked
    ? {
      why: `--block-domains ${blocked} blocks it`,
      hint: `drop ${blocked} from --block-domains, or drop the pattern`,
    }
    : {
      why: "--allow-domains does not allow it",
      hint: `add ${p.host} to --allow-domains, or drop the pattern`,
    };
}
