/** The access log: one JSON line per connection or request. */
import { domainProblem } from "./host_validation.ts";
import { ALLOWED_PORTS } from "./domain_policy.ts";
import { printable, printableJson } from "../cli/output.ts";
import { maskUrlSecrets } from "../cli/url_secrets.ts";
import { LineFile } from "./line_file.ts";

export { FLUSH_MS, openLogFile } from "./line_file.ts";

/**
 * One JSON line, its fields always in the order of {@linkcode AccessLogEntry}
 * (whatever order the entry was made in), absent optional ones left out.
 * JSON escapes C0 controls; C1 controls (which a method read as Latin-1 may
 * hold) are escaped too, for whoever reads the log on a terminal.
 */
function jsonLine(e: AccessLogEntry): string {
  return printableJson(JSON.stringify({
    time: e.time,
    method: e.method,
    scheme: e.scheme,
    host: e.host,
    port: e.port,
    url: e.url,
    decision: e.decision,
    rule: e.rule,
    status: e.status,
    bytes_out: e.bytes_out,
    bytes_in: e.bytes_in,
    duration_ms: e.duration_ms,
    pattern: e.pattern,
    reason: e.reason,
  }));
}

/** One line of the access log. */
export interface AccessLogEntry {
  time: string;
  method: string;
  scheme: "https" | "http";
  host: string;
  port: number;
  /** The full URL where known (plain HTTP, or HTTPS with --ssl-bump). */
  url: string | null;
  decision: "allowed" | "blocked";
  /** What decided: `allow-domains:x`, `block-domains:x`, `no-rule`, `sni-mismatch`, `ip-literal`, `port:N`, … */
  rule: string;
  status: number | null;
  /** Bytes from the client to upstream. */
  bytes_out: number;
  /** Bytes from upstream to the client. */
  bytes_in: number;
  duration_ms: number;
  pattern?: string;
  reason?: string;
}

let lastMs = 0;
let lastIso = "";
let secondStart = 0;
/** `YYYY-MM-DDTHH:MM:SS.` of the second that starts at `secondStart`. */
let secondPrefix = "";

/**
 * The current time for a log line, ISO 8601 (UTC, milliseconds): the date
 * is formatted once per second, the milliseconds written into it.
 */
export function logTime(): string {
  const now = Date.now();
  if (now === lastMs) return lastIso;
  lastMs = now;
  const ms = now - secondStart;
  if (ms < 0 || ms >= 1000) {
    secondStart = now - (now % 1000);
    secondPrefix = new Date(secondStart).toISOString().slice(0, 20);
    return lastIso = `${secondPrefix}${String(now % 1000).padStart(3, "0")}Z`;
  }
  return lastIso = `${secondPrefix}${String(ms).padStart(3, "0")}Z`;
}

/** Appends entries to a file and tallies the blocked ones for the end-of-run summary. */
export class AccessLog {
  readonly blocked: BlockedTally = new BlockedTally();
  /** Allowed requests and connections that failed upstream, for the summary. */
  readonly failed: FailedTally = new FailedTally();
  #file: LineFile<AccessLogEntry>;
  #debug?: (line: string) => void;

  constructor(path: string, debug?: (line: string) => void) {
    this.#file = new LineFile(path, jsonLine);
    this.#debug = debug;
  }

  get path(): string {
    return this.#file.path;
  }

  /**
   * Writes one entry (in a batch, {@linkcode LineFile}); after `close()` it
   * is only counted for the summary.
   */
  write(entry: AccessLogEntry): void {
    // Every place the URL goes from here (the file, debug lines, the
    // summary) gets it with its credentials masked.
    if (entry.url !== null) entry.url = maskUrlSecrets(entry.url);
    this.blocked.add(entry);
    if (entry.reason !== undefined) this.failed.add(entry);
    this.#file.push(entry);
    this.#debug?.(
      printable(
        `forgekit firewall: ${entry.decision} ${entry.method} ${
          entry.url ?? `${entry.host}:${entry.port}`
        } (${entry.rule}${entry.status !== null ? `, ${entry.status}` : ""})`,
      ),
    );
  }

  /** Writes the pending lines now. */
  flush(): void {
    this.#file.flush();
  }

  /** Flushes and closes; entries written later are only counted for the summary. */
  close(): void {
    this.#file.close();
  }
}

/** The most distinct blocked URLs the summary keeps per host (the access log has them all). */
export const SUMMARY_URLS_PER_HOST = 20;
/**
 * The most hosts the summary names. A workload chooses the hosts it asks
 * for (and, under an allowed `*.example.com`, any number of them): past
 * this, blocked requests to further hosts are only counted, so that the
 * tally's memory and the summary's length stay bounded.
 */
export const SUMMARY_HOSTS = 1000;
/** The most characters of a blocked URL the summary keeps (a URL may be 64 KiB long). */
export const SUMMARY_URL_LENGTH = 256;

/** The longest host name a DNS name can be; longer ones are cut in summaries. */
const MAX_HOST = 253;

/**
 * What the end-of-run summary needs from the blocked entries, in bounded
 * memory however long the run: counts for up to {@linkcode SUMMARY_HOSTS}
 * hosts, the hosts no rule allowed, and up to
 * {@linkcode SUMMARY_URLS_PER_HOST} distinct blocked URLs per host (each
 * cut to {@linkcode SUMMARY_URL_LENGTH} characters).
 */
export class BlockedTally {
  #perHost = new Map<string, number>();
  #noRule = new Set<string>();
  /** Ports requests to a host were blocked for (at most {@linkcode SUMMARY_URLS_PER_HOST}). */
  #ports = new Map<string, Set<number>>();
  #urls = new Map<string, { shown: Set<string>; more: number }>();
  /** Blocked requests to hosts past {@linkcode SUMMARY_HOSTS}. */
  #otherHosts = 0;

  /** Counts an entry; allowed entries are ignored. */
  add(e: AccessLogEntry): void {
    if (e.decision !== "blocked") return;
    // A name no DNS holds (the workload's, up to a request head long) is cut.
    const host = e.host.length > MAX_HOST ? `${e.host.slice(0, MAX_HOST)}…` : e.host;
    const count = this.#perHost.get(host);
    if (count === undefined && this.#perHost.size >= SUMMARY_HOSTS) {
      this.#otherHosts++;
      return;
    }
    this.#perHost.set(host, (count ?? 0) + 1);
    // Only names --allow-domains takes are suggested (an IP address is one):
    // the summary's line is meant to be pasted into a shell, and the
    // workload chose these hosts.
    if ((e.rule === "no-rule" || e.rule === "ip-literal") && domainProblem(host) === null) {
      this.#noRule.add(host);
    }
    // Blocked for its port alone, the host may well be allowed: say so.
    if (e.rule.startsWith("port:")) {
      let ports = this.#ports.get(host);
      if (!ports) this.#ports.set(host, ports = new Set());
      if (ports.size < SUMMARY_URLS_PER_HOST) ports.add(Number(e.rule.slice(5)));
    }
    if (e.url && e.rule.startsWith("url-")) {
      let u = this.#urls.get(host);
      if (!u) this.#urls.set(host, u = { shown: new Set(), more: 0 });
      const url = e.url.length > SUMMARY_URL_LENGTH
        ? `${e.url.slice(0, SUMMARY_URL_LENGTH)}…`
        : e.url;
      if (u.shown.has(url)) return;
      if (u.shown.size < SUMMARY_URLS_PER_HOST) u.shown.add(url);
      else u.more++;
    }
  }

  /** The end-of-run summary of blocked traffic, or null when nothing was blocked. */
  summary(allow: string[]): string | null {
    if (this.#perHost.size === 0) return null;
    const lines = ["forgekit firewall: blocked requests:"];
    for (const [host, n] of [...this.#perHost].sort((a, b) => b[1] - a[1])) {
      const ports = this.#ports.get(host);
      const why = ports
        ? `  (port ${[...ports].join(", ")}: only ${ALLOWED_PORTS.join(" and ")} are allowed)`
        : "";
      lines.push(
        `  ${host === "" ? "(no host: not a proxy request)" : printable(host)}  ${n}${why}`,
      );
    }
    if (this.#otherHosts) {
      lines.push(
        `  … and ${this.#otherHosts} more blocked requests to other hosts (see the access log)`,
      );
    }
    if (this.#noRule.size) {
      lines.push(`  to allow them: --allow-domains ${[...allow, ...this.#noRule].join(",")}`);
    }
    if (this.#urls.size) {
      lines.push("  blocked URLs by host:");
      for (const [host, { shown, more }] of this.#urls) {
        lines.push(`    ${printable(host)}:`);
        for (const u of shown) lines.push(`      ${printable(u)}`);
        if (more) lines.push(`      … and ${more} more blocked requests (see the access log)`);
      }
    }
    return lines.join("\n");
  }
}

/** How an allowed entry's `reason` starts when the request failed upstream. */
const UPSTREAM_ERROR = "upstream error: ";
/** What forgekit says to do about an upstream server's certificate it did not trust. */
export const UPSTREAM_CA_HINT = "for a private or corporate CA, pass --upstream-ca FILE (PEM)";

/** Whether an upstream error says a server's certificate was not trusted. */
export function untrustedCertificate(message: string): boolean {
  return /certificate|UnknownIssuer|self[- ]signed|unable to verify/i.test(message);
}

/**
 * What the end-of-run summary says about allowed traffic that failed
 * upstream (the server could not be reached, or its certificate was not
 * trusted): otherwise a workload sees only a reset connection or a 502,
 * and nothing on forgekit's side says why. Bounded like
 * {@linkcode BlockedTally}: at most {@linkcode SUMMARY_HOSTS} hosts, each
 * with the first reason (cut to {@linkcode SUMMARY_URL_LENGTH} characters).
 */
export class FailedTally {
  #perHost = new Map<string, { count: number; reason: string }>();
  #otherHosts = 0;
  #certificate = false;

  /** Counts an allowed entry whose reason is an upstream error; others are ignored. */
  add(e: AccessLogEntry): void {
    if (e.decision !== "allowed" || !e.reason?.startsWith(UPSTREAM_ERROR)) return;
    const reason = e.reason.slice(UPSTREAM_ERROR.length);
    if (untrustedCertificate(reason)) this.#certificate = true;
    const seen = this.#perHost.get(e.host);
    if (seen) {
      seen.count++;
      return;
    }
    if (this.#perHost.size >= SUMMARY_HOSTS) {
      this.#otherHosts++;
      return;
    }
    const cut = reason.length > SUMMARY_URL_LENGTH
      ? `${reason.slice(0, SUMMARY_URL_LENGTH)}…`
      : reason;
    this.#perHost.set(e.host, { count: 1, reason: cut });
  }

  /** The summary of upstream failures, or null when there were none. */
  summary(): string | null {
    if (this.#perHost.size === 0) return null;
    const lines = ["forgekit firewall: allowed, but failed upstream:"];
    for (
      const [host, { count, reason }] of [...this.#perHost].sort((a, b) => b[1].count - a[1].count)
    ) {
      lines.push(`  ${printable(host)}  ${count}  ${printable(reason)}`);
    }
    if (this.#otherHosts) {
      lines.push(`  … and ${this.#otherHosts} more to other hosts (see the access log)`);
    }
    if (this.#certificate) {
      lines.push(
        `  forgekit did not trust a server's certificate: ${UPSTREAM_CA_HINT}`,
      );
    }
    return lines.join("\n");
  }
}
