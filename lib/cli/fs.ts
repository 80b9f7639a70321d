/** File-system steps that commands share. */
import { dirname, join, resolve } from "node:path";

/**
 * Creates `dir` and its missing parents. Resolves to the topmost directory it
 * created, so that a command that fails later can remove what it made, or
 * null when `dir` already existed. A part of the path that exists but is not
 * a directory is a `Deno.errors.NotADirectory` naming it.
 *
 * @example
 * ```ts
 * const made = await makeDirs("./data/db");
 * try {
 *   await work();
 * } catch (err) {
 *   if (made) await Deno.remove(made, { recursive: true });
 *   throw err;
 * }
 * ```
 */
export async function makeDirs(
  dir: string,
  options: { mode?: number } = {},
): Promise<string | null> {
  let top: string | null = null;
  for (let d = resolve(dir); d !== dirname(d); d = dirname(d)) {
    const info = await Deno.stat(d).catch(() => null);
    if (info?.isDirectory) break;
    if (info) throw new Deno.errors.NotADirectory(`${d} is not a directory`);
    top = d;
  }
  try {
    await Deno.mkdir(dir, { recursive: true, mode: options.mode });
  } catch (err) {
    if (top) await Deno.remove(top, { recursive: true }).catch(() => {});
    throw err;
  }
  return top;
}

/**
 * Where a command would be run from: `cmd` itself when it names a path (has
 * a `/`), else the first executable file of that name on PATH; null when
 * there is none.
 *
 * @example
 * ```ts
 * findCommand("sh") // "/usr/bin/sh"
 * ```
 */
export function findCommand(cmd: string, path = Deno.env.get("PATH") ?? ""): string | null {
  if (cmd === "") return null;
  const candidates = cmd.includes("/") ? [cmd] : path.split(":").filter((d) => d !== "").map((
    d,
  ) => join(d, cmd));
  for (const c of candidates) {
    try {
      const info = Deno.statSync(c);
      if (info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0) return c;
    } catch { /* next */ }
  }
  return null;
}

/** Whether `path` is a regular file (false when it cannot be read). */
export function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}
