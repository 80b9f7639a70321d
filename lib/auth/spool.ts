/**
 * A response body held back until `--sha256` has verified it, when it goes
 * somewhere that cannot take it back (stdout, a pipe, a device): kept on
 * disk, not in memory, in a temporary file that is unlinked at once, so that
 * nothing is left behind however forgekit ends.
 */

/** A body written once, then read back once. */
export interface Spool {
  /** Appends a chunk. */
  write(chunk: Uint8Array): Promise<void>;
  /** Everything written, from the start; the spool is closed once it has been read. */
  readBack(): Promise<ReadableStream<Uint8Array<ArrayBuffer>>>;
  /** Closes the spool without reading it back; safe to call twice. */
  close(): void;
}

/**
 * Opens a spool in the temporary directory ($TMPDIR).
 *
 * @example
 * ```ts
 * const spool = await openSpool();
 * for await (const chunk of res.body!) await spool.write(chunk);
 * await (await spool.readBack()).pipeTo(Deno.stdout.writable);
 * ```
 */
export async function openSpool(): Promise<Spool> {
  const file = await openUnlinkedTemp();
  let open = true;
  return {
    async write(chunk) {
      for (let off = 0; off < chunk.length;) off += await file.write(chunk.subarray(off));
    },
    async readBack() {
      await file.seek(0, Deno.SeekMode.Start);
      open = false; // the stream closes the file when it ends or is cancelled
      return file.readable;
    },
    close() {
      if (open) file.close();
      open = false;
    },
  };
}

/**
 * A new temporary file in $TMPDIR, open for reading and writing, whose name
 * is already removed: its space is freed when it is closed or forgekit ends.
 */
export async function openUnlinkedTemp(): Promise<Deno.FsFile> {
  const path = await Deno.makeTempFile({ prefix: "forgekit-spool-" });
  try {
    return await Deno.open(path, { read: true, write: true });
  } finally {
    await Deno.remove(path);
  }
}
