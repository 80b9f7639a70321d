/**
 * A request body read from a file (`forgekit fetch -d @FILE`) without
 * holding the file in memory: a regular file is streamed from disk for each
 * attempt and each 307/308 hop, with its size as Content-Length.
 */
import { openUnlinkedTemp } from "./spool.ts";

/** Bytes read from the file per chunk. */
const CHUNK = 256 * 1024;

/**
 * A Blob whose bytes stay in a regular file. Deno's fetch sends a
 * Content-Length for bytes and Blobs only (a ReadableStream goes chunked,
 * which many upload endpoints refuse), and it reads a Blob through its
 * `size` and `stream()`: so each fetch opens the file again and streams it.
 */
class FileBlob extends Blob {
  /** A path, opened again by each stream; or an open file, read again from its start. */
  readonly #source: string | Deno.FsFile;
  readonly #size: number;
  readonly #onRead: () => void;

  constructor(source: string | Deno.FsFile, size: number, onRead: () => void) {
    super();
    this.#source = source;
    this.#size = size;
    this.#onRead = onRead;
  }

  override get size(): number {
    return this.#size;
  }

  override stream(): ReadableStream<Uint8Array<ArrayBuffer>> {
    const source = this.#source;
    const size = this.#size;
    const onRead = this.#onRead;
    const name = typeof source === "string" ? source : "the request body";
    let file: Deno.FsFile | null = null;
    let sent = 0;
    const close = () => {
      if (typeof source === "string") file?.close();
      file = null;
    };
    return new ReadableStream({
      async pull(controller) {
        try {
          if (file === null) {
            if (typeof source === "string") file = await Deno.open(source);
            else await (file = source).seek(0, Deno.SeekMode.Start);
          }
          const buf = new Uint8Array(Math.min(CHUNK, Math.max(size - sent, 1)));
          const n = await file.read(buf);
          onRead();
          if (n === null || sent + n > size) {
            close();
            if (n === null && sent === size) controller.close();
            else controller.error(new Error(`${name} changed size while it was being sent`));
            return;
          }
          sent += n;
          controller.enqueue(buf.subarray(0, n));
        } catch (err) {
          close();
          controller.error(err);
        }
      },
      cancel: close,
    });
  }

  override async arrayBuffer(): Promise<ArrayBuffer> {
    return await new Response(this.stream()).arrayBuffer();
  }

  override async bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return new Uint8Array(await this.arrayBuffer());
  }

  override async text(): Promise<string> {
    return await new Response(this.stream()).text();
  }

  override slice(): Blob {
    throw new TypeError("A file body cannot be sliced");
  }
}

/**
 * The body of a file, kept out of memory: a regular file stays where it is
 * and is read again for each attempt; anything else (a FIFO, `/dev/stdin`,
 * `<(command)`) can be read only once, so it is first copied to an unlinked
 * temporary file, which stays open while the process runs. `onRead` is called as each chunk is read, to show upload
 * progress. Throws when the file cannot be read.
 *
 * @example
 * ```ts
 * const body = await fileBody("payload.json");
 * await authFetch(url, { method: "POST", body });
 * ```
 */
export async function fileBody(path: string, options: { onRead?: () => void } = {}): Promise<Blob> {
  const onRead = options.onRead ?? (() => {});
  const info = await Deno.stat(path);
  if (info.isFile) {
    (await Deno.open(path)).close(); // unreadable: said now, before any request
    return new FileBlob(path, info.size, onRead);
  }
  if (info.isDirectory) throw new Deno.errors.IsADirectory(`${path} is a directory`);
  const copy = await openUnlinkedTemp();
  try {
    await (await Deno.open(path)).readable.pipeTo(copy.writable, { preventClose: true });
    return new FileBlob(copy, (await copy.stat()).size, onRead);
  } catch (err) {
    copy.close();
    throw err;
  }
}
