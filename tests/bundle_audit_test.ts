/**
 * The shipped form: `dist/forgekit.js` (build.ts) installed where a user puts
 * it (a path with spaces, no extension, inside some other project) and run
 * through its shebang from another working directory, against `deno run -A
 * main.ts`: help, usage errors and exit codes, fetch over HTTPS with
 * auth.json, the git credential helper, the stacks server and client, and
 * the firewall, which re-runs forgekit inside its sandbox.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { buildBundle } from "../build.ts";
import { baseEnv, MAIN_TS, runCommand, runForgekit, type RunResult } from "./support/cli.ts";
import { gitCgi, makeBareRepo } from "./support/git_server.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";
import { clientEnv } from "./support/stacks_server.ts";
import denoJson from "../deno.json" with { type: "json" };

const opts = { sanitizeResources: false, sanitizeOps: false };

const root = await Deno.makeTempDir({ prefix: "forgekit bundle audit " });
/** The bundle as installed: a path with spaces, then run through its shebang. */
const installed = join(root, "tools dir", "forgekit.js");
/** Elsewhere: the working directory of every run. */
const elsewhere = join(root, "work dir");
await Deno.mkdir(join(root, "tools dir"));
await Deno.mkdir(elsewhere);
await Deno.copyFile(await buildBundle(), installed);
await Deno.chmod(installed, 0o755);

/** Runs an executable (the installed bundle, through its shebang) with the tests' clean environment. */
function exec(
  cmd: string,
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; stdin?: string } = {},
): Promise<RunResult> {
  return runCommand(cmd, args, { ...options, cwd: options.cwd ?? elsewhere, timeoutMs: 90_000 });
}

const bundle = (args: string[], options: Parameters<typeof exec>[2] = {}) =>
  exec(installed, args, options);

Deno.test(
  "the bundle answers help, --version, usage errors and exit codes exactly as main.ts does",
  opts,
  async () => {
    const cases = [
      [],
      ["--version"],
      ["-V"],
      ["version"],
      ["help"],
      ["--help"],
      ["bogus"],
      ["help", "bogus"],
      ...["fetch", "auth", "stacks", "stack", "firewall"].flatMap((c) => [
        ["help", c],
        [c, "--help"],
        [c],
      ]),
      ...["doctor", "explain", "init", "git-credential"].map((c) => ["auth", c, "--help"]),
      ["stacks", "serve", "--help"],
      ["stacks", "token", "create", "--help"],
      ...["create", "add", "list", "view", "unstack"].map((c) => ["stack", c, "--help"]),
      ["auth", "doctor"],
      ["auth", "explain", "https://api.github.com/user"],
      ["auth", "git-credential"],
      ["fetch", "-o", "", "https://x.example/"],
      ["fetch", "http://127.0.0.1:1/"],
      ["stack", "list"],
      ["stacks", "serve", "--port", "1", "--port", "2"],
      ["firewall", "--allow-urls", "https://x.example/*", "--", "true"],
      ["firewall", "--allow-domains", "x.example", "--", "no-such-command-here"],
    ];
    for (const args of cases) {
      const fromMain = await runForgekit(args, { cwd: elsewhere });
      const fromBundle = await bundle(args);
      assert.deepEqual(fromBundle, fromMain, `forgekit ${args.join(" ")}`);
    }
    assert.equal((await bundle(["--version"])).stdout, `forgekit ${denoJson.version}\n`);
  },
);

Deno.test(
  "the bundle fetches over HTTPS through HTTPS_PROXY with DENO_CERT and auth.json, and answers git as its credential helper",
  opts,
  async () => {
    const o = await startOrigins(
      ["api.github.com"],
      (req) => new Response(`auth=${req.headers.get("authorization") ?? "none"}\n`),
    );
    try {
      const authFile = join(root, "auth.json");
      await Deno.writeTextFile(
        authFile,
        JSON.stringify({
          providers: [{
            hosts: ["github.com", "api.github.com"],
            provider: "codehost",
            auth: "bearer",
            token_env: "GH_TOKEN",
          }],
        }),
        { mode: 0o600 },
      );
      const env = { ...o.env, FORGEKIT_AUTH_FILE: authFile, GH_TOKEN: "ghp_bundle_token" };
      const r = await bundle(["fetch", "https://api.github.com/user"], { env });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "auth=Bearer ghp_bundle_token\n");

      const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
      const fill = await exec("git", [
        "-c",
        "credential.helper=",
        "-c",
        `credential.helper=!${quote(installed)} auth git-credential`,
        "credential",
        "fill",
      ], {
        env: { ...env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_NOSYSTEM: "1" },
        stdin: "protocol=https\nhost=github.com\n\n",
      });
      assert.equal(fill.code, 0, fill.stderr);
      assert.match(fill.stdout, /^username=x-access-token\npassword=ghp_bundle_token$/m);
    } finally {
      await o.close();
    }
  },
);

Deno.test(
  "the bundle runs stacks serve, stacks token create and the stack client",
  opts,
  async () => {
    const db = join(root, "stacks.db");
    const tok = await bundle(["stacks", "token", "create", "--user", "alice", "--db", db]);
    assert.equal(tok.code, 0, tok.stderr);
    const token = tok.stdout.trim();
    assert.match(token, /^fks_[0-9a-f]{60}$/);
    const server = new Deno.Command(installed, {
      args: ["stacks", "serve", "--db", db, "--port", "0"],
      cwd: elsewhere,
      env: baseEnv(),
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const errText = new Response(server.stderr).text();
    const reader = server.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let line = "";
    while (!line.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      line += value;
    }
    reader.releaseLock();
    try {
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+) \(db (.+)\)/.exec(line);
      assert.ok(m, line + (await Promise.race([errText, Promise.resolve("")])));
      const api = m[1];
      const call = (method: string, path: string, body: unknown) =>
        fetch(`${api}${path}`, {
          method,
          headers: { authorization: `Bearer ${token}` },
          body: JSON.stringify(body),
        }).then((res) => res.text());
      await call("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true });
      for (const b of ["a", "b"]) {
        await call("POST", "/repos/alice/app/git/refs", {
          ref: `refs/heads/${b}`,
          sha: "1".padStart(40, "0"),
        });
      }
      await call("POST", "/repos/alice/app/pulls", { title: "A", head: "a", base: "main" });
      await call("POST", "/repos/alice/app/pulls", { title: "B", head: "b", base: "a" });
      const clientDir = join(root, "stack client");
      await Deno.mkdir(clientDir);
      const env = await clientEnv(clientDir, api, token);
      const create = await bundle(["stack", "create", "--repo", "alice/app", "1", "2"], { env });
      assert.equal(create.code, 0, create.stderr);
      const view = await bundle(["stack", "view", "1", "--repo", "alice/app"], { env });
      assert.equal(view.code, 0, view.stderr);
      assert.match(view.stdout, /^stack #1 open, 2 pull requests\nmain\n└─ #1 \[open\] A \(a\)\n/);
    } finally {
      server.kill("SIGTERM");
      const status = await server.status;
      await server.stdout.cancel().catch(() => {});
      assert.equal(status.code, 0, await errText);
    }
  },
);

/** Origins for the firewall runs: an API and a git server, reached through the test proxy. */
async function firewallOrigins() {
  const repo = await makeBareRepo();
  const o = await startOrigins(["api.example", "git.example"], (req, hit) => {
    if (hit.host === "git.example") return gitCgi(req, repo.root);
    return new Response(`hello ${hit.host} ${hit.path}\n`);
  });
  return {
    o,
    async close() {
      await o.close();
      await Deno.remove(repo.root, { recursive: true });
    },
  };
}

Deno.test(
  "firewall from the bundle, through its shebang, from a path with spaces and another cwd, filters URLs with --ssl-bump",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const { o, close } = await firewallOrigins();
    const logDir = join(root, "fw logs");
    try {
      const curl = "curl -sS -m 10";
      const r = await bundle([
        "firewall",
        "--log-dir",
        logDir,
        "--allow-domains",
        "api.example,git.example",
        "--ssl-bump",
        "--upstream-ca",
        o.ca.certPath,
        "--allow-urls",
        "https://api.example/allowed/*,https://git.example/repo.git/**",
        "--",
        "sh",
        "-c",
        [
          `echo "ok $(${curl} https://api.example/allowed/x)"`,
          `echo "no $(${curl} -o /dev/null -w '%{http_code} %header{x-proxy-error}' https://api.example/secret)"`,
          `git clone -q https://git.example/repo.git /tmp/clone-$$ && echo "git $(ls /tmp/clone-$$)"`,
          "rm -rf /tmp/clone-$$",
          "exit 7",
        ].join("; "),
      ], { env: { HTTPS_PROXY: o.proxy.url, HTTP_PROXY: o.proxy.url } });
      assert.equal(r.code, 7, r.stderr);
      assert.equal(
        r.stdout,
        "ok hello api.example /allowed/x\nno 403 blocked-by-url-policy\ngit README\n",
      );
      assert.match(r.stderr, /https:\/\/api\.example\/secret/);
      assert.ok((await Deno.stat(join(logDir, "access.log"))).isFile);
    } finally {
      await close();
    }
  },
);

/** A Deno executable under another name (a hard link, or a copy across file systems). */
async function denoNamed(name: string): Promise<string> {
  const path = join(root, name);
  try {
    await Deno.link(Deno.execPath(), path);
  } catch {
    await Deno.copyFile(Deno.execPath(), path);
    await Deno.chmod(path, 0o755);
  }
  return path;
}

Deno.test(
  "firewall re-runs forgekit inside the sandbox whatever the Deno executable is called",
  needsNamespaces,
  async () => {
    assertNamespaces();
    // As installed by version managers and distributions: deno-2.9.6, deno2, …
    const deno = await denoNamed("deno-2.9.6");
    const inside = [
      "firewall",
      "--log-dir",
      join(root, "fw logs"),
      "--allow-domains",
      "example.com",
      "--",
      "sh",
      "-c",
      "echo in; exit 3",
    ];
    for (const script of [MAIN_TS, installed]) {
      const r = await exec(deno, ["run", "-A", "--quiet", script, ...inside]);
      assert.equal(r.code, 3, `${script}: ${r.stderr}`);
      assert.equal(r.stdout, "in\n", script);
    }
  },
);

Deno.test(
  "the installed bundle ignores the deno.json and package.json of the directories it sits in",
  opts,
  async () => {
    // ~/bin/forgekit in a home (or project) whose own config is broken, or
    // would make deno install that project's npm packages next to it.
    const home = join(root, "home");
    await Deno.mkdir(join(home, "bin"), { recursive: true });
    await Deno.writeTextFile(join(home, "package.json"), '{ "name": "mine", ');
    await Deno.writeTextFile(join(home, "deno.json"), "{ broken");
    const tool = join(home, "bin", "forgekit");
    await Deno.copyFile(installed, tool);
    await Deno.chmod(tool, 0o755);
    const v = await exec(tool, ["--version"], { cwd: home });
    assert.deepEqual(v, { code: 0, stdout: `forgekit ${denoJson.version}\n`, stderr: "" });
    const explain = await exec(tool, ["auth", "explain", "https://api.github.com/"], { cwd: home });
    assert.equal(explain.code, 0, explain.stderr);
    assert.deepEqual(
      [...Deno.readDirSync(home)].map((e) => e.name).sort(),
      ["bin", "deno.json", "package.json"],
      "nothing was written beside it",
    );
    if (needsNamespaces.ignore) return;
    // The sandbox's own forgekit, run again from the same file, ignores them too.
    const fw = await exec(
      tool,
      [
        "firewall",
        "--log-dir",
        join(root, "fw logs"),
        "--allow-domains",
        "example.com",
        "--",
        "echo",
        "in",
      ],
      { cwd: home },
    );
    assert.equal(fw.code, 0, fw.stderr);
    assert.equal(fw.stdout, "in\n");
  },
);

Deno.test({
  name: "bundle audit fixtures are removed",
  ...opts,
  async fn() {
    await Deno.remove(root, { recursive: true });
  },
});
