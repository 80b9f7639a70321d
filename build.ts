#!/usr/bin/env -S deno run -A
/**
 * Builds forgekit for release.
 *
 * - Always writes `dist/forgekit.js`, a single-file bundle (`deno bundle`)
 *   that runs with `deno run -A dist/forgekit.js` and as an executable script
 *   (`deno run -A --no-config`, so no configuration file near it applies).
 * - Runs `deno compile` for each release target into `dist/`. `deno compile`
 *   needs Deno's `denort` runtime: it downloads it, or takes it from
 *   `DENORT_BIN`. Where it cannot, this says so in one line and exits 0,
 *   unless `--require-binaries` was given.
 *
 * Usage: deno task build [--require-binaries] [--bundle-only] [--target TRIPLE]…
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { VERSION } from "./lib/version.ts";
import { V8_FLAGS_ARG } from "./lib/v8_flags.ts";
import { exitCodeOf, formatError, parseCommandArgs, usageError } from "./lib/cli/mod.ts";

/** The release targets of `deno compile`. */
export const TARGETS = [
  "x86_64-unknown-linux-gnu",
  "aarch64-unknown-linux-gnu",
  "x86_64-apple-darwin",
  "aarch64-apple-darwin",
  "x86_64-pc-windows-msvc",
] as const;

const ROOT = fileURLToPath(new URL(".", import.meta.url));
const DIST = join(ROOT, "dist");
// --no-config: the bundle holds all of forgekit, and a deno.json or
// package.json in the directories it is installed in must not change it
// (a broken one would stop it; one with npm dependencies would have deno
// install them there). The V8 flags forgekit runs with (lib/v8_flags.ts) go too.
export const SHEBANG = `#!/usr/bin/env -S deno run -A --no-config ${V8_FLAGS_ARG}\n`;

async function deno(args: string[]): Promise<{ ok: boolean; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { ok: out.success, stderr: new TextDecoder().decode(out.stderr) };
}

/**
 * Why `deno bundle` failed, on one line: its error and the causes under it,
 * without colours or the stack backtrace that follows them.
 *
 * @example
 * ```ts
 * bundleFailure("error: Failed loading X\n\nCaused by:\n    dns error\n\nStack backtrace:\n   0: <unknown>\n");
 * // "Failed loading X: dns error"
 * ```
 */
export function bundleFailure(stderr: string): string {
  // deno colours its errors even into a pipe.
  // deno-lint-ignore no-control-regex
  const plain = stderr.replace(/\x1b\[[0-9;]*m/g, "").split(/^Stack backtrace:/m)[0];
  const lines = plain.split("\n").map((l) => l.trim()).filter((l) => l && l !== "Caused by:");
  const at = lines.findIndex((l) => /^error:/i.test(l));
  const text = (at >= 0 ? lines.slice(at) : lines.slice(-3)).join(": ").replace(/^error:\s*/i, "");
  if (!text) return "unknown failure";
  return text.length > 400 ? `${text.slice(0, 399)}…` : text;
}

/** Writes dist/forgekit.js and makes it executable. Returns its path. */
export async function buildBundle(): Promise<string> {
  await Deno.mkdir(DIST, { recursive: true });
  const out = join(DIST, "forgekit.js");
  const tmp = `${out}.tmp-${Deno.pid}`;
  const r = await deno(["bundle", "--quiet", "--platform", "deno", "-o", tmp, "main.ts"]);
  if (!r.ok) {
    await Deno.remove(tmp).catch(() => {});
    throw new Error(`deno bundle failed: ${bundleFailure(r.stderr)}`);
  }
  let text = await Deno.readTextFile(tmp);
  text = text.replace(/^#!.*\n/, "");
  await Deno.writeTextFile(tmp, SHEBANG + text, { mode: 0o755 });
  await Deno.chmod(tmp, 0o755);
  await Deno.rename(tmp, out);
  return out;
}

function binaryName(target: string): string {
  return `forgekit-${target}${target.includes("windows") ? ".exe" : ""}`;
}

function reasonOf(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter(Boolean);
  const key = lines.find((l) => /denort|download|dns|network|connect/i.test(l));
  const reason = (key ?? lines.at(-1) ?? "unknown failure").replace(/^error:\s*/i, "");
  return reason.length > 160 ? `${reason.slice(0, 159)}…` : reason;
}

/** The `deno compile` arguments for one target (the binary keeps forgekit's V8 flags). */
export function compileArgs(target: string): string[] {
  return [
    "compile",
    "-A",
    V8_FLAGS_ARG,
    "--quiet",
    "--target",
    target,
    "-o",
    join(DIST, binaryName(target)),
    "main.ts",
  ];
}

/** Compiles one target; returns null on success or the reason it failed. */
export async function compileTarget(target: string): Promise<string | null> {
  const r = await deno(compileArgs(target));
  return r.ok ? null : reasonOf(r.stderr);
}

const USAGE = "Usage: deno task build [--require-binaries] [--bundle-only] [--target TRIPLE]…";

/** The build's options; a bad one is a usage error (exit 2), found before anything is built. */
function parseBuildArgs(args: string[]) {
  const { values, positionals } = parseCommandArgs("deno task build", args, {
    "require-binaries": { type: "boolean", default: false },
    "bundle-only": { type: "boolean", default: false },
    target: { type: "string", multiple: true },
    help: { type: "boolean", short: "h" },
  });
  if (positionals.length > 0) {
    throw usageError(
      `Unexpected argument: ${positionals[0]}`,
      "run: deno task build --help",
    );
  }
  for (const t of values.target ?? []) {
    if (!(TARGETS as readonly string[]).includes(t)) {
      throw usageError(`Unknown --target ${t}`, `use one of: ${TARGETS.join(", ")}`);
    }
  }
  // Options that would be ignored: said, not dropped.
  for (const name of ["target", "require-binaries"] as const) {
    const given = name === "target" ? (values.target ?? []).length > 0 : values[name];
    if (values["bundle-only"] && given) {
      throw usageError(
        `--${name} has no effect with --bundle-only (no binaries are built)`,
        `drop --bundle-only or --${name}`,
      );
    }
  }
  return values;
}

if (import.meta.main) {
  let values: ReturnType<typeof parseBuildArgs>;
  try {
    values = parseBuildArgs(Deno.args);
  } catch (err) {
    console.error(formatError(err));
    Deno.exit(exitCodeOf(err));
  }
  if (values.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  try {
    const bundle = await buildBundle();
    console.log(`build: wrote ${bundle} (forgekit ${VERSION})`);
  } catch (err) {
    console.error(`error: ${(err as Error).message}`);
    Deno.exit(1);
  }
  if (values["bundle-only"]) Deno.exit(0);

  const targets = values.target ?? [...TARGETS];
  const failed: string[] = [];
  let reason = "";
  for (const target of targets) {
    const why = await compileTarget(target);
    if (why === null) console.log(`build: wrote dist/${binaryName(target)}`);
    else {
      failed.push(target);
      reason ||= why;
    }
  }
  if (failed.length > 0) {
    const hint = Deno.env.get("DENORT_BIN")
      ? "DENORT_BIN is set but did not serve these targets"
      : "set DENORT_BIN to a denort binary for the host target";
    const line = `build: no binaries for ${
      failed.join(", ")
    }: deno compile could not get the denort runtime (${reason}; ${hint}); the bundle dist/forgekit.js was written`;
    if (values["require-binaries"]) {
      console.error(`error: ${line.replace(/^build: /, "")}`);
      Deno.exit(1);
    }
    console.log(line);
  }
}
