/** `forgekit firewall`: run a command whose only way out is forgekit's filtering proxy. */
import { listenProxy, type ProxyListener } from "./node_conn.ts";
import { join } from "node:path";
import {
  CliError,
  findCommand,
  fsProblem,
  isFile,
  parseCommandArgs,
  splitList,
  usageError,
  yellow,
} from "../cli/mod.ts";
import { AccessLog } from "./access_log.ts";
import { BodyLog } from "./body_log.ts";
import { ALLOWED_PORTS, domainMatches, domainsOverlap } from "./domain_policy.ts";
import { checkDomains, splitDomainText } from "./host_validation.ts";
import { serveProxy } from "./proxy.ts";
import {
  checkSandboxTools,
  exitCodeOf,
  FORWARDED_SIGNALS,
  forwardSignals,
  proxyVars,
  runSandboxed,
  sandboxInit,
  type SandboxSpec,
  sudoUser,
  sudoUserEnv,
} from "./sandbox.ts";
import { signalExitCode } from "../cli/signals.ts";
import { createSession, removeStaleSessions } from "./session.ts";
import { type BumpSession, createBumpSession } from "./ssl_bump.ts";
import { proxyEnv } from "./upstream.ts";
import { parseUrlPatterns, splicedPattern, unreachableHost } from "./url_pattern.ts";

/** Help text of `forgekit firewall`. */
export const FIREWALL_HELP =
  `forgekit firewall: run a command that can reach the network only through forgekit's filtering proxy

Usage: forgekit firewall [options] -- COMMAND [ARGS…]

Domain filtering:
  --allow-domains LIST        Comma-separated: example.com (and its subdomains), *.example.com
                              (subdomains only), or an IP address. Without it, all is blocked
  --allow-domains-file FILE   More allowed domains, one per line or comma-separated, # comments
  --block-domains LIST        Domains blocked even when allowed
HTTPS inspection:
  --ssl-bump                  Terminate TLS with a per-session CA and filter full URLs
  --allow-urls LIST           URL patterns, with --ssl-bump only: https://host/path/* (* within
                              one segment), https://host/path/** (everything below); a host
                              named by a pattern must be allowed, and is held to its patterns
  --no-bump-domains LIST      Allowed domains (as --allow-domains) spliced, not inspected
                              (for programs that pin certificates)
  --upstream-ca FILE          Extra CA (PEM) forgekit trusts for upstream servers, with
                              --ssl-bump only (also: DENO_CERT)
  --log-bodies                With --ssl-bump: also log each allowed exchange's headers and
                              first 64 KiB of each body to bodies.jsonl (credentials masked)
Logs and sandbox:
  --log-level LEVEL           debug, info, warn or error (default info)
  --log-dir DIR               Where access.log (and bodies.jsonl) go (default
                              /tmp/fw-logs-<timestamp>-<random>/)
  --no-sandbox                No namespaces: only the proxy variables are set (a program can bypass them)
  -h, --help                  Show this help

Only ports 80 and 443 are allowed. HTTPS is checked by the CONNECT host and the TLS
SNI, which must be equal; plain HTTP by the URL's host. Exit status: COMMAND's
(130/143/129 when interrupted by SIGINT/SIGTERM/SIGHUP), 2 for usage errors and when
the sandbox's tools are missing (not Linux, no unshare, setpriv, setsid or ip), 1 when
the sandbox or forgekit fails.

Examples:
  sudo forgekit firewall --allow-domains github.com,npmjs.org -- npm ci
  forgekit firewall --allow-domains api.github.com --ssl-bump \\
      --allow-urls 'https://api.github.com/repos/octo/*' -- curl https://api.github.com/repos/octo/app`;

const LEVELS = ["debug", "info", "warn", "error"] as const;

function stamp(): string {
  return new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
}

/**
 * Creates this run's default log directory, `/tmp/fw-logs-<timestamp>-<random>`
 * (mode 0700): made new, never one that exists (another user could have
 * made it, with a link in it), so runs never share or inherit one.
 */
function makeLogDir(): string {
  for (let attempt = 0;; attempt++) {
    const random = crypto.getRandomValues(new Uint8Array(4));
    const suffix = Array.from(random, (b) => b.toString(16).padStart(2, "0")).join("");
    const dir = join("/tmp", `fw-logs-${stamp()}-${suffix}`);
    try {
      Deno.mkdirSync(dir, { mode: 0o700 });
      return dir;
    } catch (err) {
      if (err instanceof Deno.errors.AlreadyExists && attempt < 8) continue;
      throw usageError(`Cannot create the log directory ${dir}`, "give one with --log-dir", err);
    }
  }
}

/** Runs `forgekit firewall …`. */
export async function runFirewall(argv: string[]): Promise<number> {
  if (argv[0] === "--internal-sandbox" && argv[1]) return await sandboxInit(argv[1]);
  const dash = argv.indexOf("--");
  const ours = dash >= 0 ? argv.slice(0, dash) : argv;
  if (ours.includes("--help") || ours.includes("-h")) {
    console.log(FIREWALL_HELP);
    return 0;
  }
  const { values, positionals } = parseCommandArgs("forgekit firewall", ours, {
    "allow-domains": { type: "string", multiple: true },
    "allow-domains-file": { type: "string", multiple: true },
    "block-domains": { type: "string", multiple: true },
    "ssl-bump": { type: "boolean" },
    "allow-urls": { type: "string", multiple: true },
    "no-bump-domains": { type: "string", multiple: true },
    "upstream-ca": { type: "string", multiple: true },
    "log-bodies": { type: "boolean" },
    "log-level": { type: "string" },
    "log-dir": { type: "string" },
    "no-sandbox": { type: "boolean" },
  });
  if (positionals.length) {
    throw usageError(`Unexpected argument: ${positionals[0]}`, "put the command after --");
  }
  const command = dash >= 0 ? argv.slice(dash + 1) : [];
  if (command.length === 0) {
    throw usageError(
      "Missing the command to run",
      "e.g. forgekit firewall --allow-domains github.com -- curl https://github.com",
    );
  }
  if (command[0] === "") {
    throw usageError("The command after -- is empty", "e.g. -- curl https://github.com");
  }
  // Checked here, before the log directory and the session exist.
  if (findCommand(command[0]) === null) {
    // A path names one file: say what is wrong with it.
    let what = "command not found";
    let hint = "check the command name and PATH";
    // A file in this directory: the shell would not find it on PATH either.
    if (!command[0].includes("/") && isFile(command[0])) {
      hint = `to run the file in this directory, write ./${command[0]}`;
    }
    if (command[0].includes("/")) {
      try {
        const st = Deno.statSync(command[0]);
        if (st.isDirectory) [what, hint] = ["is a directory", "name a program file"];
        else [what, hint] = ["not executable", `chmod +x ${command[0]}`];
      } catch { /* not there */ }
    }
    throw usageError(`Cannot run ${command[0]}: ${what}`, hint);
  }
  const level = (values["log-level"] ?? "info") as typeof LEVELS[number];
  if (!LEVELS.includes(level)) {
    throw usageError(
      `--log-level must be one of ${LEVELS.join(", ")} (got: ${level})`,
      "e.g. --log-level debug",
    );
  }

  const allow = checkDomains((values["allow-domains"] ?? []).flatMap(splitList), "--allow-domains");
  for (const file of values["allow-domains-file"] ?? []) {
    let text: string;
    try {
      text = Deno.readTextFileSync(file);
    } catch (err) {
      throw usageError(
        `Cannot read --allow-domains-file ${file}: ${fsProblem(err)}`,
        "check the path",
      );
    }
    allow.push(...checkDomains(splitDomainText(text), `--allow-domains-file ${file}`));
  }
  const block = checkDomains(
    (values["block-domains"] ?? []).flatMap(splitList),
    "--block-domains",
  );
  const noBump = checkDomains(
    (values["no-bump-domains"] ?? []).flatMap(splitList),
    "--no-bump-domains",
  );
  const urlList = (values["allow-urls"] ?? []).flatMap(splitList);
  if (urlList.length && !values["ssl-bump"]) {
    throw usageError(
      "--allow-urls needs --ssl-bump",
      "add --ssl-bump, or use --allow-domains for domain-level filtering",
    );
  }
  if (values["ssl-bump"] && allow.length === 0) {
    throw usageError(
      "--ssl-bump needs --allow-domains: with an empty allow list there is nothing to inspect",
      "e.g. --ssl-bump --allow-domains github.com",
    );
  }
  if (noBump.length && !values["ssl-bump"]) {
    throw usageError(
      "--no-bump-domains needs --ssl-bump: without it no domain is inspected",
      "add --ssl-bump, or drop --no-bump-domains",
    );
  }
  if ((values["upstream-ca"] ?? []).length && !values["ssl-bump"]) {
    throw usageError(
      "--upstream-ca needs --ssl-bump: without it forgekit opens no TLS connection of its own " +
        "(COMMAND verifies servers itself)",
      "add --ssl-bump, or drop --upstream-ca",
    );
  }
  if (values["log-bodies"] && !values["ssl-bump"]) {
    throw usageError(
      "--log-bodies needs --ssl-bump: without it forgekit sees no request or response, only " +
        "encrypted bytes",
      "add --ssl-bump, or drop --log-bodies",
    );
  }
  // Spliced only where allowed: an entry must name at least one allowed host.
  for (const d of noBump) {
    if (!allow.some((a) => domainsOverlap(a, d))) {
      throw usageError(
        `--no-bump-domains: ${d} is not an allowed domain, so there is nothing to splice`,
        `add it to --allow-domains too, or drop it`,
      );
    }
  }
  const patterns = values["ssl-bump"] ? parseUrlPatterns(urlList) : [];
  // A spliced host's URLs are never seen: its patterns could not be enforced.
  const spliced = splicedPattern(patterns, noBump);
  if (spliced) {
    throw usageError(
      `--allow-urls ${spliced.pattern.source} names a host that --no-bump-domains ${spliced.entry} ` +
        "splices, so its URLs could not be checked",
      "inspect that host (drop it from --no-bump-domains) or drop its patterns",
    );
  }
  // Such a pattern could never match, and its host would stay open at the domain level on 443.
  const unreachable = patterns.find((p) => !ALLOWED_PORTS.includes(p.port));
  if (unreachable) {
    throw usageError(
      `--allow-urls ${unreachable.source} names port ${unreachable.port}, which the firewall ` +
        `never connects to (only ${ALLOWED_PORTS.join(" and ")})`,
      "drop the port: https://HOST/PATH is port 443",
    );
  }
  // A pattern for a host the domain policy refuses could never match.
  for (const p of patterns) {
    const refused = unreachableHost(p, { allow, block });
    if (refused) {
      throw usageError(
        `--allow-urls ${p.source} names ${p.host}, but ${refused.why}, so it could never match`,
        refused.hint,
      );
    }
  }
  // Only forgekit's own TLS connections (with --ssl-bump) use them: DENO_CERT,
  // which may be set for other programs, is not read otherwise.
  const upstreamCaCerts: string[] = [];
  const denoCert = values["ssl-bump"] ? Deno.env.get("DENO_CERT") : undefined;
  for (
    const [option, f] of [
      ...(values["upstream-ca"] ?? []).map((f) => ["--upstream-ca", f]),
      ...(denoCert ? [["DENO_CERT", denoCert]] : []),
    ]
  ) {
    let pem: string;
    try {
      pem = Deno.readTextFileSync(f);
    } catch (err) {
      throw usageError(
        `Cannot read ${option} ${f}: ${fsProblem(err)}`,
        option === "DENO_CERT" ? "point DENO_CERT at a PEM file, or unset it" : "check the path",
      );
    }
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
      throw usageError(
        `${option} ${f} has no PEM certificate`,
        "give a file with -----BEGIN CERTIFICATE----- blocks",
      );
    }
    upstreamCaCerts.push(pem);
  }
  // The invoking environment's proxy (a corporate one), read and checked before anything starts.
  const upstream = proxyEnv();
  // So are the sandbox's tools: a run that cannot start leaves no log directory behind.
  if (values["no-sandbox"] !== true) checkSandboxTools();

  const info = (line: string) => {
    if (level === "debug" || level === "info") console.error(line);
  };
  const debug = level === "debug" ? (line: string) => console.error(line) : undefined;

  removeStaleSessions();
  const logDir = values["log-dir"] ?? makeLogDir();
  if (values["log-dir"] !== undefined) {
    try {
      Deno.mkdirSync(logDir, { recursive: true, mode: 0o700 });
    } catch (err) {
      if (err instanceof Deno.errors.AlreadyExists) {
        throw usageError(`--log-dir ${logDir} is not a directory`, "name a directory");
      }
      throw usageError(
        `Cannot create --log-dir ${logDir}: ${fsProblem(err)}`,
        "check the path and permissions",
      );
    }
  }
  let log: AccessLog;
  let bodyLog: BodyLog | undefined;
  let opening = "access log";
  try {
    log = new AccessLog(join(logDir, "access.log"), debug);
    opening = "bodies log";
    if (values["log-bodies"]) bodyLog = new BodyLog(join(logDir, "bodies.jsonl"));
  } catch (err) {
    throw usageError(
      `Cannot open the ${opening}: ${(err as Error).message}`,
      "remove it or choose another --log-dir",
    );
  }
  const session = createSession();
  let bump: BumpSession | null = null;
  let listener: ProxyListener | null = null;
  let serving: Promise<void> | null = null;
  const cleanup = async () => {
    listener?.close();
    await bump?.close().catch(() => {});
    session.remove();
  };
  // A signal while setting up ends the run before COMMAND starts, cleaned up.
  let interrupted: Deno.Signal | null = null;
  const onSignals = FORWARDED_SIGNALS.map((sig) => [sig, () => interrupted ??= sig] as const);
  for (const [sig, h] of onSignals) Deno.addSignalListener(sig, h);
  try {
    if (values["ssl-bump"]) {
      bump = await createBumpSession({
        sessionDir: session.dir,
        sessionId: session.id,
        allowDomains: allow,
        patterns,
        upstreamCaCerts,
        upstream,
        log: (e) => log.write(e),
        bodyLog,
        debug,
      });
    }
    if (interrupted) return signalExitCode(interrupted);
    const noSandbox = values["no-sandbox"] === true;
    const listen = async () => {
      listener = await listenProxy(
        noSandbox ? { hostname: "127.0.0.1", port: 0 } : { path: session.socketPath },
        bump !== null,
      );
      serving = serveProxy(listener, {
        policy: { allow, block },
        log,
        upstream,
        patterns,
        bump: bump && {
          splice: (host) => noBump.some((d) => domainMatches(d, host)),
          intercept: (c, h, p, hello) => bump!.intercept(c, h, p, hello),
          prepare: (h, p) => bump!.prepare(h, p),
        },
      });
      return listener;
    };
    const bundleInSandbox = "/etc/ssl/certs/ca-certificates.crt";
    const caEnv = bump
      ? Object.fromEntries(
        [
          "SSL_CERT_FILE",
          "NODE_EXTRA_CA_CERTS",
          "REQUESTS_CA_BUNDLE",
          "CURL_CA_BUNDLE",
          "GIT_SSL_CAINFO",
          "DENO_CERT",
        ]
          .map((k) => [k, noSandbox ? bump!.trustBundlePath : bundleInSandbox]),
      )
      : {};
    const sudo = sudoUser(Deno.uid(), Deno.env.toObject());
    let code: number;
    if (noSandbox) {
      console.error(
        yellow(
          "warning: --no-sandbox: COMMAND runs without isolation; a program that ignores the proxy variables bypasses the filter",
        ),
      );
      const port = ((await listen()).addr as Deno.NetAddr).port;
      if (interrupted) return signalExitCode(interrupted);
      const child = new Deno.Command(command[0], {
        args: command.slice(1),
        env: { ...proxyVars(port), ...caEnv },
        stdin: "inherit",
        stdout: "inherit",
        stderr: "inherit",
      }).spawn();
      // COMMAND is in forgekit's process group: a Ctrl-C reaches it from the terminal.
      const stopForwarding = forwardSignals(child, { sharesTerminal: true });
      code = exitCodeOf(await child.status);
      stopForwarding();
    } else {
      const spec: SandboxSpec = {
        sessionDir: session.dir,
        socketPath: session.socketPath,
        command: command[0],
        args: command.slice(1),
        env: Deno.env.toObject(),
        // COMMAND's only: the forgekit inside runs as root, with root's HOME (and Deno cache).
        extraEnv: { ...(sudo ? sudoUserEnv(sudo.uid) : {}), ...caEnv },
        bindFiles: bump
          ? [
            { source: bump.trustBundlePath, target: bundleInSandbox },
            {
              source: bump.caCertPath,
              target: "/usr/local/share/ca-certificates/forgekit-session.crt",
            },
          ]
          : [],
        hideDirs: bump ? [bump.sslDir] : [],
        uid: sudo?.uid ?? null,
        gid: sudo?.gid ?? null,
      };
      code = await runSandboxed(spec, listen);
    }
    return code;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new CliError(`Cannot run ${command[0]}: command not found`, {
        hint: "check the command name and PATH",
        exitCode: 127,
        cause: err,
      });
    }
    throw err;
  } finally {
    await cleanup();
    await Promise.race([serving, new Promise((r) => setTimeout(r, 2000))]);
    log.close();
    bodyLog?.close();
    for (const [sig, h] of onSignals) Deno.removeSignalListener(sig, h);
    const summary = [log.blocked.summary(allow), log.failed.summary()].filter((s) => s !== null);
    if (summary.length && level !== "error") {
      // The summary points at the access log: it names it at every level that prints it.
      console.error(summary.join("\n"));
      console.error(`forgekit firewall: access log ${log.path}`);
    } else {
      info(`forgekit firewall: access log ${log.path}`);
    }
    if (bodyLog) info(`forgekit firewall: bodies log ${bodyLog.path}`);
  }
}
