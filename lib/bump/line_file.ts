/**
 * A log file written in batches of lines: the access log, the bodies log.
 *
 * @module
 */
/** How long a line may wait to be written. */
export const FLUSH_MS = 50;

/**
 * Appends one line per item to a file opened with
 * {@linkcode openLogFile}. Items become lines when written, at most
 * {@linkcode FLUSH_MS} later, so that neither the formatting nor a file
 * write is on a request's path, nor made once per request.
 */
export class LineFile<T> {
  readonly path: string;
  #file: Deno.FsFile;
  #toLine: (item: T) => string;
  #enc = new TextEncoder();
  #pending: T[] = [];
  #closed = false;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(path: string, toLine: (item: T) => string) {
    this.path = path;
    this.#file = openLogFile(path);
    this.#toLine = toLine;
  }

  /** Queues one item's line (dropped once {@linkcode LineFile.close} was called). */
  push(item: T): void {
    if (this.#closed) return;
    this.#pending.push(item);
    this.#timer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Writes the pending lines now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.length === 0) return;
    let text = "";
    for (const item of this.#pending) text += this.#toLine(item) + "\n";
    this.#pending = [];
    const bytes = this.#enc.encode(text);
    for (let off = 0; off < bytes.length;) off += this.#file.writeSync(bytes.subarray(off));
  }

  /** Flushes and closes. */
  close(): void {
    if (this.#closed) return;
    this.flush();
    this.#closed = true;
    this.#file.close();
  }
}

/**
 * Opens a log file for appending without following a symbolic link, so that
 * whoever can write to its directory cannot point a run (perhaps root's)
 * at another file: a new file is created exclusively (mode 0600; an
 * exclusive create fails on a link, even a dangling one), an existing one
 * must be a regular file, and is the file that was checked once open.
 */
export function openLogFile(path: string): Deno.FsFile {
  for (let attempt = 0;; attempt++) {
    let before: Deno.FileInfo | null = null;
    try {
      before = Deno.lstatSync(path);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    if (before === null) {
      try {
        return Deno.openSync(path, { append: true, createNew: true, mode: 0o600 });
      } catch (err) {
        // Made between the check and the create: checked again.
        if (err instanceof Deno.errors.AlreadyExists && attempt < 3) continue;
        throw err;
      }
    }
    if (!before.isFile) {
      throw new Error(
        `${path} is ${before.isSymlink ? "a symbolic link" : "not a regular file"}`,
      );
    }
    const file = Deno.openSync(path, { append: true });
    const opened = file.statSync();
    if (opened.ino === before.ino && opened.dev === before.dev) return file;
    file.close();
    if (attempt >= 3) throw new Error(`${path} was replaced while it was opened`);
  }
}
