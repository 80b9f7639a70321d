/** The access log: one JSON line per connection or request. */

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

/** Appends entries to a file and keeps them for the end-of-run summary. */
export class AccessLog {
  readonly path: string;
  readonly entries: AccessLogEntry[] = [];
  #file: Deno.FsFile;
  #enc = new TextEncoder();
  #debug?: (line: string) => void;

  constructor(path: string, debug?: (line: string) => void) {
    this.path = path;
    this.#file = Deno.openSync(path, { append: true, create: true, mode: 0o600 });
    this.#debug = debug;
  }

  /** Writes one entry (synchronously, so that nothing is lost on exit). */
  write(entry: AccessLogEntry): void {
    this.entries.push(entry);
    this.#file.writeSync(this.#enc.encode(JSON.stringify(entry) + "\n"));
    this.#debug?.(
      `forgekit firewall: ${entry.decision} ${entry.method} ${
        entry.url ?? `${entry.host}:${entry.port}`
      } (${entry.rule}${entry.status !== null ? `, ${entry.status}` : ""})`,
    );
  }

  close(): void {
    try {
      this.#file.close();
    } catch { /* closed */ }
  }
}

/** The end-of-run summary of blocked traffic, or null when nothing was blocked. */
export function blockedSummary(entries: AccessLogEntry[], allow: string[]): string | null {
  const blocked = entries.filter((e) => e.decision === "blocked");
  if (blocked.length === 0) return null;
  const hosts = new Map<string, number>();
  for (const e of blocked) hosts.set(e.host, (hosts.get(e.host) ?? 0) + 1);
  const lines = ["forgekit firewall: blocked requests:"];
  for (const [host, n] of [...hosts].sort((a, b) => b[1] - a[1])) lines.push(`  ${host}  ${n}`);
  const domainBlocked = [
    ...new Set(blocked.filter((e) => e.rule === "no-rule").map((e) => e.host)),
  ];
  if (domainBlocked.length) {
    lines.push(`  to allow them: --allow-domains ${[...allow, ...domainBlocked].join(",")}`);
  }
  const urls = blocked.filter((e) => e.url && e.rule.startsWith("url-"));
  if (urls.length) {
    lines.push("  blocked URLs by host:");
    const byHost = new Map<string, string[]>();
    for (const e of urls) byHost.set(e.host, [...(byHost.get(e.host) ?? []), e.url!]);
    for (const [host, list] of byHost) {
      lines.push(`    ${host}:`);
      for (const u of [...new Set(list)]) lines.push(`      ${u}`);
    }
  }
  return lines.join("\n");
}
