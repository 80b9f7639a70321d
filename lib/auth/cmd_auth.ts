/** `forgekit auth`: doctor, explain, init and git-credential. */
import { basename, dirname, join } from "node:path";
import {
  bold,
  CliError,
  colorEnabled,
  dispatchSubcommand,
  findCommand,
  formatError,
  green,
  makeDirs,
  parseCommandArgs,
  printJson,
  red,
  usageError,
  wantsHelp,
  yellow,
} from "../cli/mod.ts";
import type { AuthEntry } from "./config.ts";
import {
  authFilePath,
  displayPath,
  loadAuthConfig,
  readableByOthers,
  setWarn,
} from "./config_file.ts";
import { hasUserinfo } from "./entry_use.ts";
import { entriesForUrl } from "./fetch.ts";
import { credentialEntries, readCredentialInput } from "./git_credential.ts";
import { resolveToken, staticToken, tokenSourceLabel, tokenWithoutIo } from "./token_source.ts";
import { INIT_TEMPLATE } from "./init_template.ts";
import { isLoopbackHost } from "./plain_http.ts";
import { parseUrlArgument, redactUrl, redactUrlText } from "./redact.ts";

/** Help text of `forgekit auth`. */
export const AUTH_HELP = `forgekit auth: inspect and use the credential file (~/.forgekit/auth.json)

Usage: forgekit auth <command> [options]

Commands:
  doctor              Validate the file, its permissions, and whether each token resolves
  explain URL         Show which entries would be tried for URL, in order (no network)
  init                Write a starting file with mode 600 (never overwrites)
  git-credential OP   A git credential helper (OP: get, store, erase)

Options (every command):
  --auth-file PATH    Use this file (default: $FORGEKIT_AUTH_FILE or ~/.forgekit/auth.json)
  --json              doctor and explain: print JSON
  -h, --help          Show help

Examples:
  forgekit auth init
  forgekit auth doctor
  forgekit auth explain https://api.github.com/repos/o/r
  git config --global credential.helper '!forgekit auth git-credential'`;

const DOCTOR_HELP = `forgekit auth doctor: validate auth.json and check that its entries are usable

Usage: forgekit auth doctor [--auth-file PATH] [--json]

Checks the JSON and every rule of the format, the file's permissions, whether
each entry's token resolves (tokens are shown masked), and whether the az CLI
is on PATH for cloud-cli entries. Exit 0 when usable, 2 otherwise.`;

const EXPLAIN_HELP =
  `forgekit auth explain: show which entries a request to URL would try (no network)

Usage: forgekit auth explain URL [--auth-file PATH] [--json]

Example:
  forgekit auth explain https://dev.azure.com/org/_apis/projects`;

const INIT_HELP = `forgekit auth init: write a commented starting auth.json (mode 600)

Usage: forgekit auth init [--auth-file PATH]

Never overwrites an existing file. Keys starting with "//" are comments.`;

const GIT_HELP = `forgekit auth git-credential: a git credential helper over auth.json

Usage: forgekit auth git-credential [--auth-file PATH] get|store|erase

Set it up with:
  git config --global credential.helper '!forgekit auth git-credential'

git writes protocol=, host= lines on stdin; for "get" forgekit answers
username= and password= from the first entry for that host whose token
resolves, and nothing for a host auth.json does not cover (git then asks
its next helper). On repohost's web host (bitbucket.org) it answers the user
name x-token-auth with the access token of a repohost bearer entry. "store",
"erase" and any other operation do nothing: auth.json stays the only source.`;

async function doctor(args: string[]): Promise<number> {
  if (wantsHelp(args)) return help(DOCTOR_HELP);
  const { values, positionals } = parseCommandArgs("forgekit auth doctor", args, {
    "auth-file": { type: "string" },
    json: { type: "boolean" },
  });
  noArguments("doctor", positionals);
  const path = authFilePath(values["auth-file"]);
  const shown = displayPath(path);
  const lines: string[] = [];
  const warnings: string[] = [];
  const prev = setWarn((w) => warnings.push(w.replace(/^warning: /, "")));
  let config;
  try {
    config = await loadAuthConfig(values["auth-file"]);
    if (config === null) {
      throw usageError(
        `No auth file at ${shown}: every request is unauthenticated`,
        "run: forgekit auth init",
      );
    }
  } catch (err) {
    // A script reading --json gets a report for a missing or broken file too.
    if (values.json && err instanceof CliError) {
      printJson({
        file: path,
        valid: false,
        usable: false,
        error: formatError(err).replace(/^error: /, ""),
        warnings,
        entries: [],
      });
    }
    throw err;
  } finally {
    setWarn(prev);
  }
  const info = await Deno.stat(path);
  if (readableByOthers(info) && !warnings.length) {
    warnings.push(`${shown} is readable by other users (run: chmod 600 ${shown})`);
  }
  const report: {
    index: number;
    provider: string;
    auth: string;
    hosts: string[];
    ok: boolean;
    detail: string;
  }[] = [];
  const hasAz = findCommand("az") !== null;
  for (const e of config.entries) {
    let ok = true;
    let detail: string;
    if (e.auth === "cloud-cli") {
      ok = hasAz;
      detail = hasAz
        ? "az CLI found on PATH"
        : "az not found on PATH (install the Azure CLI and run: az login)";
    } else if (e.auth === "cloud-ad") {
      ok = !!Deno.env.get(e.client_secret_env!);
      detail = ok
        ? `secret $${e.client_secret_env} is set`
        : `$${e.client_secret_env} is not set (entry is skipped)`;
    } else {
      const t = staticToken(e);
      ok = t.token !== null;
      detail = t.token !== null ? `token ${t.source}` : `${t.reason} (entry is skipped)`;
    }
    if (
      e.provider === "repohost" && e.hosts.length > 0 && e.hosts.every((h) => h === "bitbucket.org")
    ) {
      warnings.push(
        `providers[${e.index}] lists only bitbucket.org, whose web host accepts no API token (list api.bitbucket.org)`,
      );
    }
    report.push({ index: e.index, provider: e.provider, auth: e.auth, hosts: e.hosts, ok, detail });
  }
  const usable = report.some((r) => r.ok) && !report.some((r) => r.auth === "cloud-cli" && !r.ok);
  if (values.json) {
    printJson({ file: path, valid: true, usable, warnings, entries: report });
  } else {
    const on = colorEnabled(Deno.stdout); // the report goes to stdout
    lines.push(
      `${bold(shown, on)}: valid, ${config.entries.length} ${
        config.entries.length === 1 ? "entry" : "entries"
      }`,
    );
    for (const r of report) {
      const mark = r.ok ? green("ok  ", on) : red("skip", on);
      lines.push(
        `  ${mark} providers[${r.index}] ${r.provider} ${r.auth} ${
          r.hosts.join(", ")
        }: ${r.detail}`,
      );
    }
    for (const w of warnings) lines.push(yellow(`warning: ${w}`, on));
    lines.push(usable ? "usable" : "not usable: no entry resolves a token");
    console.log(lines.join("\n"));
  }
  return usable ? 0 : 2;
}

async function explain(args: string[]): Promise<number> {
  if (wantsHelp(args)) return help(EXPLAIN_HELP);
  const { values, positionals } = parseCommandArgs("forgekit auth explain", args, {
    "auth-file": { type: "string" },
    json: { type: "boolean" },
  });
  if (positionals.length !== 1) {
    throw usageError("Expected one URL", "run: forgekit auth explain URL");
  }
  let url: URL;
  try {
    url = parseUrlArgument(positionals[0]);
  } catch (err) {
    throw usageError(
      `Not a URL (got: ${JSON.stringify(redactUrlText(positionals[0]))})`,
      "e.g. https://api.github.com/user",
      err,
    );
  }
  const config = await loadAuthConfig(values["auth-file"]);
  const { entries, notUsed } = entriesForUrl(config, url);
  let skipped = 0;
  const tries = entries.map((e) => {
    // As fetch decides: an entry without a token to send is skipped.
    const t = tokenWithoutIo(e);
    if (t !== null && t.token === null) skipped++;
    const status = t === null
      ? tokenSourceLabel(e)
      : t.token !== null
      ? t.source
      : `skipped: ${t.reason}`;
    return { entry: `providers[${e.index}]`, provider: e.provider, auth: e.auth, token: status };
  });
  const then = hasUserinfo(url) ? "the URL's own user and password" : "unauthenticated";
  if (values.json) {
    printJson({
      url: redactUrl(url),
      file: config?.path ?? null,
      not_used: notUsed,
      attempts: tries,
      then,
    });
    return 0;
  }
  if (config === null) {
    console.log(
      `no auth file (${displayPath(authFilePath(values["auth-file"]))}): unauthenticated`,
    );
  } else if (notUsed !== null) {
    console.log(`auth.json's entries are not used: ${notUsed}`);
  }
  tries.forEach((t, i) => console.log(`${i + 1}. ${t.entry} ${t.provider} ${t.auth}: ${t.token}`));
  if (notUsed !== null) console.log(`1. ${then}`);
  else {
    // A skipped entry sends nothing, so it cannot answer 401/403.
    const when = config === null
      ? "no auth file"
      : tries.length === 0
      ? "no entry matches"
      : skipped === tries.length
      ? "no entry above has a token to send"
      : "when every entry above answers 401/403";
    console.log(`${tries.length + 1}. unauthenticated (${when})`);
  }
  return 0;
}

async function init(args: string[]): Promise<number> {
  if (wantsHelp(args)) return help(INIT_HELP);
  const { values, positionals } = parseCommandArgs("forgekit auth init", args, {
    "auth-file": { type: "string" },
  });
  noArguments("init", positionals);
  const path = authFilePath(values["auth-file"]);
  const shown = displayPath(path);
  const hint = "give --auth-file the path of a file, e.g. ~/.forgekit/auth.json";
  if (path.endsWith("/")) throw usageError(`${shown} is a directory path`, hint);
  const existing = await Deno.lstat(path).catch(() => null);
  if (existing?.isDirectory) throw usageError(`${shown} is a directory`, hint);
  if (existing) {
    throw new CliError(`${shown} already exists; not overwriting it`, {
      hint: "edit it, or check it with: forgekit auth doctor",
    });
  }
  const dir = dirname(path);
  let made: string | null;
  try {
    made = await makeDirs(dir, { mode: 0o700 });
  } catch (err) {
    throw usageError(`Cannot create ${displayPath(dir)}`, "check --auth-file", err);
  }
  // Written whole to a temporary file, then linked into place: link() never
  // overwrites, so a file that appeared meanwhile is kept and nothing half-written is left.
  const tmp = join(dir, `.${basename(path)}.forgekit-${crypto.randomUUID().slice(0, 8)}.tmp`);
  try {
    await Deno.writeTextFile(tmp, INIT_TEMPLATE, { createNew: true, mode: 0o600 });
    await Deno.chmod(tmp, 0o600);
    await Deno.link(tmp, path);
  } catch (err) {
    if (made) await Deno.remove(made, { recursive: true }).catch(() => {});
    if (err instanceof Deno.errors.AlreadyExists && (await Deno.lstat(path).catch(() => null))) {
      throw new CliError(`${shown} already exists; not overwriting it`, {
        hint: "edit it, or check it with: forgekit auth doctor",
      });
    }
    throw new CliError(`Cannot write ${shown}`, { cause: err });
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
  console.log(`wrote ${shown} (mode 600); set GH_TOKEN, then run: forgekit auth doctor`);
  return 0;
}

async function gitCredential(args: string[]): Promise<number> {
  if (wantsHelp(args)) return help(GIT_HELP);
  const { values, positionals } = parseCommandArgs("forgekit auth git-credential", args, {
    "auth-file": { type: "string" },
  });
  const op = positionals[0];
  noArguments("git-credential", positionals.slice(1));
  if (op === undefined || op === "") {
    throw usageError("Missing the git-credential operation", "use get, store or erase");
  }
  const input = await readCredentialInput(Deno.stdin.readable);
  // store and erase do nothing (auth.json stays the only source), and the
  // protocol asks a helper to ignore operations it does not know.
  if (op !== "get") return 0;
  const host = input.get("host");
  const protocol = input.get("protocol");
  if (!host || (protocol !== "https" && protocol !== "http")) return 0;
  // Tokens never travel without TLS, except to this machine.
  if (protocol === "http" && !isLoopbackHost(host)) return 0;
  const config = await loadAuthConfig(values["auth-file"]);
  if (!config) return 0;
  for (const { entry, username } of credentialEntries(config, host)) {
    const got = await resolveToken(entry, (u, i) => fetch(u, i));
    if (got.token === null) continue;
    console.log(`username=${username}\npassword=${got.token}\n`);
    return 0;
  }
  return 0;
}

function noArguments(command: string, positionals: string[]): void {
  if (positionals.length) {
    throw usageError(
      `Unexpected argument: ${redactUrlText(positionals[0])}`,
      `run: forgekit auth ${command} --help`,
    );
  }
}

function help(text: string): number {
  console.log(text);
  return 0;
}

/** Runs `forgekit auth …`. */
export function runAuth(args: string[]): Promise<number> {
  return dispatchSubcommand("forgekit auth", AUTH_HELP, args, {
    doctor,
    explain,
    init,
    "git-credential": gitCredential,
  });
}

/** Entries shown by `explain`, exported for tests. */
export type { AuthEntry };
