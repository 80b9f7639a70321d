import assert from "node:assert/strict";
import {
  AccessLog,
  type AccessLogEntry,
  BlockedTally,
  FailedTally,
  logTime,
  openLogFile,
  SUMMARY_URLS_PER_HOST,
} from "./access_log.ts";

function entry(over: Partial<AccessLogEntry>): AccessLogEntry {
  return {
    time: "2026-01-01T00:00:00.000Z",
    method: "GET",
    scheme: "https",
    host: "example.com",
    port: 443,
    url: null,
    decision: "blocked",
    rule: "no-rule",
    status: 403,
    bytes_out: 0,
    bytes_in: 0,
    duration_ms: 0,
    ...over,
  };
}

Deno.test("the summary is null when nothing was blocked", () => {
  const t = new BlockedTally();
  t.add(entry({ decision: "allowed", rule: "allow-domains:example.com" }));
  assert.equal(t.summary(["example.com"]), null);
});

Deno.test("host names longer than DNS allows are cut in the summary: its memory stays bounded", () => {
  const t = new BlockedTally();
  const long = (c: string) => c.repeat(64 * 1024);
  t.add(entry({ host: long("a"), rule: "bad-request" }));
  t.add(entry({ host: long("a"), rule: "bad-request" }));
  const summary = t.summary([])!;
  assert.ok(summary.length < 1000, `${summary.length} characters`);
  assert.match(summary, new RegExp(`^  ${"a".repeat(253)}…  2$`, "m"));
});

Deno.test("the summary counts per host (most first), suggests domains and lists URLs", () => {
  const t = new BlockedTally();
  t.add(entry({ host: "a.example" }));
  for (let i = 0; i < 3; i++) t.add(entry({ host: "b.example" }));
  t.add(entry({ host: "c.example", rule: "port:8443" }));
  t.add(entry({ host: "api.example", rule: "url-policy:no-match", url: "https://api.example/x" }));
  t.add(entry({ host: "api.example", rule: "url-policy:no-match", url: "https://api.example/x" }));
  t.add(
    entry({ host: "api.example", rule: "url-policy:unsafe-path", url: "https://api.example/%2F" }),
  );
  t.add(entry({ host: "api.example", rule: "host-mismatch", url: "https://api.example/h" }));
  assert.equal(
    t.summary(["api.example"]),
    [
      "forgekit firewall: blocked requests:",
      "  api.example  4",
      "  b.example  3",
      "  a.example  1",
      "  c.example  1  (port 8443: only 80 and 443 are allowed)",
      "  to allow them: --allow-domains api.example,a.example,b.example",
      "  blocked URLs by host:",
      "    api.example:",
      "      https://api.example/x",
      "      https://api.example/%2F",
    ].join("\n"),
  );
});

Deno.test("a long run keeps a bounded number of URLs per host and says how many more", () => {
  const t = new BlockedTally();
  const extra = 5;
  for (let round = 0; round < 2; round++) {
    for (let i = 0; i < SUMMARY_URLS_PER_HOST + extra; i++) {
      t.add(entry({ rule: "url-policy:no-match", url: `https://example.com/${i}` }));
    }
  }
  const lines = t.summary([])!.split("\n");
  assert.equal(lines[1], `  example.com  ${2 * (SUMMARY_URLS_PER_HOST + extra)}`);
  assert.equal(lines.filter((l) => l.startsWith("      https://")).length, SUMMARY_URLS_PER_HOST);
  // URLs past the limit are counted each time they are seen (not deduplicated).
  assert.equal(lines.at(-1), `      … and ${2 * extra} more blocked requests (see the access log)`);
});

Deno.test("logTime is the current UTC time, to the millisecond, across second boundaries", () => {
  const seconds = new Set<number>();
  // Until the second has changed twice (at most about 2 s).
  while (seconds.size < 3) {
    const before = Date.now();
    const t = logTime();
    const after = Date.now();
    assert.match(t, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const ms = Date.parse(t);
    assert.ok(before <= ms && ms <= after, `${t} not within ${before}..${after}`);
    seconds.add(Math.floor(ms / 1000));
  }
});

Deno.test("the summary suggests only hosts --allow-domains takes, and shows no control characters", () => {
  const t = new BlockedTally();
  // Hosts the workload chose: a shell command, a wildcard smuggled after a comma, a name
  // --allow-domains refuses, and a request that named no host.
  t.add(entry({ host: "a$(touch${ifs}x).example" }));
  t.add(entry({ host: "x.com,*.evil.com" }));
  t.add(entry({ host: "under_score.example" }));
  t.add(entry({ host: "ok.example" }));
  t.add(entry({ host: "", rule: "not-a-proxy-request" }));
  t.add(
    entry({ host: "api.example", rule: "url-policy:no-match", url: "https://api.example/\x1b[2J" }),
  );
  const summary = t.summary(["allowed.example"])!;
  assert.match(summary, /^ {2}to allow them: --allow-domains allowed\.example,ok\.example$/m);
  assert.match(summary, /^ {2}\(no host: not a proxy request\) {2}1$/m);
  assert.match(summary, /^ {6}https:\/\/api\.example\/\\x1b\[2J$/m);
  assert.ok(!summary.includes("\x1b"));
});

Deno.test("debug lines escape control characters; log lines escape C0 and C1 controls", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const lines: string[] = [];
    const log = new AccessLog(`${dir}/access.log`, (l) => lines.push(l));
    log.write(entry({ method: "GE\x1b]0;pwned\x07T\x9b2J", host: "other.example" }));
    log.close();
    assert.deepEqual(lines, [
      "forgekit firewall: blocked GE\\x1b]0;pwned\\x07T\\x9b2J other.example:443 (no-rule, 403)",
    ]);
    const text = await Deno.readTextFile(`${dir}/access.log`);
    const controls = [...text.slice(0, -1)].filter((c) => c < " " || (c >= "\x7f" && c <= "\x9f"));
    assert.deepEqual(controls, [], "only the line's own newline");
    assert.equal(
      JSON.parse(text).method,
      "GE\x1b]0;pwned\x07T\x9b2J",
      "the value is kept, escaped",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the summary suggests a blocked IP address, and says which port blocked a host", () => {
  const t = new BlockedTally();
  t.add(entry({ host: "1.1.1.1", rule: "ip-literal" }));
  t.add(entry({ host: "2001:db8::1", rule: "ip-literal" }));
  // Other spellings of an address are no entry --allow-domains takes.
  t.add(entry({ host: "0x7f.1", rule: "ip-literal" }));
  t.add(entry({ host: "api.github.com", port: 8080, rule: "port:8080" }));
  t.add(entry({ host: "api.github.com", port: 22, rule: "port:22" }));
  const summary = t.summary(["api.github.com"])!;
  assert.match(
    summary,
    /^ {2}to allow them: --allow-domains api\.github\.com,1\.1\.1\.1,2001:db8::1$/m,
  );
  assert.match(
    summary,
    /^ {2}api\.github\.com {2}2 {2}\(port 8080, 22: only 80 and 443 are allowed\)$/m,
  );
  assert.match(summary, /^ {2}1\.1\.1\.1 {2}1$/m);
});

Deno.test("a log file is never opened through a symbolic link, and a new one is 0600", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // Whoever can write to the directory plants a link to a file of theirs choosing.
    await Deno.writeTextFile(`${dir}/victim`, "precious\n");
    await Deno.symlink(`${dir}/victim`, `${dir}/access.log`);
    assert.throws(() => new AccessLog(`${dir}/access.log`), /is a symbolic link/);
    await Deno.symlink(`${dir}/nowhere`, `${dir}/dangling.log`);
    assert.throws(() => openLogFile(`${dir}/dangling.log`), /is a symbolic link/);
    await assert.rejects(() => Deno.lstat(`${dir}/nowhere`), Deno.errors.NotFound);
    assert.equal(await Deno.readTextFile(`${dir}/victim`), "precious\n");
    await Deno.mkdir(`${dir}/a-dir`);
    assert.throws(() => openLogFile(`${dir}/a-dir`), /not a regular file/);

    const log = new AccessLog(`${dir}/new.log`);
    log.write(entry({}));
    log.close();
    assert.equal((await Deno.stat(`${dir}/new.log`)).mode! & 0o777, 0o600);
    // An existing regular file is appended to.
    const again = new AccessLog(`${dir}/new.log`);
    again.write(entry({ host: "second.example" }));
    again.close();
    const lines = (await Deno.readTextFile(`${dir}/new.log`)).trim().split("\n");
    assert.deepEqual(lines.map((l) => JSON.parse(l).host), ["example.com", "second.example"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("log lines have their fields in one order, whatever order the entry was made in", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const log = new AccessLog(`${dir}/access.log`);
    // As the proxy makes a CONNECT entry: its defaults first, then the fields of the line.
    log.write({
      time: "2026-01-01T00:00:00.000Z",
      scheme: "https",
      url: null,
      status: 403,
      bytes_out: 0,
      bytes_in: 0,
      duration_ms: 1,
      method: "CONNECT",
      host: "example.com",
      port: 443,
      decision: "blocked",
      rule: "no-rule",
      reason: "blocked-by-domain-policy",
    });
    log.write(
      entry({ decision: "allowed", rule: "url-pattern:https://x/*", pattern: "https://x/*" }),
    );
    log.close();
    const lines = (await Deno.readTextFile(`${dir}/access.log`)).trim().split("\n");
    const order = [
      "time",
      "method",
      "scheme",
      "host",
      "port",
      "url",
      "decision",
      "rule",
      "status",
      "bytes_out",
      "bytes_in",
      "duration_ms",
    ];
    assert.deepEqual(Object.keys(JSON.parse(lines[0])), [...order, "reason"]);
    assert.deepEqual(Object.keys(JSON.parse(lines[1])), [...order, "pattern"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the summary names hosts whose allowed requests failed upstream, and why", async () => {
  const t = new FailedTally();
  assert.equal(t.summary(), null);
  t.add(entry({ decision: "allowed", rule: "allow-domains:a.example", status: 200 }));
  t.add(entry({ decision: "blocked", reason: "blocked-by-domain-policy" }));
  assert.equal(t.summary(), null, "only allowed entries with an upstream error count");
  for (let i = 0; i < 2; i++) {
    t.add(entry({
      host: "api.example",
      decision: "allowed",
      rule: "url-policy:no-pattern-for-host",
      status: 502,
      reason: "upstream error: invalid peer certificate: UnknownIssuer",
    }));
  }
  t.add(entry({
    host: "gone.example",
    decision: "allowed",
    rule: "allow-domains:gone.example",
    status: null,
    reason: "upstream error: getaddrinfo ENOTFOUND gone.example\x1b[2J",
  }));
  assert.equal(
    t.summary(),
    [
      "forgekit firewall: allowed, but failed upstream:",
      "  api.example  2  invalid peer certificate: UnknownIssuer",
      "  gone.example  1  getaddrinfo ENOTFOUND gone.example\\x1b[2J",
      "  forgekit did not trust a server's certificate: for a private or corporate CA, pass --upstream-ca FILE (PEM)",
    ].join("\n"),
  );
  // Through the log: what the firewall prints at the end.
  const dir = await Deno.makeTempDir();
  try {
    const log = new AccessLog(`${dir}/access.log`);
    log.write(entry({
      host: "gone.example",
      decision: "allowed",
      status: 502,
      reason: "upstream error: connection refused",
    }));
    log.close();
    assert.match(log.failed.summary()!, /^ {2}gone\.example {2}1 {2}connection refused$/m);
    assert.doesNotMatch(log.failed.summary()!, /upstream-ca/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("credentials in URLs are masked in the file, the debug lines and the summary", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const lines: string[] = [];
    const log = new AccessLog(`${dir}/access.log`, (l) => lines.push(l));
    log.write(entry({
      url: "https://example.com/a?access_token=SEKRIT1&page=2",
      decision: "allowed",
      rule: "url-pattern",
      status: 200,
    }));
    log.write(
      entry({ url: "https://example.com/b?X-Amz-Signature=SEKRIT2", rule: "url-no-match" }),
    );
    log.close();
    const text = await Deno.readTextFile(`${dir}/access.log`);
    const summary = log.blocked.summary(["example.com"]) ?? "";
    for (const out of [text, lines.join("\n"), summary]) assert.doesNotMatch(out, /SEKRIT/);
    assert.deepEqual(text.trim().split("\n").map((l) => JSON.parse(l).url), [
      "https://example.com/a?access_token=****&page=2",
      "https://example.com/b?X-Amz-Signature=****",
    ]);
    assert.match(summary, /https:\/\/example\.com\/b\?X-Amz-Signature=\*\*\*\*/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
