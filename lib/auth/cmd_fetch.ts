/** `forgekit fetch`: one request through the credential wrapper. */
import { CliError, parseCommandArgs, usageError, wantsHelp } from "../cli/mod.ts";
import { authFetch } from "./fetch.ts";
import { fileBody } from "./file_body.ts";
import { parseSha256, sha256Stream } from "./integrity.ts";
import { openOutput, type OutputFile } from "./output_file.ts";
import { progressBar } from "./progress.ts";
import { parseUrlArgument, redactUrl, redactUrlText } from "./redact.ts";
import { openSpool } from "./spool.ts";
import { parseSeconds, TransferTimer } from "./transfer_timer.ts";

/** `--idle-timeout` unless given: how long the server may send nothing. */
const DEFAULT_IDLE_TIMEOUT = 300;

/** Help text of `forgekit fetch`. */
export const FETCH_HELP =
  `forgekit fetch: make one HTTP request with the credentials auth.json assigns to its host

Usage: forgekit fetch URL [options]

Options:
  -o, --output FILE     Write the body to FILE (atomically) instead of stdout ("-": stdout)
      --sha256 HEX      Verify the body's SHA-256 (also sha256:HEX) before writing anything
  -m, --max-time SECS   Give up when the whole request and body take longer (default: no limit)
      --idle-timeout SECS
                        Give up when the server sends nothing for this long (default 300; 0: never)
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
  const value = raw.slice(i + 1).trim();
  // The runtime's own refusal quotes the value, which may be a token.
  if (/[^\t\x20-\x7e\x80-\xff]/.test(value)) {
    throw usageError(
      `-H ${name}: the value holds a line break or another character a header cannot carry`,
      "give the value on one line, in printable characters",
    );
  }
  return [name, value];
}

async function requestBody(
  data: string,
  timer: TransferTimer,
): Promise<Uint8Array<ArrayBuffer> | Blob> {
  if (!data.startsWith("@")) return new TextEncoder().encode(data);
  const path = data.slice(1);
  try {
    // Sending a file counts as activity: a slow upload is not an idle server.
    return await fileBody(path, { onRead: () => timer.waiting() });
  } catch (err) {
    throw usageError(`Cannot read -d file ${path}`, "check the path after @", err);
  }
}

/** Where the body goes: -o, or stdout. */
interface Sink {
  write(chunk: Uint8Array): Promise<void>;
}

const encoder = new TextEncoder();

const stdout: Sink = {
  async write(chunk) {
    for (let off = 0; off < chunk.length;) off += await Deno.stdout.write(chunk.subarray(off));
  },
};

/** Runs `forgekit fetch`. */
export async function runFetch(args: string[]): Promise<number> {
  if (wantsHelp(args)) {
    console.log(FETCH_HELP);
    return 0;
  }
  const { values, positionals } = parseCommandArgs("forgekit fetch", args, {
    output: { type: "string", short: "o" },
    sha256: { type: "string" },
    "max-time": { type: "string", short: "m" },
    "idle-timeout": { type: "string" },
    request: { type: "string", short: "X" },
    header: { type: "string", short: "H", multiple: true },
    data: { type: "string", short: "d", allowEmpty: true },
    include: { type: "boolean", short: "i" },
    verbose: { type: "boolean", short: "v" },
    "auth-file": { type: "string" },
  });
  if (positionals.length !== 1) {
    throw usageError(
      positionals.length === 0
        ? "Missing URL"
        : `Expected one URL (got: ${positionals.map(redactUrlText).join(" ")})`,
      "run: forgekit fetch URL",
    );
  }
  let url: URL;
  try {
    url = parseUrlArgument(positionals[0]);
  } catch (err) {
    throw usageError(
      `Not a URL (got: ${JSON.stringify(redactUrlText(positionals[0]))})`,
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
  const maxTime = values["max-time"] !== undefined
    ? parseSeconds("--max-time", values["max-time"])
    : null;
  const idleTimeout = values["idle-timeout"] !== undefined
    ? parseSeconds("--idle-timeout", values["idle-timeout"], { zero: true })
    : DEFAULT_IDLE_TIMEOUT;
  const headers = new Headers();
  for (const h of values.header ?? []) headers.append(...parseHeader(h));
  const method = (values.request ?? (values.data !== undefined ? "POST" : "GET")).toUpperCase();
  if (!/^[A-Z]+$/.test(method)) {
    throw usageError(`Invalid method ${JSON.stringify(values.request)}`, "e.g. -X POST");
  }
  const what = `${method} ${redactUrl(url)}`;
  const timer = new TransferTimer(what, { maxTime, idleTimeout });
  let output: OutputFile | null = null;
  try {
    const body = values.data !== undefined
      ? await timer.race(requestBody(values.data, timer))
      : undefined;
    // Opened before the request: a path that cannot be written is refused before anything is sent.
    // "-o -" is stdout, as in curl.
    if (values.output !== undefined && values.output !== "-") {
      output = await openWithin(timer, values.output);
    }
    const verbose = values.verbose ? (line: string) => console.error(line) : undefined;
    timer.waiting();
    let res: Response;
    try {
      res = await timer.race(
        authFetch(url, { method, headers, body, signal: timer.signal }, {
          authFile: values["auth-file"],
          verbose,
        }),
      );
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError(`${what} failed`, {
        hint: "check the URL, network and proxy settings",
        cause: err,
      });
    } finally {
      timer.busy();
    }
    return await timer.race(
      deliver(res, {
        what,
        shown: redactUrl(url),
        include: !!values.include,
        expected,
        output,
        timer,
      }),
    );
  } catch (err) {
    // The reader of stdout (or of -o's pipe) stopped reading, as `| head` does: nothing to add.
    if (err instanceof Deno.errors.BrokenPipe) return 1;
    throw err;
  } finally {
    timer.stop();
    await output?.discard();
  }
}

/** Opens -o within --max-time (a FIFO waits for its reader); one opened too late is discarded. */
async function openWithin(timer: TransferTimer, dest: string): Promise<OutputFile> {
  const opening = openOutput(dest);
  try {
    return await timer.race(opening);
  } catch (err) {
    opening.then((o) => o.discard(), () => {});
    throw err;
  }
}

interface Delivery {
  /** The request, for messages: `GET https://host/path` (redacted). */
  what: string;
  /** The URL, redacted. */
  shown: string;
  include: boolean;
  expected: string | null;
  output: OutputFile | null;
  timer: TransferTimer;
}

/** Writes the response where it goes and returns the exit code. */
async function deliver(res: Response, d: Delivery): Promise<number> {
  if (d.include) {
    const lines = [`HTTP/1.1 ${res.status} ${res.statusText}`];
    res.headers.forEach((v, k) => lines.push(`${k}: ${v}`));
    await stdout.write(encoder.encode(lines.join("\r\n") + "\r\n\r\n"));
  }
  if (res.status >= 400) {
    if (d.include) { for await (const c of readBody(res, d)) await stdout.write(c); }
    else await res.body?.cancel();
    throw new CliError(`${d.what} returned ${res.status} ${res.statusText}`.trimEnd());
  }
  const sink: Sink = d.output ?? stdout;
  // Verified before anything is written: where nothing can be taken back, held on disk first.
  const spool = d.expected !== null && (d.output === null || d.output.direct)
    ? await openSpool()
    : null;
  try {
    const progress = progressBar(Number(res.headers.get("content-length") ?? NaN));
    const digest = sha256Stream();
    for await (const c of readBody(res, d)) {
      digest.hash.update(c);
      progress.add(c.length);
      await (spool ?? sink).write(c);
    }
    progress.done();
    checkDigest(digest.hex(), d.expected, d.shown);
    if (spool) { for await (const c of await spool.readBack()) await sink.write(c); }
    await d.output?.commit();
  } finally {
    spool?.close();
  }
  return res.status >= 200 && res.status < 300 ? 0 : 1;
}

/**
 * The response body, chunk by chunk, with the idle limit running while
 * forgekit waits for each; a connection that breaks is an error naming the
 * request.
 */
async function* readBody(res: Response, d: Delivery): AsyncGenerator<Uint8Array> {
  if (res.body === null) return;
  const reader = res.body.getReader();
  let done = false;
  try {
    while (!done) {
      d.timer.waiting();
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        done = true;
        if (d.timer.signal.aborted) throw d.timer.signal.reason;
        throw new CliError(`${d.what} failed while reading the response body`, {
          hint: "the connection was closed or reset before the body was complete; try again",
          cause: err,
        });
      } finally {
        d.timer.busy();
      }
      done = chunk.done;
      if (chunk.value) yield chunk.value;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

function checkDigest(actual: string, expected: string | null, what: string) {
  if (expected !== null && actual !== expected) {
    throw new CliError(`SHA-256 mismatch for ${what}: expected ${expected}, got ${actual}`, {
      hint: "nothing was written; check the --sha256 value or the source",
    });
  }
}
