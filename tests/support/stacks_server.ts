/**
 * The stacks server as a real process for end-to-end tests: start and stop
 * it, make tokens, call its API, seed a database directly, and point the
 * `forgekit stack` client at it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { openSqliteStore } from "../../lib/stacks/mod.ts";
import { baseEnv, MAIN_TS, runForgekit } from "./cli.ts";

/** A running `forgekit stacks serve`. */
export interface StacksServer {
  url: string;
  child: Deno.ChildProcess;
  /** What the server has written on stderr so far (all of it once stopped). */
  stderr(): string;
  /** SIGTERM, and asserts that the server stopped cleanly. */
  stop(): Promise<void>;
}

/** Options of {@linkcode startStacksServer}. */
export interface StartOptions {
  /**
   * A command that runs the server as its trailing arguments, e.g.
   * `["unshare", "--mount", "sh", "-c", 'mount … && exec "$@"', "sh"]`.
   */
  wrap?: string[];
  /** Extra environment for the wrapper and the server. */
  env?: Record<string, string>;
  /**
   * Pass `--allow-private-hook-targets` (default true: the tests' webhook
   * receivers listen on loopback); false serves as a deployment does.
   */
  allowPrivateHookTargets?: boolean;
}

/**
 * Starts `forgekit stacks serve --db DB --port 0 EXTRA…` and waits for its
 * "listening" line.
 *
 * @example
 * ```ts
 * const s = await startStacksServer(db, ["--hook-backoff-ms", "100"]);
 * await fetch(`${s.url}/user`);
 * await s.stop();
 * ```
 */
export async function startStacksServer(
  db: string,
  extra: string[] = [],
  options: StartOptions = {},
): Promise<StacksServer> {
  const serverArgs = [
    Deno.execPath(),
    "run",
    "-A",
    "--quiet",
    MAIN_TS,
    "stacks",
    "serve",
    "--db",
    db,
    "--port",
    "0",
    ...(options.allowPrivateHookTargets === false ? [] : ["--allow-private-hook-targets"]),
    ...extra,
  ];
  const [cmd, ...args] = [...(options.wrap ?? []), ...serverArgs];
  const child = new Deno.Command(cmd, {
    args,
    env: { ...baseEnv(), ...options.env },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Read stderr all along: a server that logs much would otherwise block on a full pipe.
  let errText = "";
  const errDone = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) errText += chunk;
  })().catch(() => {});
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (!buf.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) {
      await child.status;
      await errDone;
      throw new Error(`server exited: ${buf}${errText}`);
    }
    buf += value;
  }
  reader.releaseLock();
  const m = /listening on (http:\/\/127\.0\.0\.1:\d+) \(db (.+)\)/.exec(buf);
  assert.ok(m, buf);
  assert.equal(m[2], db);
  return {
    url: m[1],
    child,
    stderr: () => errText,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      const status = await child.status;
      await child.stdout.cancel().catch(() => {});
      await errDone;
      assert.equal(status.code, 0, `SIGTERM stops the server cleanly; stderr: ${errText}`);
    },
  };
}

/** Makes a token for `user` with `forgekit stacks token create`. */
export async function createToken(db: string, user: string): Promise<string> {
  const r = await runForgekit(["stacks", "token", "create", "--user", user, "--db", db]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^fks_[0-9a-f]{60}\n$/);
  return r.stdout.trim();
}

/** What {@linkcode apiCaller}'s function gives back. */
export interface ApiReply {
  status: number;
  headers: Headers;
  // deno-lint-ignore no-explicit-any -- tests read the API's JSON freely
  json: any;
  ms: number;
}

/** A function that calls the API at `base` as the owner of `tok` (no token: anonymous). */
export function apiCaller(base: string, tok?: string) {
  return async (method: string, path: string, body?: unknown): Promise<ApiReply> => {
    const started = performance.now();
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(tok ? { authorization: `token ${tok}` } : {}),
        "content-type": "application/json",
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      json: text ? JSON.parse(text) : null,
      ms: performance.now() - started,
    };
  };
}

/**
 * The environment for `forgekit stack` against `url`: an auth.json in `dir`
 * whose codehost entry for 127.0.0.1 sends `tok`.
 */
export async function clientEnv(
  dir: string,
  url: string,
  tok: string,
): Promise<Record<string, string>> {
  const authFile = join(dir, "auth.json");
  await Deno.writeTextFile(
    authFile,
    JSON.stringify({
      providers: [{
        hosts: ["127.0.0.1"],
        provider: "codehost",
        auth: "bearer",
        token_env: "STACKS_TOKEN",
      }],
    }),
    { mode: 0o600 },
  );
  return { FORGEKIT_AUTH_FILE: authFile, STACKS_TOKEN: tok, FORGEKIT_API_URL: url };
}

/**
 * Writes alice's public repository `app` straight to the database (no
 * server may be running on it): `stacks` two-pull stacks (#1 … #n), then
 * `spare` open pull requests in a chain on main, not stacked. Returns the
 * spare pull requests' numbers. Much faster than the API for hundreds.
 */
export async function seedStacks(
  db: string,
  stacks: number,
  options: { spare?: number; body?: string | null } = {},
): Promise<number[]> {
  const store = openSqliteStore(db);
  const spare: number[] = [];
  try {
    await store.transaction(async () => {
      const alice = await store.ensureUser("alice");
      const repo = await store.createRepo({
        owner_id: alice.id,
        name: "app",
        private: false,
        allow_stacked_pull_requests: true,
        default_branch: "main",
      });
      const pull = (head: string, base: string) =>
        store.insertPull({
          repo_id: repo.id,
          user_id: alice.id,
          title: head,
          body: options.body ?? null,
          draft: false,
          head_ref: head,
          head_sha: "1".repeat(40),
          base_ref: base,
        });
      await store.putBranch(repo.id, "main", "0".repeat(40));
      for (let i = 1; i <= stacks; i++) {
        const stack = await store.insertStack(repo.id, "main");
        let base = "main";
        for (const [position, head] of [`s${i}a`, `s${i}b`].entries()) {
          const p = await pull(head, base);
          await store.updatePull(p.id, { stack_id: stack.id, stack_position: position + 1 });
          base = head;
        }
      }
      let base = "main";
      for (let i = 1; i <= (options.spare ?? 0); i++) {
        await store.putBranch(repo.id, `spare${i}`, "1".repeat(40));
        spare.push((await pull(`spare${i}`, base)).number);
        base = `spare${i}`;
      }
    });
  } finally {
    await store.close();
  }
  return spare;
}
