/** `forgekit fetch`: one request through the credential wrapper. */
import { basename, dirname, join } from "node:path";
import { CliError, parseCommandArgs, usageError, wantsHelp } from "../cli/mod.ts";
import { authFetch } from "./fetch.ts";
import { parseSha256, sha256Stream } from "./integrity.ts";
import { progressBar } from "./progress.ts";
import { redactUrl } from "./redact.ts";

/** Help text of `forgekit fetch`. */
export const FETCH_HELP =
  `forgekit fetch: make one HTTP request with the credentials auth.json assigns to its host

Usage: forgekit fetch URL [options]

Options:
  -o, --output FILE     Write the body to FILE (atomically) instead of stdout
      --sha256 HEX      Verify the body's SHA-256 (also sha256:HEX) before writing anything
  -X, --request METHOD  HTTP method (default GET, or POST with -d)
  -H, --header 'N: V'   Add a request header (repeatable)
  -d, --data DATA|@FILE Request body, or the contents of FILE
  -i, --include         Print the status line and response headers before the body
  -v, --verbose         Show every attempt, entry, scheme, status and redirect (tokens masked)
      --auth-file PATH  Use this auth.json (default: $FORGEKIT_AUTH_FILE or ~/.forgekit/auth.json)
  -h, --help            Show this help

Exit codes: 0 for a 2xx response, 1 for a final status of 400 or more or a failed
request, 2 for usage or configuration errors.

Examples:
  forgekit fetch https://api.github.com/user
  forgekit fetch -v https://api.bitbucket.org/2.0/repositories/ws/repo/src/main/catalog.json
  forgekit fetch https://ghe.corp.example/org/tool/releases/download/v1.2.0/tool.tar.gz \\
      -o tool.tar.gz --sha256 sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  forgekit fetch -X POST -H 'Content-Type: application/json' -d '{"name":"x"}' https://api.github.com/user/repos`;

function parseHeader(raw: string): [string, string] {
  const i = raw.indexOf(":");
  const name = i > 0 ? raw.slice(0, i).trim() : "";
  if (!name || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
    // Only the first word: the rest may be a token whose colon is missing.
    const word = raw.trim().split(/\s/)[0];
    const shown = word.length < raw.trim().length ? `${word} …` : word;
    throw usageError(
      `-H must be 'Name: value' (got: ${JSON.stringify(shown)})`,
      "e.g. -H 'Accept: application/json'",
    );
  }
  return [name, raw.slice(i + 1).trim()];
}

async function readData(data: string): Promise<Uint8Array<ArrayBuffer>> {
  if (!data.startsWith("@")) return new TextEncoder().encode(data);
  try {
    return await Deno.readFile(data.slice(1));
  } catch (err) {
    throw usageError(`Cannot read -d file ${data.slice(1)}`, "check the path after @", err);
  }
}

async function writeAll(w: WritableStreamDefaultWriter<Uint8Array>, chunk: Uint8Array) {
  await w.ready;
  await w.write(chunk);
}

/** Runs `forgekit fetch`. */
export async function runFetch(args: string[]): Promise<number> {
  if (wantsHelp(args)) {
    console.log(FETCH_HELP);
    return 0;
  }
  const { values, positionals } = parseCommandArgs("forgekit fetch", args, {
    output: { type: "string", short: "o" },
    sha256: { type: "string" },
    request: { type: "string", short: "X" },
    header: { type: "string", short: "H", multiple: true },
    data: { type: "string", short: "d", allowEmpty: true },
    include: { type: "boolean", short: "i" },
    verbose: { type: "boolean", short: "v" },
    "auth-file": { type: "string" },
  });
  if (positionals.length !== 1) {
    throw usageError(
      positionals.length === 0 ? "Missing URL" : `Expected one URL (got: ${positionals.join(" ")})`,
      "run: forgekit fetch URL",
    );
  }
  let url: URL;
  try {
    url = new URL(positionals[0]);
  } catch (err) {
    throw usageError(
      `Not a URL (got: ${JSON.stringify(positionals[0])})`,
      "e.g. https://api.github.com/user",
      err,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw usageError(
      `Unsupported URL scheme ${url.protocol} (got: ${redactUrl(url)})`,
      "use https:// or http://",
    );
  }
  const expected = values.sha256 !== undefined ? parseSha256(values.sha256) : null;
  if (values.output !== undefined) await checkOutputPath(values.output);
  const headers = new Headers();
  for (const h of values.header ?? []) headers.append(...parseHeader(h));
  const body = values.data !== undefined ? await readData(values.data) : undefined;
  const method = (values.request ?? (body ? "POST" : "GET")).toUpperCase();
  if (!/^[A-Z]+$/.test(method)) {
    throw usageError(`Invalid method ${JSON.stringify(values.request)}`, "e.g. -X POST");
  }

  const verbose = values.verbose ? (line: string) => console.error(line) : undefined;
  let res: Response;
  try {
    res = await authFetch(url, { method, headers, body }, {
      authFile: values["auth-file"],
      verbose,
    });
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`${method} ${redactUrl(url)} failed`, {
      hint: "check the URL, network and proxy settings",
      cause: err,
    });
  }

  const out = Deno.stdout.writable.getWriter();
  try {
    if (values.include) {
      const lines = [`HTTP/1.1 ${res.status} ${res.statusText}`];
      res.headers.forEach((v, k) => lines.push(`${k}: ${v}`));
      await writeAll(out, new TextEncoder().encode(lines.join("\r\n") + "\r\n\r\n"));
    }
    if (res.status >= 400) {
      if (values.include && res.body) { for await (const c of res.body) await writeAll(out, c); }
      else await res.body?.cancel();
      throw new CliError(
        `${method} ${redactUrl(url)} returned ${res.status} ${res.statusText}`.trimEnd(),
      );
    }
    const total = Number(res.headers.get("content-length") ?? NaN);
    const progress = progressBar(total);
    const digest = sha256Stream();
    if (values.output) {
      await saveAtomically(values.output, res, digest, expected, progress);
    } else if (expected !== null) {
      const chunks: Uint8Array[] = [];
      for await (const c of res.body ?? []) {
        digest.hash.update(c);
        chunks.push(c);
        progress.add(c.length);
      }
      progress.done();
      checkDigest(digest.hex(), expected, redactUrl(url));
      for (const c of chunks) await writeAll(out, c);
    } else {
      for await (const c of res.body ?? []) {
        progress.add(c.length);
        await writeAll(out, c);
      }
      progress.done();
    }
    return res.status >= 200 && res.status < 300 ? 0 : 1;
  } finally {
    await out.ready.catch(() => {});
    out.releaseLock();
  }
}

function checkDigest(actual: string, expected: string | null, what: string) {
  if (expected !== null && actual !== expected) {
    throw new CliError(`SHA-256 mismatch for ${what}: expected ${expected}, got ${actual}`, {
      hint: "nothing was written; check the --sha256 value or the source",
    });
  }
}

/** Refuses an -o path that cannot be written, before any request is made. */
async function checkOutputPath(dest: string): Promise<void> {
  const hint = "give -o a file path in an existing directory";
  const target = await Deno.stat(dest).catch(() => null); // if missing, its directory is checked
  if (target?.isDirectory) throw usageError(`-o ${dest} is a directory`, hint);
  const dir = dirname(dest);
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(dir);
  } catch (err) {
    const why = err instanceof Deno.errors.NotFound
      ? `the directory ${dir} does not exist`
      : err instanceof Deno.errors.NotADirectory
      ? `${dir} is not a directory`
      : `cannot use ${dir}`;
    throw usageError(`-o ${dest}: ${why}`, hint, err);
  }
  if (!info.isDirectory) throw usageError(`-o ${dest}: ${dir} is not a directory`, hint);
}

async function saveAtomically(
  dest: string,
  res: Response,
  digest: ReturnType<typeof sha256Stream>,
  expected: string | null,
  progress: ReturnType<typeof progressBar>,
) {
  const tmp = join(
    dirname(dest),
    `.${basename(dest)}.forgekit-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}.tmp`,
  );
  let file: Deno.FsFile;
  try {
    file = await Deno.open(tmp, { write: true, createNew: true, mode: 0o644 });
  } catch (err) {
    await res.body?.cancel();
    throw usageError(`Cannot write ${dest}`, "check that the directory is writable", err);
  }
  let ok = false;
  try {
    for await (const c of res.body ?? []) {
      digest.hash.update(c);
      progress.add(c.length);
      let off = 0;
      while (off < c.length) off += await file.write(c.subarray(off));
    }
    progress.done();
    await file.sync();
    file.close();
    checkDigest(digest.hex(), expected, res.url ? redactUrl(new URL(res.url)) : dest);
    await Deno.rename(tmp, dest).catch((err) => {
      throw new CliError(`Cannot write ${dest}`, { cause: err });
    });
    ok = true;
  } finally {
    if (!ok) {
      try {
        file.close();
      } catch { /* closed */ }
      await Deno.remove(tmp).catch(() => {});
    }
  }
}
