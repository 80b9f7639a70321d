/**
 * The sandbox: COMMAND runs in its own network, mount and PID namespaces,
 * where the only way out is a relay to the proxy's Unix socket. The host
 * side re-executes forgekit under `unshare`; the inner side
 * ({@linkcode sandboxInit}) brings up loopback, applies the mounts, starts
 * the relay and runs COMMAND without the capabilities that would undo any
 * of it. When it ends, so does the namespace's init, and the kernel ends
 * every process left in the sandbox.
 */
import { signalExitCode } from "../cli/signals.ts";
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

/**
 * Whether a variable is one of those {@linkcode proxyVars} sets (any case).
 * The invoking environment's values (which may hold the upstream proxy's
 * password) never enter the sandbox: they are replaced there anyway.
 */
export function isProxyVar(name: string): boolean {
  return ["http_proxy", "https_proxy", "all_proxy", "no_proxy"].includes(name.toLowerCase());
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

/**
 * The command line that runs this forgekit again: a compiled binary is run
 * as itself; otherwise the Deno executable (whatever it is called:
 * `deno-2.9.6`, a version manager's copy) runs the main module. The bundle
 * (`dist/forgekit.js`, one file holding all of forgekit) is run with
 * `--no-config`, as its shebang runs it: a deno.json or package.json near
 * where it is installed must not change it. main.ts is run with the
 * deno.json and lockfile beside it, as in this run: without the lockfile the
 * inner run would resolve version ranges again, which needs the registry,
 * and the sandbox has no network.
 */
export function selfCommand(): string[] {
  const exe = Deno.execPath();
  if (Deno.build.standalone) return [exe];
  const main = Deno.mainModule;
  const script = main.startsWith("file:") ? fileURLToPath(main) : main;
  // This module's code inside the main module itself: forgekit is one file.
  const bundled = import.meta.url === main;
  return [exe, "run", "-A", "--quiet", ...(bundled ? ["--no-config"] : []), script];
}

/** The signals forgekit passes on to COMMAND, and cleans up after. */
export const FORWARDED_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Whether this process is in its terminal's foreground process group (from
 * /proc/self/stat: `pgrp` equals `tpgid`). A Ctrl-C or a hangup there is
 * sent by the terminal to the whole group, children included.
 */
export function inTerminalForeground(): boolean {
  try {
    const stat = Deno.readTextFileSync("/proc/self/stat");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const [pgrp, tpgid] = [Number(fields[2]), Number(fields[5])];
    return tpgid > 0 && pgrp === tpgid;
  } catch {
    return false;
  }
}

/**
 * Passes SIGINT, SIGTERM and SIGHUP on to a child while it runs; returns
 * the function that stops doing so. With `sharesTerminal` (a child in this
 * process's group), SIGINT and SIGHUP are not passed on while this process
 * is in its terminal's foreground: the terminal has sent them to the child
 * already, and a second SIGINT makes many programs stop at once instead of
 * cleanly.
 */
export function forwardSignals(
  child: { kill(signo: Deno.Signal): void },
  options: { sharesTerminal?: boolean } = {},
): () => void {
  const handlers = FORWARDED_SIGNALS.map((sig) => {
    const h = () => {
      if (options.sharesTerminal && sig !== "SIGTERM" && inTerminalForeground()) return;
      try {
        child.kill(sig);
      } catch { /* gone */ }
    };
    Deno.addSignalListener(sig, h);
    return [sig, h] as const;
  });
  return () => handlers.forEach(([sig, h]) => Deno.removeSignalListener(sig, h));
}

/** Exit code of a finished child: its code, or 128 + the signal that ended it. */
export function exitCodeOf(status: Deno.CommandStatus): number {
  return status.signal ? signalExitCode(status.signal) : status.code;
}

/** The commands the sandbox is made with, and the package each comes in. */
const TOOLS = {
  unshare: "util-linux",
  ip: "iproute2",
  setpriv: "util-linux",
  setsid: "util-linux",
};

/**
 * Throws a usage error (exit 2) when the sandbox cannot be made here: not
 * Linux, or one of its commands is missing. Checked before anything of a
 * run (its log directory, its session) is made.
 */
export function checkSandboxTools(): void {
  if (Deno.build.os !== "linux") {
    throw new CliError(`The sandbox needs Linux namespaces; this is ${Deno.build.os}`, {
      hint: "use --no-sandbox (a program can then bypass the filter)",
      exitCode: 2,
    });
  }
  for (const [cmd, pkg] of Object.entries(TOOLS)) {
    if (findCommand(cmd) === null) {
      throw new CliError(`Cannot create the sandbox: the ${cmd} command was not found`, {
        hint: `install ${pkg}, or use --no-sandbox`,
        exitCode: 2,
      });
    }
  }
}

/**
 * Runs the spec in new namespaces and resolves to COMMAND's exit code.
 * SIGINT, SIGTERM and SIGHUP are passed on. `listen` starts the proxy on
 * `spec.socketPath` once the sandbox's process exists: what is open then
 * is inherited (a node:net Unix listener is not close-on-exec), and the
 * proxy's socket must not reach COMMAND. COMMAND starts once the proxy
 * answers.
 */
export async function runSandboxed(
  spec: SandboxSpec,
  listen: () => Promise<unknown>,
): Promise<number> {
  checkSandboxTools();
  const env = Object.fromEntries(Object.entries(spec.env).filter(([k]) => !isProxyVar(k)));
  const specPath = join(spec.sessionDir, "sandbox.json");
  const written = { ...spec, env, outside: mountNamespace() };
  Deno.writeTextFileSync(specPath, JSON.stringify(written), { mode: 0o600 });
  const rootless = Deno.uid() !== 0;
  // A session of its own (setsid execs unshare in place: forgekit's child
  // is no process group leader): a Ctrl-C at the terminal reaches forgekit
  // only, which passes it on once. In the terminal's process group, the
  // forgekit inside would get it too, pass it on twice, and end with the
  // signal instead of COMMAND's status when the second came after COMMAND.
  // setpriv --pdeathsig: should forgekit itself be killed (SIGKILL, a
  // crash), unshare is killed too, and with it (--kill-child) the
  // namespace's init and every process in the sandbox, instead of COMMAND
  // running on with no proxy behind its relay. setpriv and setsid exec in
  // place, so the setting reaches unshare.
  const child = new Deno.Command("setpriv", {
    args: [
      "--pdeathsig",
      "KILL",
      "--",
      "setsid",
      "--wait",
      "unshare",
      ...(rootless ? ["--user", "--map-root-user"] : []),
      "--net",
      "--mount",
      "--ipc",
      // A PID namespace with a /proc of its own: COMMAND sees no process
      // outside, and none of its outlives the namespace's init, a shell that
      // reaps orphaned processes while it waits for the forgekit inside.
      "--pid",
      "--fork",
      "--kill-child",
      "--mount-proc",
      "--",
      "sh",
      "-c",
      '"$@"; exit $?',
      "sh",
      ...selfCommand(),
      "firewall",
      "--internal-sandbox",
      specPath,
    ],
    env,
    clearEnv: true,
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  const isReady = () => {
    try {
      return Deno.statSync(join(spec.sessionDir, "sandbox-ready")).isFile;
    } catch {
      return false;
    }
  };
  // unshare waits with SIGINT and SIGTERM blocked: signals go to the
  // forgekit inside, which passes them on to COMMAND once it runs (it is
  // ready); before that, the sandbox is ended.
  let interrupted: Deno.Signal | null = null;
  const stopForwarding = forwardSignals({
    kill(signo) {
      interrupted ??= signo;
      const inside = firstChild(firstChild(child.pid));
      if (inside !== null && isReady()) Deno.kill(inside, signo);
      else child.kill("SIGKILL");
    },
  });
  let status: Deno.CommandStatus;
  try {
    await listen().catch(async (err) => {
      child.kill("SIGKILL");
      await child.status;
      throw err;
    });
    status = await child.status;
  } finally {
    stopForwarding();
  }
  const ready = isReady();
  if (!ready && interrupted) return signalExitCode(interrupted);
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

/** Waits until the proxy, which forgekit starts alongside the sandbox, accepts connections. */
async function waitForProxy(path: string, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      (await Deno.connect({ transport: "unix", path })).close();
      return;
    } catch (err) {
      if (Date.now() > end) {
        throw new Error(`the proxy did not start listening on ${path}`, { cause: err });
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** A process's first child (`unshare --fork` makes one, the init; the init one, forgekit). */
function firstChild(pid: number | null): number | null {
  if (pid === null) return null;
  try {
    const first = Deno.readTextFileSync(`/proc/${pid}/task/${pid}/children`).trim().split(" ")[0];
    return first ? Number(first) : null;
  } catch {
    return null;
  }
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
function hideDir(dir: string, options = "size=16k,mode=0700"): Promise<void> {
  return run("mount", ["-t", "tmpfs", "-o", options, "tmpfs", dir]);
}

/**
 * The capabilities COMMAND keeps when it runs as root: those over files and
 * users, which builds and package managers use. Without the others it
 * cannot enter other namespaces, undo the mounts, trace processes or
 * change the network.
 */
const ROOT_CAPS = [
  "chown",
  "dac_override",
  "fowner",
  "fsetid",
  "kill",
  "net_bind_service",
  "setgid",
  "setuid",
];

/** Whether this process is in the host's user namespace (root there is the host's root). */
function inHostUserNamespace(): boolean {
  return /^\s*0\s+0\s+4294967295\s*$/.test(Deno.readTextFileSync("/proc/self/uid_map"));
}

/**
 * Makes the kernel's settings (/proc/sys, /proc/sysrq-trigger) and /sys
 * read-only in this mount namespace: the host's root can write them
 * without any capability (core_pattern and the like run programs outside).
 */
async function readOnlyKernelFiles(): Promise<void> {
  for (const path of ["/proc/sys", "/proc/sysrq-trigger"]) {
    if (!exists(path)) continue; // a kernel without magic SysRq
    await run("mount", ["--bind", path, path]);
    await run("mount", ["-o", "remount,bind,ro", path]);
  }
  const mounts = Deno.readTextFileSync("/proc/self/mountinfo").split("\n")
    .map((l) =>
      l.split(" ")[4]?.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)))
    )
    .filter((m) => m === "/sys" || m?.startsWith("/sys/"));
  for (const m of mounts) await run("mount", ["-o", "remount,bind,ro", m]);
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
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

/** The mount namespace this process is in (`mnt:[4026531841]`). */
function mountNamespace(): string {
  return Deno.readLinkSync("/proc/self/ns/mnt");
}

/**
 * The inner side, run by `forgekit firewall --internal-sandbox SPEC` inside the
 * new namespaces. Returns COMMAND's exit code.
 */
export async function sandboxInit(specPath: string): Promise<number> {
  const spec = JSON.parse(Deno.readTextFileSync(specPath)) as SandboxSpec & { outside?: string };
  // Its mounts (tmpfs over /run, bind mounts over the trust store) are for
  // the sandbox's own mount namespace: run by hand, on the host, they would
  // cover the host's.
  if (spec.outside === undefined || spec.outside === mountNamespace()) {
    throw new CliError("--internal-sandbox runs only inside the sandbox forgekit firewall makes", {
      hint: "run: forgekit firewall --allow-domains LIST -- COMMAND",
      exitCode: 2,
    });
  }
  const fail = (why: string) => {
    Deno.writeTextFileSync(join(spec.sessionDir, "sandbox-error"), why);
    return 125;
  };
  const asUser = spec.uid !== null && spec.gid !== null && spec.uid !== Deno.uid();
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
    // Where services listen on Unix sockets (Docker, systemd, D-Bus, a
    // user's session): they would act for COMMAND outside the sandbox. And
    // the host's POSIX shared memory (System V IPC is a namespace of its own).
    for (const [d, mode] of [["/run", "0755"], ["/var/run", "0755"], ["/dev/shm", "1777"]]) {
      if (existsDir(d) && !Deno.lstatSync(d).isSymlink) {
        await hideDir(d, `mode=${mode},nosuid,nodev`);
      }
    }
    if (!asUser && inHostUserNamespace()) await readOnlyKernelFiles();
    await waitForProxy(spec.socketPath);
    relay = startRelay(spec.socketPath);
  } catch (err) {
    return fail((err as Error).message);
  }
  const env = { ...spec.env, ...proxyVars(relay.port), ...spec.extraEnv };
  // No capability beyond ROOT_CAPS, ever: no_new_privs makes setuid programs
  // (sudo) and file capabilities give nothing.
  const args = [
    ...(asUser ? [`--reuid=${spec.uid}`, `--regid=${spec.gid}`, "--clear-groups"] : []),
    "--inh-caps=-all",
    `--bounding-set=-all,${ROOT_CAPS.map((c) => `+${c}`).join(",")}`,
    "--no-new-privs",
    "--",
    // A session of its own: without a controlling terminal, COMMAND cannot
    // type into the terminal forgekit runs in (TIOCSTI) for the shell to
    // run once forgekit is done.
    "setsid",
    "--wait",
    "--",
    spec.command,
    ...spec.args,
  ];
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("setpriv", {
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
  // Kept until this process exits: a signal that comes after COMMAND ended
  // must not end it, since its exit status is COMMAND's.
  forwardSignals(child);
  Deno.writeTextFileSync(join(spec.sessionDir, "sandbox-ready"), "");
  const status = await child.status;
  relay.stop();
  return exitCodeOf(status);
}

/**
 * The user COMMAND runs as when forgekit was invoked through sudo (from
 * `SUDO_UID` and `SUDO_GID`), or null. Only for a forgekit running as root,
 * and only with both numbers: run by another user (`sudo -u`), they name
 * the invoker, whom a sandbox in a user namespace cannot switch to; with
 * one missing, COMMAND would run as root with that user's HOME.
 *
 * @example
 * ```ts
 * sudoUser(0, { SUDO_UID: "1000", SUDO_GID: "1000" }); // { uid: 1000, gid: 1000 }
 * sudoUser(0, { SUDO_UID: "1000" }); // null
 * sudoUser(1000, { SUDO_UID: "1001", SUDO_GID: "1001" }); // null
 * ```
 */
export function sudoUser(
  uid: number | null,
  env: Record<string, string | undefined>,
): { uid: number; gid: number } | null {
  const [u, g] = [env.SUDO_UID, env.SUDO_GID];
  if (uid !== 0 || !/^\d{1,10}$/.test(u ?? "") || !/^\d{1,10}$/.test(g ?? "")) return null;
  return { uid: Number(u), gid: Number(g) };
}

/**
 * The environment of the user sudo was invoked by (HOME, USER, LOGNAME),
 * for a COMMAND that runs as that user: sudo sets them to root's, where
 * the user can write nothing (npm's cache in /root/.npm, git's
 * configuration). Empty when the user is not in the passwd database.
 */
export function sudoUserEnv(uid: number): Record<string, string> {
  let line = "";
  try {
    const out = new Deno.Command("getent", { args: ["passwd", String(uid)], stderr: "null" })
      .outputSync();
    line = new TextDecoder().decode(out.stdout).split("\n")[0];
  } catch { /* no getent: /etc/passwd below */ }
  if (line === "") {
    try {
      line = Deno.readTextFileSync("/etc/passwd").split("\n")
        .find((l) => l.split(":")[2] === String(uid)) ?? "";
    } catch { /* no passwd file */ }
  }
  const [name, , id, , , home] = line.split(":");
  if (!name || id !== String(uid) || !home) return {};
  return { HOME: home, USER: name, LOGNAME: name };
}
