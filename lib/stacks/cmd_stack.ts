/** `forgekit stack`: the Stacks API client, through lib/auth's fetch wrapper. */
import { authFetch } from "../auth/mod.ts";
import {
  bold,
  CliError,
  dim,
  dispatchSubcommand,
  parseCommandArgs,
  printJson,
  usageError,
  wantsHelp,
} from "../cli/mod.ts";

const HELP = `forgekit stack: list, view, create, extend and dissolve pull-request stacks

Usage: forgekit stack <command> --repo OWNER/REPO [options]

Commands:
  list                     List stacks, newest first (--pull-request N to find N's stack)
  view NUMBER              Draw a stack bottom to top: number, title, state, branch
  create PR PR [PR…]       Make a stack of pull requests, bottom to top
  add NUMBER PR [PR…]      Put pull requests on top of a stack
  unstack NUMBER           Dissolve a stack (merged pull requests stay)

Options:
  --repo OWNER/REPO   The repository (required)
  --api-url URL       API base (default $FORGEKIT_API_URL or https://api.github.com)
  --auth-file PATH    Credentials file (default ~/.forgekit/auth.json); the codehost
                      entry for the API host authenticates
  --json              Print the API's JSON
  -h, --help          Show help

Examples:
  forgekit stack create --repo octo/app 12 13 14
  forgekit stack view 3 --repo octo/app --api-url http://127.0.0.1:8080
  forgekit stack list --repo octo/app --json`;

const COMMON = {
  repo: { type: "string" },
  "api-url": { type: "string" },
  "auth-file": { type: "string" },
  json: { type: "boolean" },
} as const;

interface StackJson {
  number: number;
  open: boolean;
  base: { ref: string };
  pull_requests: {
    number: number;
    state: string;
    draft: boolean;
    merged_at: string | null;
    head: { ref: string };
  }[];
}

/** What to do about an API error status, after the server's own message. */
function statusAdvice(status: number, url: string): string {
  if (status === 401 || status === 403) {
    return `; check the token: the codehost entry for ${
      new URL(url).hostname
    } in auth.json (run: forgekit auth explain ${url})`;
  }
  if (status === 404) {
    return "; check --repo and the number, and that the repository allows stacked pull requests";
  }
  if (status >= 500) return "; the server failed: try again, or check its logs";
  return "";
}

const NOT_AN_API =
  "check --api-url: it must be the API base, e.g. https://api.github.com or https://HOST/api/v3";

class Client {
  constructor(private base: string, private authFile?: string) {}
  async call(method: string, path: string, body?: unknown): Promise<unknown> {
    const url = `${this.base}${path}`;
    let res: Response;
    let text: string;
    try {
      res = await authFetch(url, {
        method,
        headers: {
          accept: "application/vnd.github+json",
          "x-github-api-version": "2022-11-28",
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
        },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      }, { authFile: this.authFile });
      text = await res.text();
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError(`Cannot reach ${this.base}: ${method} ${path} failed`, {
        hint: "is the server running? check --api-url or FORGEKIT_API_URL, and the network",
        cause: err,
      });
    }
    if (res.status === 204) return null;
    let json: unknown = undefined;
    try {
      json = JSON.parse(text);
    } catch { /* not JSON */ }
    if (!res.ok) {
      const j = json as
        | {
          message?: unknown;
          errors?: { message?: string; code?: string; field?: string }[];
        }
        | null
        | undefined;
      const errors = Array.isArray(j?.errors) ? j.errors : [];
      const details = errors.map((e) => e?.message ?? `${e?.field} ${e?.code}`).join("; ");
      const msg = typeof j?.message === "string" && j.message
        ? `${j.message}${details ? `: ${details}` : ""}`
        : `${res.status} ${res.statusText}`;
      throw new CliError(msg, {
        hint: `${method} ${url} returned ${res.status}${statusAdvice(res.status, url)}`,
      });
    }
    if (json === undefined) {
      throw new CliError(`${method} ${url} returned ${res.status} with a body that is not JSON`, {
        hint: NOT_AN_API,
      });
    }
    return json;
  }

  /** A call whose answer must pass `check`, else a clear error naming what was expected. */
  async expect<T>(
    what: string,
    check: (v: unknown) => v is T,
    req: { method: string; path: string; body?: unknown },
  ): Promise<T> {
    const v = await this.call(req.method, req.path, req.body);
    if (!check(v)) {
      throw new CliError(`${req.method} ${this.base}${req.path} did not return ${what}`, {
        hint: NOT_AN_API,
      });
    }
    return v;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isStack(v: unknown): v is StackJson {
  return isObject(v) && typeof v.number === "number" && typeof v.open === "boolean" &&
    isObject(v.base) && typeof v.base.ref === "string" && Array.isArray(v.pull_requests) &&
    v.pull_requests.every((p) =>
      isObject(p) && typeof p.number === "number" && typeof p.state === "string" &&
      isObject(p.head) && typeof p.head.ref === "string"
    );
}

function isStackList(v: unknown): v is StackJson[] {
  return Array.isArray(v) && v.every(isStack);
}

function isPull(v: unknown): v is { title: string } {
  return isObject(v) && typeof v.title === "string";
}

const OWNER_REPO = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/;

function setup(command: string, args: string[], extra: Record<string, { type: "string" }> = {}) {
  const { values, positionals } = parseCommandArgs(command, args, { ...COMMON, ...extra });
  const repo = values.repo as string | undefined;
  if (!repo || !OWNER_REPO.test(repo) || repo.split("/").some((p) => p === "." || p === "..")) {
    throw usageError(
      repo ? `--repo must be OWNER/REPO (got: ${repo})` : "Missing --repo OWNER/REPO",
      "e.g. --repo octo/app",
    );
  }
  const given = values["api-url"] as string | undefined;
  const option = given !== undefined ? "--api-url" : "FORGEKIT_API_URL";
  const apiUrl = (given ?? Deno.env.get("FORGEKIT_API_URL") ?? "https://api.github.com")
    .replace(/\/+$/, "");
  const example = `e.g. ${option}${
    option === "--api-url" ? " " : "="
  }https://ghe.example.com/api/v3`;
  let parsed: URL;
  try {
    parsed = new URL(apiUrl);
  } catch (err) {
    throw usageError(`${option} is not a URL (got: ${JSON.stringify(apiUrl)})`, example, err);
  }
  if (parsed.username || parsed.password) {
    // Never echoed: the password is likely a token.
    throw usageError(
      `${option} must not contain a user name or password`,
      `put the token in auth.json, in a codehost entry for ${parsed.hostname}`,
    );
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") {
    throw usageError(`${option} must be an https:// or http:// URL (got: ${apiUrl})`, example);
  }
  return {
    values,
    positionals,
    client: new Client(apiUrl, values["auth-file"] as string | undefined),
    repoPath: `/repos/${repo}`,
    json: values.json === true,
  };
}

function numbers(positionals: string[], what: string): number[] {
  return positionals.map((p) => {
    const n = Number(p.replace(/^#/, ""));
    if (!/^#?\d+$/.test(p) || !Number.isSafeInteger(n) || n < 1) {
      throw usageError(
        `${what} must be a positive whole number (got: ${JSON.stringify(p)})`,
        "e.g. 12 13 14",
      );
    }
    return n;
  });
}

function noArguments(command: string, positionals: string[]): void {
  if (positionals.length) {
    throw usageError(
      `Unexpected argument: ${positionals[0]}`,
      `run: forgekit stack ${command} --help`,
    );
  }
}

function summary(s: StackJson): string {
  const prs = s.pull_requests.map((p) => `#${p.number}`).join(" ");
  return `#${s.number}  ${
    s.open ? "open  " : "closed"
  }  on ${s.base.ref}  ${s.pull_requests.length} PRs: ${prs}`;
}

function stateOf(p: { state: string; draft: boolean; merged_at: string | null }): string {
  return p.merged_at ? "merged" : p.state === "open" && p.draft ? "draft" : p.state;
}

function withHelp(text: string, run: (args: string[]) => Promise<number>) {
  return (args: string[]) => {
    if (wantsHelp(args)) {
      console.log(text);
      return Promise.resolve(0);
    }
    return run(args);
  };
}

async function list(args: string[]): Promise<number> {
  const { client, repoPath, json, values, positionals } = setup("forgekit stack list", args, {
    "pull-request": { type: "string" },
  });
  noArguments("list", positionals);
  const pr = (values as Record<string, unknown>)["pull-request"] as string | undefined;
  const q = pr
    ? `?pull_request=${numbers([pr], "--pull-request")[0]}&per_page=100`
    : "?per_page=100";
  // The API gives at most 100 a page: read pages until one comes back short.
  // A page that repeats a stack (a server ignoring `page`) also ends it.
  const stacks: StackJson[] = [];
  const seen = new Set<number>();
  for (let page = 1;; page++) {
    const batch = await client.expect("stacks", isStackList, {
      method: "GET",
      path: `${repoPath}/stacks${q}&page=${page}`,
    });
    const fresh = batch.filter((s) => !seen.has(s.number));
    for (const s of fresh) seen.add(s.number);
    stacks.push(...fresh);
    if (batch.length < 100 || fresh.length < batch.length) break;
  }
  if (json) printJson(stacks);
  else if (stacks.length === 0) console.log("no stacks");
  else for (const s of stacks) console.log(summary(s));
  return 0;
}

async function view(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack view", args);
  if (positionals.length !== 1) {
    throw usageError("Expected one stack number", "e.g. forgekit stack view 3 --repo o/r");
  }
  const n = numbers(positionals, "The stack number")[0];
  const s = await client.expect("a stack", isStack, {
    method: "GET",
    path: `${repoPath}/stacks/${n}`,
  });
  const titles = await Promise.all(
    s.pull_requests.map(async (p) =>
      (await client.expect("a pull request", isPull, {
        method: "GET",
        path: `${repoPath}/pulls/${p.number}`,
      })).title
    ),
  );
  if (json) {
    printJson({ ...s, pull_requests: s.pull_requests.map((p, i) => ({ ...p, title: titles[i] })) });
    return 0;
  }
  const lines = [
    `${bold(`stack #${s.number}`)} ${
      s.open ? "open" : "closed"
    }, ${s.pull_requests.length} pull requests`,
    s.base.ref,
  ];
  s.pull_requests.forEach((p, i) => {
    lines.push(
      `${"   ".repeat(i)}└─ #${p.number} [${stateOf(p)}] ${titles[i]} ${dim(`(${p.head.ref})`)}`,
    );
  });
  console.log(lines.join("\n"));
  return 0;
}

async function create(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack create", args);
  if (positionals.length === 0) {
    throw usageError(
      "Missing the pull requests to stack",
      "e.g. forgekit stack create 12 13 14 --repo o/r (bottom to top)",
    );
  }
  const s = await client.expect("a stack", isStack, {
    method: "POST",
    path: `${repoPath}/stacks`,
    body: { pull_requests: numbers(positionals, "A pull request number") },
  });
  if (json) printJson(s);
  else console.log(`created stack ${summary(s)}`);
  return 0;
}

async function add(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack add", args);
  const [n, ...prs] = numbers(positionals, "A stack or pull request number");
  if (n === undefined || prs.length === 0) {
    throw usageError(
      "Expected a stack number and pull requests",
      "e.g. forgekit stack add 3 15 16 --repo o/r",
    );
  }
  const s = await client.expect("a stack", isStack, {
    method: "POST",
    path: `${repoPath}/stacks/${n}/add`,
    body: { pull_requests: prs },
  });
  if (json) printJson(s);
  else console.log(`extended stack ${summary(s)}`);
  return 0;
}

async function unstack(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack unstack", args);
  if (positionals.length !== 1) {
    throw usageError("Expected one stack number", "e.g. forgekit stack unstack 3 --repo o/r");
  }
  const n = numbers(positionals, "The stack number")[0];
  const s = await client.expect(
    "a stack",
    (v): v is StackJson | null => v === null || isStack(v),
    { method: "POST", path: `${repoPath}/stacks/${n}/unstack` },
  );
  if (json) printJson(s);
  else {console.log(
      s === null
        ? `stack #${n} dissolved`
        : `stack #${n} keeps its merged pull requests: ${summary(s)}`,
    );}
  return 0;
}

/** Runs `forgekit stack …`. */
export function runStack(args: string[]): Promise<number> {
  return dispatchSubcommand("forgekit stack", HELP, args, {
    list: withHelp(HELP, list),
    view: withHelp(HELP, view),
    create: withHelp(HELP, create),
    add: withHelp(HELP, add),
    unstack: withHelp(HELP, unstack),
  });
}
