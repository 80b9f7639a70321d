/**
 * The sandbox: COMMAND runs in its own network and mount namespaces, where
 * the only way out is a relay to the proxy's Unix socket. The host side
 * re-executes forgekit under `unshare`; the inner side ({@linkcode sandboxInit})
 * brings up loopback, applies the mounts, starts the relay and runs COMMAND.
 */
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CliError, findCommand } from "../cli/mod.ts";
import { startRelay } from "./relay.ts";

/** What the inner side needs; written as JSON into the session directory. */
export interface SandboxSpec {
  sessionDir: string;
  socketPath: string;
  command: string;
  args: string[];
  /** The workload's environment before the proxy variables are added. */
  env: Record<string, string>;
  /** Extra variables (e.g. CA bundle paths) set after the proxy variables. */
  extraEnv: Record<string, string>;
  /** Files bind-mounted over paths inside the sandbox only. */
  bindFiles: { source: string; target: string }[];
  /** Directories covered by an empty tmpfs inside the sandbox only. */
  hideDirs: string[];
  /** Run COMMAND as this user/group (from SUDO_UID/SUDO_GID). */
  uid: number | null;
  gid: number | null;
}

/** The variables that point a workload at the proxy. */
export function proxyVars(port: number): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    ALL_PROXY: url,
    all_proxy: url,
    NO_PROXY: "localhost,127.0.0.1,::1",
    no_proxy: "localhost,127.0.0.1,::1",
  };
}

/** The command line that runs this forgekit again (deno run, bundle, or compiled binary). */
export function selfCommand(): string[] {
  const exe = Deno.execPath();
  if (/^deno(\.exe)?$/.test(basename(exe)) && Deno.mainModule.startsWith("file:")) {
    // The lockfile next to deno.json, as in this run: without it the inner run
    // would resolve version ranges again, which needs the registry, and the
    // sandbox has no network.
    return [exe, "run", "-A", "--quiet", fileURLToPath(Deno.mainModule)];
  }
  return [exe];
}

/**
 * Passes SIGINT and SIGTERM on to a child while it runs; returns the function
 * that stops doing so.
 */
export function forwardSignals(child: Deno.ChildProcess): () => void {
  const handlers = (["SIGINT", "SIGTERM"] as const).map((sig) => {
    const h = () => {
      try {
        child.kill(sig);
      } catch { /* gone */ }
    };
    Deno.addSignalListener(sig, h);
    return [sig, h] as const;
  });
  return () => handlers.forEach(([sig, h]) => Deno.removeSignalListener(sig, h));
}

/** Signal numbers for exit codes (128 + n). */
const SIGNO: Record<string, number> = { SIGINT: 2, SIGTERM: 15, SIGKILL: 9, SIGHUP: 1 };

/** Exit code of a finished child: its code, or 128 + the signal that ended it. */
export function exitCodeOf(status: Deno.CommandStatus): number {
  return status.signal ? 128 + (SIGNO[status.signal] ?? 1) : status.code;
}

/**
 * Runs the spec in new namespaces and resolves to COMMAND's exit code.
 * SIGINT and SIGTERM are passed on.
 */
export async function runSandboxed(spec: SandboxSpec): Promise<number> {
  if (Deno.build.os !== "linux") {
    throw new CliError(`The sandbox needs Linux namespaces; this is ${Deno.build.os}`, {
      hint: "use --no-sandbox (a program can then bypass the filter)",
      exitCode: 2,
    });
  }
  if (findCommand("unshare") === null) {
    throw new CliError("Cannot create the sandbox: the unshare command was not found", {
      hint: "install util-linux, or use --no-sandbox",
      exitCode: 2,
    });
  }
  if (findCommand("ip") === null) {
    throw new CliError("Cannot create the sandbox: the ip command was not found", {
      hint: "install iproute2, or use --no-sandbox",
      exitCode: 2,
    });
  }
  const specPath = join(spec.sessionDir, "sandbox.json");
  Deno.writeTextFileSync(specPath, JSON.stringify(spec), { mode: 0o600 });
  const rootless = Deno.uid() !== 0;
  const child = new Deno.Command("unshare", {
    args: [
      ...(rootless ? ["--user", "--map-root-user"] : []),
      "--net",
      "--mount",
      "--",
      ...selfCommand(),
      "firewall",
      "--internal-sandbox",
      specPath,
    ],
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  const stopForwarding = forwardSignals(child);
  let status: Deno.CommandStatus;
  try {
    status = await child.status;
  } finally {
    stopForwarding();
  }
  let ready = false;
  try {
    ready = Deno.statSync(join(spec.sessionDir, "sandbox-ready")).isFile;
  } catch { /* not ready */ }
  if (!ready) {
    // Neither unshare nor the forgekit inside said why: both print their own errors above.
    let why = `it exited (status ${status.code}) before it was ready (see the error above)`;
    try {
      why = Deno.readTextFileSync(join(spec.sessionDir, "sandbox-error")).trim();
    } catch { /* unshare itself failed; it printed why */ }
    throw new CliError(`Cannot create the sandbox: ${why}`, {
      hint: rootless
        ? "run as root (sudo), or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or use --no-sandbox"
        : "if the kernel refused network or mount namespaces, use --no-sandbox to run without isolation",
    });
  }
  return exitCodeOf(status);
}

async function run(cmd: string, args: string[]): Promise<void> {
  const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped", stdin: "null" })
    .output();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
}

/** Puts `source` at `target` inside this mount namespace only, never touching the host's files. */
async function bindFile(
  sessionDir: string,
  source: string,
  target: string,
  n: number,
): Promise<void> {
  let exists = false;
  try {
    exists = Deno.statSync(target).isFile;
  } catch { /* missing */ }
  if (exists) return await run("mount", ["--bind", source, target]);
  // The target does not exist: bind a private copy of its directory (plus the file) over it.
  const parent = dirname(target);
  const shadow = join(sessionDir, `shadow-${n}`);
  Deno.mkdirSync(shadow, { mode: 0o755 });
  try {
    for (const e of Deno.readDirSync(parent)) {
      if (e.isFile) Deno.copyFileSync(join(parent, e.name), join(shadow, e.name));
    }
  } catch { /* the directory does not exist on the host: created below */ }
  Deno.copyFileSync(source, join(shadow, basename(target)));
  Deno.chmodSync(join(shadow, basename(target)), 0o644);
  try {
    Deno.statSync(parent);
  } catch {
    throw new Error(`cannot place ${target}: ${parent} does not exist`);
  }
  await run("mount", ["--bind", shadow, parent]);
}

/** Covers a directory with an empty one, in this mount namespace only. */
function hideDir(dir: string): Promise<void> {
  return run("mount", ["-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", dir]);
}

function existsDir(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}

/** Other `/tmp/fw-*` directories (sessions and logs of other runs). */
function otherSessionDirs(own: string): string[] {
  const root = dirname(own);
  try {
    return [...Deno.readDirSync(root)]
      .filter((e) => e.isDirectory && e.name.startsWith("fw-") && join(root, e.name) !== own)
      .map((e) => join(root, e.name));
  } catch {
    return [];
  }
}

/**
 * The inner side, run by `forgekit firewall --internal-sandbox SPEC` inside the
 * new namespaces. Returns COMMAND's exit code.
 */
export async function sandboxInit(specPath: string): Promise<number> {
  const spec = JSON.parse(Deno.readTextFileSync(specPath)) as SandboxSpec;
  const fail = (why: string) => {
    Deno.writeTextFileSync(join(spec.sessionDir, "sandbox-error"), why);
    return 125;
  };
  let relay;
  try {
    await run("ip", ["link", "set", "lo", "up"]);
    let n = 0;
    for (const b of spec.bindFiles) await bindFile(spec.sessionDir, b.source, b.target, n++);
    // Hide this run's key directory and every other firewall session's
    // directory (their keys, sockets and logs) from the workload.
    for (const d of spec.hideDirs) await hideDir(d);
    for (const d of otherSessionDirs(spec.sessionDir)) {
      try {
        await hideDir(d);
      } catch (err) {
        // That run ended (and removed its directory) since the listing: nothing to hide.
        if (existsDir(d)) throw err;
      }
    }
    relay = startRelay(spec.socketPath);
  } catch (err) {
    return fail((err as Error).message);
  }
  const env = { ...spec.env, ...proxyVars(relay.port), ...spec.extraEnv };
  const asUser = spec.uid !== null && spec.gid !== null && spec.uid !== Deno.uid();
  const [cmd, args] = asUser
    ? ["setpriv", [
      `--reuid=${spec.uid}`,
      `--regid=${spec.gid}`,
      "--clear-groups",
      "--",
      spec.command,
      ...spec.args,
    ]]
    : [spec.command, spec.args];
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(cmd, {
      args,
      env,
      clearEnv: true,
      stdin: "inherit",
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();
  } catch (err) {
    relay.stop();
    Deno.writeTextFileSync(join(spec.sessionDir, "sandbox-ready"), "");
    console.error(
      `error: cannot run ${spec.command}: ${
        (err as Error).message
      } (check the command name and PATH)`,
    );
    return 127;
  }
  Deno.writeTextFileSync(join(spec.sessionDir, "sandbox-ready"), "");
  const stopForwarding = forwardSignals(child);
  const status = await child.status;
  stopForwarding();
  relay.stop();
  return exitCodeOf(status);
}
