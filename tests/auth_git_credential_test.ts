/**
 * `forgekit auth git-credential` under real git: clones and ls-remote over
 * HTTPS (a test CA) from a loopback smart-HTTP server that requires Basic
 * auth, reached under real host names through a test proxy; `git credential
 * fill`; and the raw protocol (https://git-scm.com/docs/git-credential).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { baseEnv, MAIN_TS, runCommand, runForgekit, type RunResult } from "./support/cli.ts";
import { startGitAuthServer } from "./support/git_auth_server.ts";

const GH = "ghp_git_SECRET_1234";
const BB = "bb_access_SECRET_5678";
const git = await startGitAuthServer({
  "github.com:443": `x-access-token:${GH}`,
  "git.corp.example:8443": `x-access-token:${GH}`,
  "bitbucket.org:443": `x-token-auth:${BB}`,
  "other.example:443": "fallback-user:fallback-pass",
});
const dir = await Deno.makeTempDir({ prefix: "forgekit-gitcred-" });
const opts = { sanitizeResources: false, sanitizeOps: false };
const enc = new TextEncoder();
const dec = new TextDecoder();
const sq = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

const PROVIDERS = [
  {
    hosts: ["github.com", "git.corp.example", "127.0.0.1", "::1"],
    provider: "codehost",
    auth: "bearer",
    token_env: "GH_TOKEN",
  },
  { hosts: ["api.bitbucket.org"], provider: "repohost", auth: "bearer", token_env: "BB_TOKEN" },
];

/** A HOME with ~/.forgekit/auth.json (mode 600) holding `providers`. */
async function homeWith(providers: unknown[] = PROVIDERS): Promise<string> {
  const home = await Deno.makeTempDir({ dir });
  await Deno.mkdir(join(home, ".forgekit"), { mode: 0o700 });
  await Deno.writeTextFile(join(home, ".forgekit", "auth.json"), JSON.stringify({ providers }), {
    mode: 0o600,
  });
  return home;
}

/** The helper as git runs it, logging each operation to OPS in HOME. */
function helper(home: string): string {
  return `!f() { echo "$1" >> ${sq(join(home, "ops"))}; ${sq(Deno.execPath())} run -A --quiet ${
    sq(MAIN_TS)
  } auth git-credential "$@"; }; f`;
}

/** Runs real git with forgekit as its only credential helper (then `extraHelpers`). */
async function runGit(
  home: string,
  args: string[],
  options: { env?: Record<string, string>; stdin?: string; extraHelpers?: string[] } = {},
): Promise<RunResult> {
  const helpers = [helper(home), ...(options.extraHelpers ?? [])];
  return await runCommand("git", [
    "-c",
    "credential.helper=",
    ...helpers.flatMap((h) => ["-c", `credential.helper=${h}`]),
    ...args,
  ], {
    cwd: home,
    env: { ...git.gitEnv(home), GH_TOKEN: GH, BB_TOKEN: BB, ...options.env },
    stdin: options.stdin,
  });
}

/** Runs the helper directly, as git does: `forgekit auth git-credential OP` with `input`. */
function credential(home: string, op: string[], input: string, env: Record<string, string> = {}) {
  return runForgekit(["auth", "git-credential", ...op], {
    env: { HOME: home, GH_TOKEN: GH, BB_TOKEN: BB, ...env },
    stdin: input,
  });
}

async function ops(home: string): Promise<string[]> {
  const text = await Deno.readTextFile(join(home, "ops")).catch(() => "");
  return text.trim().split("\n").filter(Boolean);
}

async function forgekitDir(home: string): Promise<string> {
  const dirPath = join(home, ".forgekit");
  const names = [...Deno.readDirSync(dirPath)].map((e) => e.name).sort();
  const st = await Deno.stat(join(dirPath, "auth.json"));
  const text = await Deno.readTextFile(join(dirPath, "auth.json"));
  return JSON.stringify({ names, mtime: st.mtime?.getTime(), mode: st.mode, text });
}

Deno.test(
  "git clone and ls-remote over HTTPS send x-access-token and the token as Basic; store and erase write nothing",
  opts,
  async () => {
    const home = await homeWith();
    const before = await forgekitDir(home);
    const start = git.hits.length;
    const clone = await runGit(home, ["clone", "-q", `https://github.com${git.repoPath}`, "c1"]);
    assert.equal(clone.code, 0, clone.stderr);
    assert.ok((await Deno.stat(join(home, "c1", "README"))).isFile);
    const sent = git.hits.slice(start).map((h) => h.credential);
    assert.deepEqual([...new Set(sent)], [null, `x-access-token:${GH}`]);
    assert.deepEqual(await ops(home), ["get", "store"], "git stores the working credential");

    // A token the server refuses: git fails without a prompt and asks the helper to erase it.
    const refused = await runGit(home, ["ls-remote", `https://github.com${git.repoPath}`], {
      env: { GH_TOKEN: "ghp_wrong_SECRET_0000" },
    });
    assert.equal(refused.code, 128);
    assert.match(refused.stderr, /Authentication failed/);
    assert.deepEqual(await ops(home), ["get", "store", "get", "erase"]);
    assert.equal(await forgekitDir(home), before, "auth.json and ~/.forgekit are untouched");
    for (const out of [clone, refused]) {
      assert.ok(!(out.stdout + out.stderr).includes("SECRET"), out.stderr);
    }

    // store and erase print nothing and change nothing, whatever they are given.
    for (const op of ["store", "erase"]) {
      const r = await credential(
        home,
        [op],
        `protocol=https\nhost=github.com\nusername=x-access-token\npassword=${GH}\n\n`,
      );
      assert.deepEqual([r.code, r.stdout, r.stderr], [0, "", ""], op);
    }
    assert.equal(await forgekitDir(home), before);
  },
);

Deno.test(
  "a host with a port and bitbucket.org with a user name in the URL get the right user name",
  opts,
  async () => {
    const home = await homeWith();
    const start = git.hits.length;
    const corp = await runGit(home, ["ls-remote", `https://git.corp.example:8443${git.repoPath}`]);
    assert.equal(corp.code, 0, corp.stderr);
    const bb = await runGit(home, ["ls-remote", `https://alice@bitbucket.org${git.repoPath}`]);
    assert.equal(bb.code, 0, bb.stderr);
    const used = git.hits.slice(start).filter((h) => h.credential?.includes("SECRET"));
    assert.deepEqual(
      [...new Set(used.map((h) => `${h.host} ${h.credential}`))],
      [`git.corp.example:8443 x-access-token:${GH}`, `bitbucket.org x-token-auth:${BB}`],
    );
    // The raw answers: the port is no part of the match, as for fetch.
    const r = await credential(home, ["get"], "protocol=https\nhost=GitHub.com.:8443\n\n");
    assert.equal(r.stdout, `username=x-access-token\npassword=${GH}\n\n`);
  },
);

Deno.test(
  "a host auth.json does not cover gets no output at all, so git asks the next helper",
  opts,
  async () => {
    const home = await homeWith();
    const start = git.hits.length;
    const fallback =
      `!f() { test "$1" = get && printf 'username=fallback-user\\npassword=fallback-pass\\n'; }; f`;
    const r = await runGit(home, ["ls-remote", `https://other.example${git.repoPath}`], {
      extraHelpers: [fallback],
    });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(
      [...new Set(git.hits.slice(start).map((h) => h.credential))],
      [null, "fallback-user:fallback-pass"],
    );
    for (
      const input of [
        "protocol=https\nhost=other.example\n\n",
        // Plain http to a host that is not this machine: a token never goes there.
        "protocol=http\nhost=github.com\n\n",
        "protocol=ssh\nhost=github.com\n\n",
        "protocol=https\n\n",
        "",
      ]
    ) {
      const got = await credential(home, ["get"], input);
      assert.deepEqual([got.code, got.stdout, got.stderr], [0, "", ""], JSON.stringify(input));
    }
    // Plain http to this machine is answered, bracketed IPv6 with a port included.
    for (const host of ["127.0.0.1:8080", "[::1]:8080"]) {
      const got = await credential(home, ["get"], `protocol=http\nhost=${host}\n\n`);
      assert.equal(got.stdout, `username=x-access-token\npassword=${GH}\n\n`, host);
    }
  },
);

Deno.test(
  "unknown keys, wwwauth[], capability[], path and quit are ignored: the answer is by host",
  opts,
  async () => {
    const home = await homeWith();
    const input = [
      "capability[]=authtype",
      "capability[]=state",
      "protocol=https",
      "host=bitbucket.org",
      "path=ws/repo.git",
      "username=alice",
      'wwwauth[]=Basic realm="Bitbucket"',
      "wwwauth[]=Bearer realm=x",
      "quit=true",
      "x-future-key=a=b",
      "",
      "host=github.com",
      "",
    ].join("\r\n");
    const r = await credential(home, ["get"], input);
    assert.deepEqual([r.code, r.stderr], [0, ""]);
    assert.equal(r.stdout, `username=x-token-auth\npassword=${BB}\n\n`);

    // Real git, with credential.useHttpPath (git then sends path=).
    const fill = await runGit(home, ["-c", "credential.useHttpPath=true", "credential", "fill"], {
      stdin: "url=https://github.com/o/r.git\n\n",
    });
    assert.equal(fill.code, 0, fill.stderr);
    assert.match(fill.stdout, new RegExp(`^username=x-access-token\npassword=${GH}$`, "m"));
  },
);

Deno.test(
  "the helper answers as soon as a blank line ends its input, with stdin still open",
  opts,
  async () => {
    const home = await homeWith();
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--quiet", MAIN_TS, "auth", "git-credential", "get"],
      env: { ...baseEnv(), HOME: home, GH_TOKEN: GH },
      clearEnv: true,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(enc.encode("protocol=https\nhost=github.com\n\n"));
    // stdin stays open: the blank line alone must end the request.
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    const status = await child.status;
    clearTimeout(timer);
    await w.close().catch(() => {});
    const stdout = dec.decode(
      await new Response(child.stdout).arrayBuffer().then((b) => new Uint8Array(b)),
    );
    await child.stderr.cancel();
    assert.equal(status.signal, null, "the helper waited for stdin to close");
    assert.equal(status.code, 0);
    assert.equal(stdout, `username=x-access-token\npassword=${GH}\n\n`);
  },
);

Deno.test(
  "an operation the helper does not know is ignored silently (exit 0, no output), as the protocol asks",
  opts,
  async () => {
    const home = await homeWith();
    for (const op of ["capability", "approve-later", "x-future"]) {
      const r = await credential(home, [op], "protocol=https\nhost=github.com\n\n");
      assert.deepEqual([r.code, r.stdout, r.stderr], [0, "", ""], op);
    }
    // Without any operation it is a usage error: git always names one.
    const none = await credential(home, [], "");
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^error: .*git-credential operation.*get, store or erase/);
  },
);

Deno.test(
  "a token padded with spaces or a final line break reaches git as the header carries it; one after a line break is skipped, never printed",
  opts,
  async () => {
    const home = await homeWith();
    // As a file read into a variable leaves it: git must get the token alone.
    const padded = ` ${GH} \r\n`;
    const fill = await runGit(home, ["credential", "fill"], {
      env: { GH_TOKEN: padded },
      stdin: "protocol=https\nhost=github.com\n\n",
    });
    assert.equal(fill.code, 0, fill.stderr);
    assert.match(fill.stdout, new RegExp(`^username=x-access-token\npassword=${GH}$`, "m"));
    const start = git.hits.length;
    const ls = await runGit(home, ["ls-remote", `https://github.com${git.repoPath}`], {
      env: { GH_TOKEN: padded },
    });
    assert.equal(ls.code, 0, ls.stderr);
    assert.ok(git.hits.slice(start).some((h) => h.credential === `x-access-token:${GH}`));

    // A line break before the token: on a line of its own git would print it
    // ("invalid credential line: …"), and a header holding it is refused with
    // an error that quotes it. The entry is skipped instead.
    const broken = `\n${GH}`;
    const refused = await runGit(home, ["credential", "fill"], {
      env: { GH_TOKEN: broken },
      stdin: "protocol=https\nhost=github.com\n\n",
    });
    assert.notEqual(refused.code, 0, "no answer: git gives up without a prompt");
    assert.ok(!(refused.stdout + refused.stderr).includes("SECRET"), refused.stderr);
    const ac = new AbortController();
    const server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen() {} },
      (req) => new Response(`${req.headers.get("authorization")}\n`),
    );
    try {
      const r = await runForgekit(["fetch", "-v", `http://127.0.0.1:${server.addr.port}/`], {
        env: { HOME: home, GH_TOKEN: broken },
      });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "null\n", "sent unauthenticated");
      assert.ok(!r.stderr.includes("SECRET"), r.stderr);
      assert.match(r.stderr, /\$GH_TOKEN holds a line break/);
      const doctor = await runForgekit(["auth", "doctor"], {
        env: { HOME: home, GH_TOKEN: broken, BB_TOKEN: BB },
      });
      assert.equal(doctor.code, 0, doctor.stderr);
      assert.match(doctor.stdout, /skip providers\[0\] .*: \$GH_TOKEN holds a line break/);
      assert.ok(!doctor.stdout.includes("SECRET"), doctor.stdout);
    } finally {
      ac.abort();
      await server.finished;
    }
  },
);

Deno.test(
  "a user name with a line break or another control character is refused in auth.json (exit 2)",
  opts,
  async () => {
    const home = await homeWith([
      {
        hosts: ["git.corp.example"],
        provider: "repohost",
        auth: "basic",
        username: "me@example.com\npassword=other",
        token_env: "BB_TOKEN",
      },
    ]);
    const r = await credential(home, ["get"], "protocol=https\nhost=git.corp.example\n\n");
    assert.equal(r.code, 2);
    assert.equal(r.stdout, "");
    assert.match(
      r.stderr,
      /^error: ~\/\.forgekit\/auth\.json providers\[0\]\.username: contains a control character \(.+\)\n$/,
    );
    assert.ok(!r.stderr.includes("SECRET"));
  },
);

Deno.test(
  "auth doctor and auth explain show tokens only masked, and exit 0 when usable, 2 when not",
  opts,
  async () => {
    const inline = "ghp_INLINE_SECRET_abcdef";
    const home = await homeWith([
      ...PROVIDERS,
      { hosts: ["x.example"], provider: "codehost", auth: "bearer", token: inline },
    ]);
    const env = { HOME: home, GH_TOKEN: GH, BB_TOKEN: BB };
    const outputs: string[] = [];
    for (
      const args of [
        ["auth", "doctor"],
        ["auth", "doctor", "--json"],
        ["auth", "explain", "https://github.com/o/r.git"],
        ["auth", "explain", "--json", "https://x.example/"],
        ["auth", "explain", `https://u:${GH}@github.com/`],
      ]
    ) {
      const r = await runForgekit(args, { env });
      assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
      outputs.push(r.stdout + r.stderr);
    }
    const all = outputs.join("\n");
    for (const secret of [GH, BB, inline]) assert.ok(!all.includes(secret), secret);
    assert.match(all, /ghp_\*\*\*\*/);
    // Not usable: no entry resolves a token.
    const none = await runForgekit(["auth", "doctor"], { env: { HOME: home } });
    assert.equal(none.code, 0, "the inline entry still resolves");
    const bare = await homeWith([PROVIDERS[0]]);
    const unusable = await runForgekit(["auth", "doctor"], { env: { HOME: bare } });
    assert.equal(unusable.code, 2);
    assert.match(unusable.stdout, /\$GH_TOKEN is not set \(entry is skipped\)\nnot usable/);
    const missing = await runForgekit(["auth", "doctor"], { env: { HOME: dir } });
    assert.equal(missing.code, 2);
  },
);

Deno.test({
  name: "git credential test fixtures are closed",
  ...opts,
  async fn() {
    await git.close();
    await Deno.remove(dir, { recursive: true });
  },
});
