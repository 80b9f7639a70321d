/** `forgekit stack`: the Stacks API client, through lib/auth's fetch wrapper. */
import { type AuthEvent, authFetch, parseUrlArgument, redactUrlText } from "../auth/mod.ts";
import {
  bold,
  CliError,
  colorEnabled,
  dim,
  dispatchSubcommand,
  parseCommandArgs,
  printable,
  printJson,
  usageError,
  wantsHelp,
} from "../cli/mod.ts";
import { errorDetails } from "./error_details.ts";
import { nextLink, onApiOrigin } from "./link_header.ts";

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
  --timeout SECS      Give up on a request not answered within SECS (default 60)
  --json              Print the API's JSON (view adds each pull request's title;
                      unstack prints null for a dissolved stack)
  -h, --help          Show help

Examples:
  forgekit stack create --repo octo/app 12 13 14
  forgekit stack view 3 --repo octo/app --api-url http://127.0.0.1:8080
  forgekit stack list --repo octo/app --json`;

const COMMON = {
  repo: { type: "string" },
  "api-url": { type: "string" },
  "auth-file": { type: "string" },
  timeout: { type: "string" },
  json: { type: "boolean" },
} as const;

/** Seconds a request may take, headers and body, unless --timeout says otherwise. */
const DEFAULT_TIMEOUT_SECONDS = 60;

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

/** The most a response may hold: far more than any API answer (a page of 100 stacks). */
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/** How many pull requests `view` asks for at once: GitHub asks for no concurrency at all. */
const TITLE_REQUESTS_AT_ONCE = 8;

const NOT_AN_API =
  "check --api-url: it must be the API base, e.g. https://api.github.com or https://HOST/api/v3";

/** What a call gave back: the parsed JSON (null for 204) and the response headers. */
interface Reply {
  json: unknown;
  headers: Headers;
}

/**
 * What authFetch tried for one request (its `onEvent` reports). A token the
 * server refuses (401/403) is followed by a request without one, whose
 * answer is all the caller gets; these say what came before it.
 */
class Attempts {
  /** Each refused token's entry and status: `providers[0] (codehost bearer) got 401 Unauthorized`. */
  readonly refused: string[] = [];
  /** Each matching entry that had no token to send, and why. */
  readonly skipped: string[] = [];
  /** Why auth.json's matching entries were not used at all (plain http:// beyond loopback). */
  notUsed: string | null = null;
  /** Whether the last request went without a token. */
  unauthenticated = false;

  readonly add = (event: AuthEvent): void => {
    if (event.kind === "not-used") this.notUsed = event.reason;
    else if (event.kind === "skipped") {
      this.skipped.push(`${event.entry} has no token: ${event.reason}`);
    } else {
      this.unauthenticated = event.entry === null;
      if (event.entry !== null && (event.status === 401 || event.status === 403)) {
        this.refused.push(`${event.entry} got ${event.status} ${event.statusText}`);
      }
    }
  };

  /** Why no token went with the request, as the end of a sentence. */
  whyNoToken(host: string): string {
    if (this.notUsed !== null) {
      return `auth.json's entries for ${host} are not used: ${this.notUsed}`;
    }
    if (this.skipped.length) return this.skipped.join("; ");
    return `auth.json has no entry for ${host}`;
  }
}

/** When a rate-limited answer says to try again, or null when it is no rate limit. */
function rateLimitRetry(res: Response): string | null {
  if (res.status !== 403 && res.status !== 429) return null;
  const retryAfter = res.headers.get("retry-after")?.trim();
  const remaining = res.headers.get("x-ratelimit-remaining")?.trim();
  if (retryAfter === undefined && remaining !== "0") return null;
  if (retryAfter !== undefined && /^\d+$/.test(retryAfter)) return `in ${Number(retryAfter)} s`;
  const reset = res.headers.get("x-ratelimit-reset")?.trim();
  if (reset !== undefined && /^\d{1,12}$/.test(reset)) {
    return `after ${new Date(Number(reset) * 1000).toISOString().replace(/\.\d+Z$/, "Z")}`;
  }
  return "later";
}

/**
 * Reads a response's body as text, at most {@linkcode MAX_RESPONSE_BYTES}:
 * a server that sends without end is stopped, not held in memory.
 */
async function readBody(res: Response, what: string): Promise<string> {
  const tooLarge = () =>
    new CliError(`${what} returned more than ${MAX_RESPONSE_BYTES >> 20} MiB`, {
      hint: NOT_AN_API,
    });
  if (Number(res.headers.get("content-length")) > MAX_RESPONSE_BYTES) {
    await res.body?.cancel();
    throw tooLarge();
  }
  if (res.body === null) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body) { // leaving the loop early cancels the body
    size += chunk.length;
    if (size > MAX_RESPONSE_BYTES) throw tooLarge();
    chunks.push(chunk);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new TextDecoder().decode(all);
}

/** Calls `fn` on each item, at most `limit` at a time; stops starting new calls after a failure. */
async function mapAtMost<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>) {
  const out: R[] = new Array(items.length);
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i]);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

class Client {
  /** Whether the refused-token warning was printed (once a run). */
  #warned = false;

  constructor(
    readonly base: string,
    private options: { authFile?: string; timeoutMs: number; repo: string },
  ) {}

  /** The URL of `target`: a path under the API base, or already a full URL (a next page). */
  url(target: string): string {
    return target.startsWith("/") ? `${this.base}${target}` : target;
  }

  async call(method: string, target: string, body?: unknown): Promise<Reply> {
    const url = this.url(target);
    const path = url.startsWith(this.base) ? url.slice(this.base.length) : url;
    const signal = AbortSignal.timeout(this.options.timeoutMs);
    const attempts = new Attempts();
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
        signal,
      }, { authFile: this.options.authFile, onEvent: attempts.add });
      text = await readBody(res, `${method} ${url}`);
    } catch (err) {
      if (signal.aborted) {
        const secs = this.options.timeoutMs / 1000;
        throw new CliError(
          `${this.base} did not answer ${method} ${path} within ${secs} s`,
          {
            hint: "the server may be overloaded or stuck: try again later, or raise --timeout",
            cause: err,
          },
        );
      }
      if (err instanceof CliError) throw err;
      throw new CliError(`Cannot reach ${this.base}: ${method} ${path} failed`, {
        hint: "is the server running? check --api-url or FORGEKIT_API_URL, and the network",
        cause: err,
      });
    }
    if (res.status === 204) return { json: null, headers: res.headers };
    let json: unknown = undefined;
    try {
      json = JSON.parse(text);
    } catch { /* not JSON */ }
    if (!res.ok) throw this.failure(method, url, res, json, attempts);
    if (attempts.unauthenticated && attempts.refused.length && !this.#warned) {
      // A public repository answers without the token: say that it was refused.
      this.#warned = true;
      console.error(printable(
        `warning: auth.json's token for ${new URL(url).hostname} was refused (${
          attempts.refused.join(", ")
        }); answered without it (check the token; run: forgekit auth explain ${url})`,
      ));
    }
    if (json === undefined) {
      throw new CliError(`${method} ${url} returned ${res.status} with a body that is not JSON`, {
        hint: NOT_AN_API,
      });
    }
    return { json, headers: res.headers };
  }

  /**
   * The error for an API error status: the server's message, and what to
   * check. A token the server refused is named: the answer shown is then to
   * the request authFetch made without one, which alone would mislead (a
   * private repository's 404, a write's "Requires authentication").
   */
  failure(method: string, url: string, res: Response, json: unknown, attempts: Attempts) {
    const status = `${res.status} ${res.statusText}`.trim();
    if (!isObject(json) && res.status < 500) {
      return new CliError(
        `${method} ${url} returned ${status} with a body that is not the API's JSON`,
        { hint: NOT_AN_API },
      );
    }
    const j = isObject(json) ? json : {};
    const details = errorDetails(j.errors);
    const message = typeof j.message === "string" && j.message.trim()
      ? `${j.message.trim()}${details ? `: ${details}` : ""}`
      : status;
    const host = new URL(url).hostname;
    const explain = `run: forgekit auth explain ${url}`;
    const retry = rateLimitRetry(res);
    if (retry !== null) {
      return new CliError(message, {
        hint: `${method} ${url} returned ${res.status}; rate limited: try again ${retry}`,
      });
    }
    if (attempts.unauthenticated && attempts.refused.length && res.status < 500) {
      return new CliError(
        `auth.json's token for ${host} was refused: ${
          attempts.refused.join(", ")
        }; without it: ${message}`,
        {
          hint: `${method} ${url} returned ${res.status} without a token; check the token: ` +
            `it may have expired, or lack access to ${this.options.repo}; ${explain}`,
        },
      );
    }
    const where = `${method} ${url} returned ${res.status}`;
    let advice = "";
    if (res.status === 401 || res.status === 403) {
      advice = attempts.unauthenticated
        ? `; check the token: none was sent, as ${attempts.whyNoToken(host)}; ${explain}`
        : `; check the token: the codehost entry for ${host} in auth.json; ${explain}`;
    } else if (res.status === 404) {
      const numbered = /\/(stacks|pulls)\/\d+(\/|$)/.test(new URL(url).pathname);
      advice = `; check --repo${
        numbered ? " and the number" : ""
      }, and that the repository allows stacked pull requests`;
      if (attempts.unauthenticated) {
        advice += `; a private repository is 404 without a token, and none was sent: ${
          attempts.whyNoToken(host)
        }`;
      }
    } else if (res.status >= 500) {
      advice = "; the server failed: try again, or check its logs";
    }
    return new CliError(message, { hint: `${where}${advice}` });
  }

  /** A call whose answer must pass `check`, else a clear error naming what was expected. */
  async expect<T>(
    what: string,
    check: (v: unknown) => v is T,
    req: { method: string; path: string; body?: unknown },
  ): Promise<T> {
    return (await this.expectReply(what, check, req)).value;
  }

  /** {@linkcode Client.expect}, with the response headers (a listing's `Link`). */
  async expectReply<T>(
    what: string,
    check: (v: unknown) => v is T,
    req: { method: string; path: string; body?: unknown },
  ): Promise<{ value: T; headers: Headers }> {
    const { json, headers } = await this.call(req.method, req.path, req.body);
    if (!check(json)) {
      throw new CliError(`${req.method} ${this.url(req.path)} did not return ${what}`, {
        hint: NOT_AN_API,
      });
    }
    return { value: json, headers };
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
    parsed = parseUrlArgument(apiUrl);
  } catch (err) {
    throw usageError(
      `${option} is not a URL (got: ${JSON.stringify(redactUrlText(apiUrl))})`,
      example,
      err,
    );
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
  if (/[?#]/.test(parsed.href)) {
    // Paths are appended to the base: a query or fragment would swallow them.
    throw usageError(
      `${option} must not have a query or fragment (got: ${JSON.stringify(apiUrl)})`,
      example,
    );
  }
  const timeout = values.timeout as string | undefined;
  const seconds = timeout === undefined ? DEFAULT_TIMEOUT_SECONDS : Number(timeout);
  if (
    timeout !== undefined &&
    (!/^\d+(\.\d+)?$/.test(timeout) || !(seconds >= 0.001) || seconds > 86_400)
  ) {
    // Below a millisecond, every request would time out at once ("within 0 s").
    throw usageError(
      `--timeout must be a number of seconds from 0.001 to 86400 (got: ${timeout})`,
      `e.g. --timeout ${DEFAULT_TIMEOUT_SECONDS}`,
    );
  }
  return {
    values,
    positionals,
    client: new Client(`${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`, {
      authFile: values["auth-file"] as string | undefined,
      timeoutMs: Math.round(seconds * 1000),
      repo,
    }),
    repoPath: `/repos/${repo}`,
    json: values.json === true,
  };
}

// What each command's numbers look like, for its usage errors.
const VIEW_EXAMPLE = "forgekit stack view 3 --repo o/r";
const CREATE_EXAMPLE = "forgekit stack create 12 13 14 --repo o/r (bottom to top)";
const ADD_EXAMPLE = "forgekit stack add 3 15 16 --repo o/r (stack 3 gets #15 and #16 on top)";
const UNSTACK_EXAMPLE = "forgekit stack unstack 3 --repo o/r";

function numbers(positionals: string[], what: string, example: string): number[] {
  return positionals.map((p) => {
    const n = Number(p.replace(/^#/, ""));
    if (!/^#?\d+$/.test(p) || !Number.isSafeInteger(n) || n < 1) {
      throw usageError(
        `${what} must be a positive whole number (got: ${JSON.stringify(p)})`,
        `e.g. ${example}`,
      );
    }
    return n;
  });
}

function noArguments(command: string, positionals: string[]): void {
  if (positionals.length) {
    throw usageError(
      `Unexpected argument: ${redactUrlText(positionals[0])}`,
      `run: forgekit stack ${command} --help`,
    );
  }
}

/** One line for a stack; the server's text (the base branch) is made {@linkcode printable}. */
function summary(s: StackJson): string {
  const prs = s.pull_requests.map((p) => `#${p.number}`).join(" ");
  const n = s.pull_requests.length;
  return `#${s.number}  ${s.open ? "open  " : "closed"}  on ${printable(s.base.ref)}  ${n} PR${
    n === 1 ? "" : "s"
  }: ${prs}`;
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
    ? `?pull_request=${numbers([pr], "--pull-request", "--pull-request 12")[0]}&per_page=100`
    : "?per_page=100";
  // Follow rel="next" while the server sends Link headers; without them, read
  // pages until a short one. A stack created meanwhile pushes the others one
  // place down, so a page may repeat the last of the one before: repeats are
  // dropped. A page of nothing new (a server ignoring `page`) ends the list.
  const stacks: StackJson[] = [];
  const seen = new Set<number>();
  const asked = new Set<string>();
  let url = client.url(`${repoPath}/stacks${q}&page=1`);
  for (let page = 1;; page++) {
    asked.add(url);
    const { value: batch, headers } = await client.expectReply("stacks", isStackList, {
      method: "GET",
      path: url,
    });
    const fresh = batch.filter((s) => !seen.has(s.number));
    for (const s of fresh) seen.add(s.number);
    stacks.push(...fresh);
    if (fresh.length === 0) break;
    const link = headers.get("link");
    if (link === null) {
      if (batch.length < 100) break;
      url = client.url(`${repoPath}/stacks${q}&page=${page + 1}`);
    } else {
      const next = nextLink(link);
      if (next === null) break;
      try {
        url = onApiOrigin(next, client.base);
      } catch (err) {
        throw new CliError(`GET ${url} returned a Link header the client cannot follow`, {
          hint: NOT_AN_API,
          cause: err,
        });
      }
    }
    if (asked.has(url)) break;
  }
  if (json) printJson(stacks);
  else if (stacks.length === 0) console.log("no stacks");
  else for (const s of stacks) console.log(summary(s));
  return 0;
}

async function view(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack view", args);
  if (positionals.length !== 1) {
    throw usageError("Expected one stack number", `e.g. ${VIEW_EXAMPLE}`);
  }
  const n = numbers(positionals, "The stack number", VIEW_EXAMPLE)[0];
  const s = await client.expect("a stack", isStack, {
    method: "GET",
    path: `${repoPath}/stacks/${n}`,
  });
  const titles = await mapAtMost(
    s.pull_requests,
    TITLE_REQUESTS_AT_ONCE,
    async (p) =>
      (await client.expect("a pull request", isPull, {
        method: "GET",
        path: `${repoPath}/pulls/${p.number}`,
      })).title,
  );
  if (json) {
    printJson({ ...s, pull_requests: s.pull_requests.map((p, i) => ({ ...p, title: titles[i] })) });
    return 0;
  }
  const on = colorEnabled(Deno.stdout); // drawn on stdout
  const lines = [
    `${bold(`stack #${s.number}`, on)} ${
      s.open ? "open" : "closed"
    }, ${s.pull_requests.length} pull request${s.pull_requests.length === 1 ? "" : "s"}`,
    printable(s.base.ref),
  ];
  s.pull_requests.forEach((p, i) => {
    lines.push(
      `${"   ".repeat(i)}└─ #${p.number} [${printable(stateOf(p))}] ${printable(titles[i])} ${
        dim(`(${printable(p.head.ref)})`, on)
      }`,
    );
  });
  console.log(lines.join("\n"));
  return 0;
}

async function create(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack create", args);
  if (positionals.length === 0) {
    throw usageError("Missing the pull requests to stack", `e.g. ${CREATE_EXAMPLE}`);
  }
  const prs = numbers(positionals, "A pull request number", CREATE_EXAMPLE);
  // The server's rule, said before any request.
  if (prs.length === 1) {
    throw usageError(
      `A stack needs at least two pull requests (got one: #${prs[0]})`,
      `e.g. ${CREATE_EXAMPLE}`,
    );
  }
  const s = await client.expect("a stack", isStack, {
    method: "POST",
    path: `${repoPath}/stacks`,
    body: { pull_requests: prs },
  });
  if (json) printJson(s);
  else console.log(`created stack ${summary(s)}`);
  return 0;
}

async function add(args: string[]): Promise<number> {
  const { client, repoPath, json, positionals } = setup("forgekit stack add", args);
  const [n, ...prs] = numbers(positionals, "A stack or pull request number", ADD_EXAMPLE);
  if (n === undefined || prs.length === 0) {
    throw usageError("Expected a stack number and pull requests", `e.g. ${ADD_EXAMPLE}`);
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
    throw usageError("Expected one stack number", `e.g. ${UNSTACK_EXAMPLE}`);
  }
  const n = numbers(positionals, "The stack number", UNSTACK_EXAMPLE)[0];
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
