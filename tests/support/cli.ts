/**
 * Runs the real forgekit program (main.ts) as a child process, the way a
 * user does, and collects its exit code and output.
 */
import { fileURLToPath } from "node:url";

/** Absolute path of the repository's main.ts. */
export const MAIN_TS = fileURLToPath(new URL("../../main.ts", import.meta.url));
/** Absolute path of the repository root. */
export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** Options of {@linkcode runForgekit}. */
export interface RunOptions {
  /** Extra environment; merged over a clean one (HOME points at a temp dir unless given). */
  env?: Record<string, string>;
  /** Text written to stdin (stdin is closed afterwards). */
  stdin?: string;
  cwd?: string;
  /** Run this script instead of main.ts (e.g. the built bundle). */
  script?: string;
  /** Kill the process after this many milliseconds (default 60 s). */
  timeoutMs?: number;
}

/** What a finished forgekit run gave back. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

let defaultHome: string | undefined;

/** A HOME directory with no `.forgekit`, shared by runs that do not set one. */
export function emptyHome(): string {
  defaultHome ??= Deno.makeTempDirSync({ prefix: "forgekit-home-" });
  return defaultHome;
}

/**
 * The environment a test run starts from: PATH, a clean HOME, and the
 * parent's Deno cache (a new HOME would otherwise mean a new, empty cache)
 * and system trust settings, so that nothing is downloaded again.
 */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: emptyHome(),
    NO_COLOR: "1",
    DENO_NO_UPDATE_CHECK: "1",
    DENO_DIR: denoDir(),
  };
  for (const name of ["SSL_CERT_FILE", "SSL_CERT_DIR", "DENO_TLS_CA_STORE"]) {
    const v = Deno.env.get(name);
    if (v) env[name] = v;
  }
  return env;
}

/** The Deno cache this process uses (DENO_DIR, else the platform default). */
export function denoDir(): string {
  const explicit = Deno.env.get("DENO_DIR");
  if (explicit) return explicit;
  const xdg = Deno.env.get("XDG_CACHE_HOME");
  if (xdg) return `${xdg}/deno`;
  const home = Deno.env.get("HOME") ?? "/root";
  return Deno.build.os === "darwin" ? `${home}/Library/Caches/deno` : `${home}/.cache/deno`;
}

/**
 * Runs `forgekit ARGS…` and waits for it.
 *
 * @example
 * ```ts
 * const r = await runForgekit(["--version"]);
 * assert.equal(r.code, 0);
 * ```
 */
export function runForgekit(args: string[], options: RunOptions = {}): Promise<RunResult> {
  return waitFor(spawnForgekit(args, options), options);
}

/**
 * Runs any program (git, the installed bundle) as {@linkcode runForgekit}
 * runs forgekit: the clean environment plus `env`, `stdin`, the time limit.
 */
export function runCommand(
  cmd: string,
  args: string[],
  options: Omit<RunOptions, "script"> = {},
): Promise<RunResult> {
  return waitFor(spawn(cmd, args, options), options);
}

/** Starts a program with the clean environment plus `env` (stdin piped when given). */
function spawn(cmd: string, args: string[], options: RunOptions): Deno.ChildProcess {
  return new Deno.Command(cmd, {
    args,
    cwd: options.cwd,
    env: { ...baseEnv(), ...options.env },
    clearEnv: true,
    stdin: options.stdin !== undefined ? "piped" : "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

/** Writes `stdin` (then closes it) and waits, killing the child after the time limit. */
async function waitFor(child: Deno.ChildProcess, options: RunOptions): Promise<RunResult> {
  if (options.stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(options.stdin));
    await w.close();
  }
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
  }, options.timeoutMs ?? 60_000);
  try {
    const out = await child.output();
    return {
      code: out.code,
      stdout: new TextDecoder().decode(out.stdout),
      stderr: new TextDecoder().decode(out.stderr),
    };
  } finally {
    clearTimeout(timer);
  }
}

/** Starts `forgekit ARGS…` and returns the child process (stdout/stderr piped). */
export function spawnForgekit(args: string[], options: RunOptions = {}): Deno.ChildProcess {
  return spawn(
    Deno.execPath(),
    ["run", "-A", "--quiet", options.script ?? MAIN_TS, ...args],
    options,
  );
}

/** What a run on a terminal gave back: what the terminal showed, and what stdout's file got. */
export interface TerminalResult {
  code: number;
  /** Everything written to the terminal (stderr, and stdout unless it went to a file). */
  terminal: string;
  /** What stdout wrote to its file, when `stdoutToFile` was set. */
  file: string | null;
}

/**
 * Runs `forgekit ARGS…` on a pseudo-terminal (util-linux `script`), as a
 * person at a terminal does; with `stdoutToFile`, as `forgekit … > FILE`,
 * so stdout is a file while stderr stays the terminal. NO_COLOR is unset.
 *
 * @example
 * ```ts
 * const r = await runOnTerminal(["auth", "doctor"], { stdoutToFile: true });
 * assert.ok(!r.file!.includes("\x1b["));
 * ```
 */
export async function runOnTerminal(
  args: string[],
  options: { env?: Record<string, string>; stdoutToFile?: boolean } = {},
): Promise<TerminalResult> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-tty-" });
  const out = `${dir}/stdout`;
  const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  const line = [Deno.execPath(), "run", "-A", "--quiet", MAIN_TS, ...args].map(quote).join(" ") +
    (options.stdoutToFile ? ` > ${quote(out)}` : "");
  const { NO_COLOR: _, ...env } = { ...baseEnv(), ...options.env };
  try {
    const r = await new Deno.Command("script", {
      args: ["-q", "-e", "-c", line, "/dev/null"],
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    return {
      code: r.code,
      terminal: new TextDecoder().decode(r.stdout),
      file: options.stdoutToFile ? await Deno.readTextFile(out) : null,
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
