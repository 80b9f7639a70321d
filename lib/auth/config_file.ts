/**
 * Finding and reading auth.json: its location, the permission warning, and
 * a cache so that a hundred requests read the file once.
 */
import { homedir } from "node:os";
import { basename, join } from "node:path";
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
}

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
  if (recent && performance.now() - recent.checkedAt < RECHECK_MS) return recent.config;
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
  if (info.isDirectory) {
    throw new CliError(`Cannot read ${displayPath(path)}: it is a directory`, {
      hint: "point --auth-file or FORGEKIT_AUTH_FILE at the auth.json file",
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
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    throw new CliError(`Cannot read ${displayPath(path)}`, {
      hint: "check the file's permissions",
      exitCode: 2,
      cause: err,
    });
  }
  const config = parseAuthConfig(text, path, basename(path));
  cache.set(path, { checkedAt: performance.now(), mtime, size: info.size, config });
  return config;
}

/** Whether group or others can read the file. */
export function readableByOthers(info: Deno.FileInfo): boolean {
  return info.mode !== null && (info.mode & 0o077) !== 0;
}

function checkPermissions(path: string, info: Deno.FileInfo): void {
  if (!readableByOthers(info) || warned.has(path)) return;
  warned.add(path);
  const shown = displayPath(path);
  warn(`warning: ${shown} is readable by other users (run: chmod 600 ${shown})`);
}
