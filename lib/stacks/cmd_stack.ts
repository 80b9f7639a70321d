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

class Client {
  constructor(private base: string, private authFile?: string) {}
  async call(method: string, path: string, body?: unknown): Promise<unknown> {
    const url = `${this.base}${path}`;
    let res: Response;
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
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError(`${method} ${url} failed`, {
        hint: "check --api-url and the network",
        cause: err,
      });
    }
    if (res.status === 204) return null;
    const text = await res.text();
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch { /* not JSON */ }
    if (!res.ok) {
      const j = json as {
        message?: string;
        errors?: { message?: string; code?: string; field?: string }[];
      } | null;
      const details = (j?.errors ?? []).map((e) => e.message ?? `${e.field} ${e.code}`).join("; ");
      const msg = j?.message
        ? `${j.message}${details ? `: ${details}` : ""}`
        : `${res.status} ${res.statusText}`;
      throw new CliError(msg, { hint: `${method} ${url} returned ${res.status}` });
    }
    return json;
  }
}

function setup(command: string, args: string[], extra: Record<string, { type: "string" }> = {}) {
  const { values, positionals } = parseCommandArgs(command, args, { ...COMMON, ...extra });
  const repo = values.repo as string | undefined;
  if (!repo || !/^[^/\s]+\/[^/\s]+$/.test(repo)) {
    throw usageError(
      repo ? `--repo must be OWNER/REPO (got: ${repo})` : "Missing --repo OWNER/REPO",
      "e.g. --repo octo/app",
    );
  }
  const apiUrl = ((values["api-url"] as string | undefined) ?? Deno.env.get("FORGEKIT_API_URL") ??
    "https://api.github.com")
    .replace(/\/+$/, "");
  try {
    new URL(apiUrl);
  } catch (err) {
    throw usageError(
      `--api-url is not a URL (got: ${apiUrl})`,
      "e.g. --api-url https://ghe.example.com/api/v3",
      err,
    );
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
    if (!Number.isInteger(n) || n < 1) {
      throw usageError(`${what} must be numbers (got: ${p})`, "e.g. 12 13 14");
    }
    return n;
  });
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
  const { client, repoPath, json, values } = setup("forgekit stack list", args, {
    "pull-request": { type: "string" },
  });
  const pr = (values as Record<string, unknown>)["pull-request"] as string | undefined;
  const q = pr
    ? `?pull_request=${numbers([pr], "--pull-request")[0]}&per_page=100`
    : "?per_page=100";
  const stacks = await client.call("GET", `${repoPath}/stacks${q}`) as StackJson[];
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
  const s = await client.call("GET", `${repoPath}/stacks/${n}`) as StackJson;
  const titles = await Promise.all(
    s.pull_requests.map(async (p) =>
      ((await client.call("GET", `${repoPath}/pulls/${p.number}`)) as { title: string }).title
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
  const s = await client.call("POST", `${repoPath}/stacks`, {
    pull_requests: numbers(positionals, "Pull requests"),
  }) as StackJson;
  if (json) printJson(s);
  else console.log(`created stack ${summary(s)}`);
  return 0;
}

async function add(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack add", args);
  const [n, ...prs] = numbers(positionals, "Arguments");
  if (n === undefined) {
    throw usageError(
      "Expected a stack number and pull requests",
      "e.g. forgekit stack add 3 15 16 --repo o/r",
    );
  }
  const s = await client.call("POST", `${repoPath}/stacks/${n}/add`, {
    pull_requests: prs,
  }) as StackJson;
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
  const s = await client.call("POST", `${repoPath}/stacks/${n}/unstack`) as StackJson | null;
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
