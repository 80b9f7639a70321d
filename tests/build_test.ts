import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO_ROOT, runForgekit } from "./support/cli.ts";
import denoJson from "../deno.json" with { type: "json" };
import { bundleFailure, compileArgs, SHEBANG, TARGETS } from "../build.ts";
import { V8_FLAGS_ARG } from "../lib/v8_flags.ts";

Deno.test("build.ts writes a bundle that runs: --version and a real fetch", async () => {
  // build.ts runs with this process's environment, not runCommand's clean
  // one: `deno bundle` may fetch esbuild from the npm registry, through the
  // proxy and CA settings the environment gives.
  const build = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "build.ts", "--bundle-only"],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(build.success, new TextDecoder().decode(build.stderr));
  const bundle = join(REPO_ROOT, "dist", "forgekit.js");
  assert.ok((await Deno.stat(bundle)).mode! & 0o100, "bundle is executable");

  const firstLine = (await Deno.readTextFile(bundle)).split("\n", 1)[0];
  assert.equal(firstLine, SHEBANG.trimEnd(), "the bundle starts with forgekit's shebang");

  const v = await runForgekit(["--version"], { script: bundle });
  assert.equal(v.stdout.trim(), `forgekit ${denoJson.version}`);

  // As an executable script (shebang), too.
  const direct = await new Deno.Command(bundle, { args: ["--version"], stdout: "piped" }).output();
  assert.equal(new TextDecoder().decode(direct.stdout).trim(), `forgekit ${denoJson.version}`);

  // One real command: fetch from a loopback server.
  const ac = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen() {} },
    () => new Response("hello from loopback\n"),
  );
  try {
    const r = await runForgekit(["fetch", `http://127.0.0.1:${server.addr.port}/x`], {
      script: bundle,
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "hello from loopback\n");
  } finally {
    ac.abort();
    await server.finished;
  }
});

Deno.test("build.ts without denort says so in one line and still exits 0", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "build.ts", "--target", "aarch64-unknown-linux-gnu"],
    cwd: REPO_ROOT,
    env: { DENORT_BIN: "/nonexistent/denort" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (stdout.includes("wrote dist/forgekit-aarch64")) return; // binaries could be built here
  assert.equal(out.code, 0);
  assert.match(stdout, /^build: no binaries for aarch64-unknown-linux-gnu: .+denort/m);

  const strict = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "build.ts", "--require-binaries", "--target", "aarch64-unknown-linux-gnu"],
    cwd: REPO_ROOT,
    env: { DENORT_BIN: "/nonexistent/denort" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(strict.code, 1);
  assert.match(new TextDecoder().decode(strict.stderr), /^error: no binaries for/m);
});

Deno.test("build.ts refuses an unknown option or target in one line with exit 2, before building", async () => {
  const cases: [string[], RegExp][] = [
    [["--frob"], /^error: Unknown option '--frob' \(run: deno task build --help\)\n$/],
    [["extra"], /^error: Unexpected argument: extra \(run: deno task build --help\)\n$/],
    [
      ["--target", "x86_64-linux"],
      /^error: Unknown --target x86_64-linux \(use one of: x86_64-unknown-linux-gnu, .+\)\n$/,
    ],
    [
      ["--bundle-only", "--target", "x86_64-unknown-linux-gnu"],
      /^error: --target has no effect with --bundle-only \(no binaries are built\) \(drop --bundle-only or --target\)\n$/,
    ],
    [
      ["--require-binaries", "--bundle-only"],
      /^error: --require-binaries has no effect with --bundle-only/,
    ],
  ];
  for (const [args, want] of cases) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--quiet", "build.ts", ...args],
      cwd: REPO_ROOT,
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, `${args.join(" ")}: ${stderr}`);
    assert.match(stderr, want);
    assert.equal(new TextDecoder().decode(out.stdout), "", "nothing was built");
  }
});

Deno.test("every way forgekit is run carries its V8 flags: binaries, the bundle, deno tasks", () => {
  assert.ok(SHEBANG.includes(` ${V8_FLAGS_ARG}`), SHEBANG);
  for (const target of TARGETS) {
    const args = compileArgs(target);
    assert.ok(
      args.indexOf(V8_FLAGS_ARG) > 0 && args.indexOf(V8_FLAGS_ARG) < args.indexOf("main.ts"),
    );
  }
  const tasks = denoJson.tasks as Record<string, string>;
  for (const name of ["serve", "bench:auth", "bench:stacks", "bench:firewall"]) {
    assert.match(tasks[name], new RegExp(`^deno run -A ${V8_FLAGS_ARG} `), name);
  }
});

Deno.test("a failed deno bundle is reported by its error and cause, not its backtrace", () => {
  // What deno 2.9.6 writes (coloured, into a pipe) when it cannot fetch esbuild.
  const stderr = "\x1b[0m\x1b[1m\x1b[31merror\x1b[0m: Failed loading " +
    'https://registry.npmjs.org/@esbuild%2flinux-x64 for package "@esbuild/linux-x64"\n\n' +
    "Caused by:\n    error sending request for url (https://registry.npmjs.org/@esbuild%2flinux-x64): " +
    "client error (Connect): dns error: failed to lookup address information: " +
    "Temporary failure in name resolution\n\nStack backtrace:\n   0: <unknown>\n";
  assert.equal(
    bundleFailure(stderr),
    'Failed loading https://registry.npmjs.org/@esbuild%2flinux-x64 for package "@esbuild/linux-x64": ' +
      "error sending request for url (https://registry.npmjs.org/@esbuild%2flinux-x64): " +
      "client error (Connect): dns error: failed to lookup address information: " +
      "Temporary failure in name resolution",
  );
  assert.equal(
    bundleFailure('error: Module not found "file:///x/main.ts".\n'),
    'Module not found "file:///x/main.ts".',
  );
  assert.equal(bundleFailure(""), "unknown failure");
});
