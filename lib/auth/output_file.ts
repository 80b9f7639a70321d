/**
 * The `-o FILE` destination of `forgekit fetch`, opened before any request.
 *
 * A regular file (or a path that does not exist yet) is written atomically:
 * to a temporary file beside it, renamed into place once the body is
 * complete and verified, keeping an existing file's permissions. A symbolic
 * link is followed: the file it names is the one replaced (or created). A
 * device, FIFO or `/dev/stdout`-style descriptor link is written through,
 * as curl and wget do: renaming over it would replace `/dev/null` itself.
 */
import { dirname, join, resolve } from "node:path";
import { CliError, onTerminationSignal, usageError } from "../cli/mod.ts";

/** How `-o` writes to what its path names. */
export type OutputMode =
  /** An existing regular file: a temporary file renamed over it, with its permission bits. */
  | { kind: "replace"; mode: number }
  /** Nothing there yet: a temporary file renamed into place. */
  | { kind: "create" }
  /** A device, FIFO or socket: bytes go straight to it; nothing can be taken back. */
  | { kind: "direct" };

/**
 * How `-o` writes to a path, from what it is (after symbolic links), or why
 * it cannot. Pure.
 *
 * @example
 * ```ts
 * outputMode(null); // { kind: "create" }
 * outputMode(Deno.statSync("/dev/null")); // { kind: "direct" }
 * ```
 */
export function outputMode(info: Deno.FileInfo | null): OutputMode | { problem: string } {
  if (info === null) return { kind: "create" };
  if (info.isDirectory) return { problem: "is a directory" };
  if (info.isFile) return { kind: "replace", mode: (info.mode ?? 0o644) & 0o777 };
  return { kind: "direct" };
}

/** An open `-o` destination. */
export interface OutputFile {
  /** Whether bytes go straight to the destination (a device or pipe): none can be taken back. */
  readonly direct: boolean;
  /** Appends a chunk of the body. */
  write(chunk: Uint8Array): Promise<void>;
  /** Makes what was written the destination's content (renames the temporary file into place). */
  commit(): Promise<void>;
  /** Removes the temporary file, leaving the destination as it was; safe to call twice. */
  discard(): Promise<void>;
}

const HINT = "give -o a file path in an existing directory";
const MAX_LINKS = 40;

/**
 * Opens the `-o` destination: checks the path and creates the temporary
 * file (or opens the device), so that a path that cannot be written is
 * refused before any request is made. Until commit or discard, SIGINT,
 * SIGTERM and SIGHUP remove the temporary file before forgekit exits.
 */
export async function openOutput(dest: string): Promise<OutputFile> {
  if (dest.endsWith("/")) throw usageError(`-o ${dest} names a directory`, HINT);
  const target = await followLinks(dest);
  const mode = outputMode(target.info);
  if ("problem" in mode) throw usageError(`-o ${dest} ${mode.problem}`, HINT);
  if (mode.kind === "direct" || target.descriptor) {
    const file = await openOrRefuse(dest, target.path, {
      write: true,
      truncate: mode.kind === "replace",
      hint: "check that it is writable",
    });
    return directOutput(dest, file);
  }
  await checkDirectory(dest, dirname(target.path));
  return await atomicOutput(dest, target.path, target.info);
}

/** What a path finally names after its symbolic links, which may not exist yet. */
interface LinkTarget {
  path: string;
  info: Deno.FileInfo | null;
  /** A link into /proc (`/dev/stdout`, `/dev/fd/3`): an open descriptor, written through. */
  descriptor: boolean;
}

async function followLinks(dest: string): Promise<LinkTarget> {
  let path = resolve(dest);
  for (let links = 0;; links++) {
    let info: Deno.FileInfo | null;
    try {
      info = await Deno.lstat(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return { path, info: null, descriptor: false };
      throw refused(dest, dirname(path), err);
    }
    if (!info.isSymlink) return { path, info, descriptor: false };
    // /proc/self/fd/N reads as "pipe:[123]" and the like: only the kernel can follow it.
    if (await inProc(dirname(path))) {
      return { path: dest, info: await Deno.stat(dest).catch(() => null), descriptor: true };
    }
    if (links === MAX_LINKS) {
      throw usageError(`-o ${dest}: too many levels of symbolic links`, HINT);
    }
    path = resolve(dirname(path), await Deno.readLink(path));
  }
}

/** Whether a directory is inside /proc, however it is reached (`/dev/fd` is `/proc/self/fd`). */
async function inProc(dir: string): Promise<boolean> {
  const real = await Deno.realPath(dir).catch(() => dir);
  return real === "/proc" || real.startsWith("/proc/");
}

async function checkDirectory(dest: string, dir: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(dir);
  } catch (err) {
    throw refused(dest, dir, err);
  }
  if (!info.isDirectory) throw usageError(`-o ${dest}: ${dir} is not a directory`, HINT);
}

/** The error for a directory `-o` cannot be written in. */
function refused(dest: string, dir: string, err: unknown): CliError {
  const why = err instanceof Deno.errors.NotFound
    ? `the directory ${dir} does not exist`
    : err instanceof Deno.errors.NotADirectory
    ? `${dir} is not a directory`
    : `cannot use ${dir}`;
  return usageError(`-o ${dest}: ${why}`, HINT, err);
}

async function openOrRefuse(
  dest: string,
  path: string,
  options: Deno.OpenOptions & { hint: string },
): Promise<Deno.FsFile> {
  const { hint, ...open } = options;
  try {
    return await Deno.open(path, open);
  } catch (err) {
    throw usageError(`Cannot write ${dest}`, hint, err);
  }
}

async function writeAll(file: Deno.FsFile, dest: string, chunk: Uint8Array): Promise<void> {
  try {
    for (let off = 0; off < chunk.length;) off += await file.write(chunk.subarray(off));
  } catch (err) {
    if (err instanceof Deno.errors.BrokenPipe) throw err; // the reader left: see cmd_fetch
    throw new CliError(`Cannot write ${dest}`, { cause: err });
  }
}

function directOutput(dest: string, file: Deno.FsFile): OutputFile {
  let open = true;
  const close = () => {
    if (open) file.close();
    open = false;
  };
  return {
    direct: true,
    write: (chunk) => writeAll(file, dest, chunk),
    commit: () => Promise.resolve(close()),
    discard: () => Promise.resolve(close()),
  };
}

async function atomicOutput(
  dest: string,
  path: string,
  existing: Deno.FileInfo | null,
): Promise<OutputFile> {
  // Short, so that any valid file name still fits beside it (NAME_MAX is 255 bytes).
  const tmp = join(dirname(path), `.forgekit-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}.tmp`);
  // Owner-only until the replaced file's mode is put back, just before the rename.
  const file = await openOrRefuse(dest, tmp, {
    write: true,
    createNew: true,
    mode: existing ? 0o600 : 0o666,
    hint: `check that ${dirname(path)} is writable`,
  });
  const removeTmp = () => {
    try {
      Deno.removeSync(tmp);
    } catch { /* already gone */ }
  };
  const stopSignals = onTerminationSignal(removeTmp);
  let open = true;
  let renamed = false;
  let finished = false;
  const finish = async (keep: boolean) => {
    if (finished) return;
    finished = true;
    try {
      if (keep) {
        await file.sync();
        file.close();
        open = false;
        if (existing) await keepMetadata(tmp, existing);
        await Deno.rename(tmp, path);
        renamed = true;
      }
    } catch (err) {
      throw new CliError(`Cannot write ${dest}`, { cause: err });
    } finally {
      if (open) file.close();
      if (!renamed) removeTmp();
      stopSignals();
    }
  };
  return {
    direct: false,
    write: (chunk) => writeAll(file, dest, chunk),
    commit: () => finish(true),
    discard: () => finish(false),
  };
}

/** Gives the temporary file the replaced file's permission bits, and its owner when allowed. */
async function keepMetadata(tmp: string, existing: Deno.FileInfo): Promise<void> {
  await Deno.chmod(tmp, (existing.mode ?? 0o644) & 0o777);
  if (existing.uid !== null && existing.gid !== null) {
    // Only root may give a file away; anyone else keeps it as theirs, as cp does.
    await Deno.chown(tmp, existing.uid, existing.gid).catch(() => {});
  }
}
