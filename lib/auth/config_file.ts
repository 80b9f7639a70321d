/**
 * Finding and reading auth.json: its location, the permission warning, and
 * a cache so that a hundred requests read the file once.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { CliError } from "../cli/mod.ts";
import { type AuthConfig, parseAuthConfig } from "./config.ts";

/**
 * The auth.json to use: the given path, else FORGEKIT_AUTH_FILE, else
 * `~/.forgekit/auth.json`. The home directory is HOME, or the account's own
 * when HOME is unset or empty: never the working directory, where a cloned
 * repository could plant a file that sends tokens elsewhere.
 */
export function authFilePath(explicit?: string): string {
  if (explicit) return explicit;
  const env = Deno.env.get("FORGEKIT_AUTH_FILE");
  if (env) return env;
  const home = homedir();
  if (!home) {
    throw new CliError("Cannot find the home directory for ~/.forgekit/auth.json", {
      hint: "set HOME, or FORGEKIT_AUTH_FILE to the file's path",
      exitCode: 2,
    });
  }
  return join(home, ".forgekit", "auth.json");
}

/** A path for messages, with the home directory shown as `~`. */
export function displayPath(path: string): string {
  const home = Deno.env.get("HOME");
  if (home && (path === home || path.startsWith(`${home}/`))) return `~${path.slice(home.length)}`;
  return path;
}

interface CacheSlot {
  /** When the file was last stat'ed (performance.now()). */
  checkedAt: number;
  mtime: number;
  size: number;
  config: AuthConfig;
  /** Read from a pipe (`<(command)`), which cannot be read again: kept for good. */
  once: boolean;
}

/** The largest auth.json forgekit reads: far above any real file, far below memory. */
const MAX_AUTH_FILE_BYTES = 4 * 1024 * 1024;

const cache = new Map<string, CacheSlot>();
/** How long a loaded file is trusted before it is stat'ed again. */
const RECHECK_MS = 500;
const warned = new Set<string>();

/** Where warnings go; tests and commands may replace it. */
export let warn = (line: string): void => console.error(line);

/** Replaces the warning sink (returns the previous one). */
export function setWarn(fn: (line: string) => void): (line: string) => void {
  const prev = warn;
  warn = fn;
  return prev;
}

/**
 * The config loaded within the recheck interval, without any I/O; undefined
 * when the file must be (re)read with {@linkcode loadAuthConfig}.
 */
export function recentAuthConfig(explicit?: string): AuthConfig | undefined {
  const recent = cache.get(authFilePath(explicit));
  return recent && performance.now() - recent.checkedAt < RECHECK_MS ? recent.config : undefined;
}

/**
 * Loads and validates auth.json; null when the file does not exist (every
 * request is then unauthenticated). Cached by path, size and mtime.
 */
export async function loadAuthConfig(explicit?: string): Promise<AuthConfig | null> {
  const path = authFilePath(explicit);
  const recent = cache.get(path);
  // A burst of requests stats the file once per interval, not once per request.
  if (recent && (recent.once || performance.now() - recent.checkedAt < RECHECK_MS)) {
    return recent.config;
  }
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path); // sync: an async stat costs a thread-pool round trip per request
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      if (explicit) {
        throw new CliError(`Cannot read ${path}: no such file`, {
          hint: "check --auth-file, or run: forgekit auth init",
          exitCode: 2,
          cause: err,
        });
      }
      return null;
    }
    throw new CliError(`Cannot read ${displayPath(path)}`, { exitCode: 2, cause: err });
  }
  const hint = "point --auth-file or FORGEKIT_AUTH_FILE at the auth.json file";
  if (info.isDirectory) {
    throw new CliError(`Cannot read ${displayPath(path)}: it is a directory`, {
      hint,
      exitCode: 2,
    });
  }
  // A pipe is fine (`--auth-file <(command)`); a device such as /dev/zero never ends.
  if (!info.isFile && !info.isFifo) {
    throw new CliError(`Cannot read ${displayPath(path)}: it is not a regular file or a pipe`, {
      hint,
      exitCode: 2,
    });
  }
  const mtime = info.mtime?.getTime() ?? 0;
  const slot = cache.get(path);
  if (slot && slot.mtime === mtime && slot.size === info.size) {
    slot.checkedAt = performance.now();
    return slot.config;
  }

  checkPermissions(path, info);
  let text: string | null;
  try {
    text = info.size > MAX_AUTH_FILE_BYTES ? null : await readAtMost(path, MAX_AUTH_FILE_BYTES);
  } catch (err) {
    throw new CliError(`Cannot read ${displayPath(path)}`, {
      hint: "check the file's permissions",
      exitCode: 2,
      cause: err,
    });
  }
  if (text === null) {
    throw new CliError(
      `Cannot read ${displayPath(path)}: it is larger than ${MAX_AUTH_FILE_BYTES >> 20} MiB`,
      { hint: "an auth.json holds a few entries; check that this is the right file", exitCode: 2 },
    );
  }
  const config = parseAuthConfig(text, path, displayPath(path));
  cache.set(path, {
    checkedAt: performance.now(),
    mtime,
    size: info.size,
    config,
    once: !info.isFile,
  });
  return config;
}

/** A file's text, or null when it holds more than `max` bytes (a pipe is read only that far). */
async function readAtMost(path: string, max: number): Promise<string | null> {
  const file = await Deno.open(path);
  try {
    const chunks: Uint8Array[] = [];
    let total = 0;
    for (;;) {
      const buf = new Uint8Array(64 * 1024);
      const n = await file.read(buf);
      if (n === null) break;
      total += n;
      if (total > max) return null;
      chunks.push(buf.subarray(0, n));
    }
    const all = new Uint8Array(total);
    let off = 0;
    for (const c of chunks) {
      all.set(c, off);
      off += c.length;
    }
    return new TextDecoder().decode(all);
  } finally {
    file.close();
  }
}

/**
 * Whether group or others can read the file. Only a regular file counts: a
 * pipe (`<(command)`) is read once, by whoever opens it first.
 */
export function readableByOthers(info: Deno.FileInfo): boolean {
  return info.isFile && info.mode !== null && (info.mode & 0o077) !== 0;
}

function checkPermissions(path: string, info: Deno.FileInfo): void {
  if (!readableByOthers(info) || warned.has(path)) return;
  warned.add(path);
  const shown = displayPath(path);
  warn(`warning: ${shown} is readable by other users (run: chmod 600 ${shown})`);
}
