/**
 * The session directory `/tmp/fw-<timestamp>/` (mode 0700): the proxy's Unix
 * socket, the ssl-bump key, and a pid file so that a later run can remove
 * the directories of runs whose process is gone.
 */
import { join } from "node:path";

/** Where session directories live. */
export const SESSION_ROOT = "/tmp";

/** A session directory. */
export interface Session {
  id: string;
  dir: string;
  socketPath: string;
  remove(): void;
}

function timestamp(): string {
  return new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
}

function alive(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes `fw-*` session directories whose process is gone. Returns how
 * many. Only directories this user owns with a pid file, as
 * {@linkcode createSession} makes them, are taken for sessions: another
 * user's, or a directory of the same form that holds no pid file (a
 * `--log-dir` named like one), are left alone.
 */
export function removeStaleSessions(root = SESSION_ROOT): number {
  let removed = 0;
  const uid = Deno.uid();
  for (const e of Deno.readDirSync(root)) {
    if (!e.isDirectory || !/^fw-\d{8}-\d{6}-[0-9a-f]+$/.test(e.name)) continue;
    const dir = join(root, e.name);
    let pid = NaN;
    try {
      if (Deno.lstatSync(dir).uid !== uid) continue;
      const file = join(dir, "pid");
      if (!Deno.lstatSync(file).isFile) continue;
      pid = Number(Deno.readTextFileSync(file).trim());
    } catch {
      continue; // no pid file: not a session (or one still being made)
    }
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) continue;
    try {
      Deno.removeSync(dir, { recursive: true });
      removed++;
    } catch { /* another run removed it */ }
  }
  return removed;
}

/** Creates this run's session directory. */
export function createSession(root = SESSION_ROOT): Session {
  const id = `${timestamp()}-${crypto.randomUUID().slice(0, 8)}`;
  const dir = join(root, `fw-${id}`);
  Deno.mkdirSync(dir, { mode: 0o700 });
  Deno.chmodSync(dir, 0o700);
  Deno.writeTextFileSync(join(dir, "pid"), `${Deno.pid}\n`, { mode: 0o600 });
  let gone = false;
  return {
    id,
    dir,
    socketPath: join(dir, "proxy.sock"),
    remove() {
      if (gone) return;
      gone = true;
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch { /* already gone */ }
    },
  };
}
