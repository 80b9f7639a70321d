/** `forgekit stacks`: run the server, make tokens. */
import { dirname } from "node:path";
import {
  CliError,
  dispatchSubcommand,
  makeDirs,
  parseCommandArgs,
  usageError,
  wantsHelp,
} from "../cli/mod.ts";
import { createApp, hashToken } from "./app.ts";
import { DeliveryWorker } from "./deliveries.ts";
import { openSqliteStore } from "./sqlite_store.ts";
import type { Store } from "./store.ts";

/** Where the database lives unless --db says otherwise. */
export const DEFAULT_DB = "./forgekit-data/stacks.db";

/** How long past --busy-timeout-ms a stop waits for requests in flight. */
const SHUTDOWN_GRACE_MS = 10_000;

const HELP = `forgekit stacks: the GitHub-compatible pull-request and Stacks API server

Usage: forgekit stacks <command> [options]

Commands:
  serve          Run the server
  token create   Make an API token for a user (prints only the token)

Examples:
  forgekit stacks serve --port 8080
  TOKEN=$(forgekit stacks token create --user alice)
  curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/user`;

const SERVE_HELP = `forgekit stacks serve: run the stacks server

Usage: forgekit stacks serve [--db PATH] [--host 127.0.0.1] [--port 8080]

Options:
  --db PATH              SQLite database file (default ${DEFAULT_DB}; WAL mode)
  --host HOST            Address to listen on (default 127.0.0.1)
  --port PORT            Port (default 8080; 0 picks a free one)
  --hook-backoff-ms MS   First webhook retry delay, doubling per attempt (default 2000)
  --busy-timeout-ms MS   How long a write waits for another process's lock on the
                         database before it is answered 503 (default 5000)
  --allow-private-hook-targets
                         Let webhooks go to loopback, private, link-local and other
                         non-public addresses (default: refused, as on GitHub)
  --public-url URL       Where clients reach the server (https://forge.example.com):
                         the base of the URLs in responses and webhook payloads
                         (default: each request's own Host; set it when others
                         can send requests)

The API is served at the root (like api.github.com) and under /api/v3 (like an
enterprise server). Prints one line with the URL. SIGINT/SIGTERM stop it cleanly:
requests in flight are answered first (a second signal stops at once).`;

const TOKEN_HELP = `forgekit stacks token create: make an API token for a user

Usage: forgekit stacks token create --user NAME [--db PATH]

Creates the user if needed and prints only the token on stdout. Tokens are
stored hashed (SHA-256); a lost token cannot be shown again.

Options:
  --user NAME   The user (made if new)
  --db PATH     The server's database (default ${DEFAULT_DB})

Example:
  TOKEN=$(forgekit stacks token create --user alice)`;

/**
 * Creates the database file owner-only (0600) when it does not exist yet;
 * SQLite gives its -wal and -shm files the same mode. Returns whether it
 * created it. The file holds token hashes and webhook secrets.
 */
async function createPrivateFile(path: string): Promise<boolean> {
  try {
    (await Deno.open(path, { createNew: true, write: true, mode: 0o600 })).close();
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.AlreadyExists) return false;
    throw err;
  }
}

/** Warns once when an existing database can be read by other users. */
async function warnIfShared(path: string): Promise<void> {
  const info = await Deno.stat(path).catch(() => null);
  if (info?.isFile && info.mode !== null && (info.mode & 0o077) !== 0) {
    console.error(
      `warning: ${path} is readable by other users; it holds token hashes and webhook secrets (run: chmod 600 ${path}*)`,
    );
  }
}

async function openStore(path: string, busyTimeoutMs?: number): Promise<Store> {
  let made: string | null = null;
  let createdFile = false;
  try {
    if (path !== ":memory:") {
      made = await makeDirs(dirname(path), { mode: 0o700 });
      createdFile = await createPrivateFile(path);
    }
    const store = openSqliteStore(path, { busyTimeoutMs });
    // Only about a database it uses: a file it refuses gets its one line, not advice to chmod it.
    if (path !== ":memory:" && !createdFile) await warnIfShared(path);
    return store;
  } catch (err) {
    const newer = err instanceof RangeError; // a schema version newer than this forgekit's
    // A database that cannot be opened leaves no directory or file of ours
    // behind. A file made here that holds a newer forgekit's schema is no
    // longer ours: that forgekit opened it at the same moment, and uses it.
    if (!newer) {
      if (made) await Deno.remove(made, { recursive: true }).catch(() => {});
      else if (createdFile) await Deno.remove(path).catch(() => {});
    }
    const hint = newer
      ? "run the forgekit that wrote it, or pass another --db"
      : "check --db and its permissions";
    throw usageError(`Cannot open database ${path}`, hint, err);
  }
}

function intOption(
  name: string,
  raw: string | undefined,
  range: { fallback: number; min: number; max: number },
): number {
  if (raw === undefined) return range.fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < range.min || n > range.max) {
    throw usageError(
      `--${name} must be a whole number from ${range.min} to ${range.max} (got: ${raw})`,
      `e.g. --${name} ${range.fallback}`,
    );
  }
  return n;
}

/** The `--public-url` origin: http(s), a host, an optional port, no path, query or user. */
function publicOrigin(raw: string): string {
  let url: URL | null = null;
  try {
    url = new URL(raw);
  } catch { /* refused below */ }
  if (
    !url || !/^https?:$/.test(url.protocol) || url.username || url.password ||
    url.pathname !== "/" || url.search || url.hash
  ) {
    throw usageError(
      `--public-url must be http(s)://HOST[:PORT] with no path (got: ${raw})`,
      "e.g. --public-url https://forge.example.com",
    );
  }
  return url.origin;
}

/** Deno.serve's listen errors: a port that is taken is a failure, a bad --host a usage error. */
function listenError(err: unknown, hostname: string, port: number): CliError {
  if (err instanceof Deno.errors.AddrInUse || err instanceof Deno.errors.PermissionDenied) {
    return new CliError(`Cannot listen on ${hostname}:${port}`, {
      hint: "pick another --port, or stop what uses it",
      cause: err,
    });
  }
  return usageError(
    `--host ${JSON.stringify(hostname)} is not an address to listen on`,
    "use an address of this machine, e.g. --host 127.0.0.1 or --host 0.0.0.0",
    err,
  );
}

async function serve(args: string[]): Promise<number> {
  if (wantsHelp(args)) {
    console.log(SERVE_HELP);
    return 0;
  }
  const { values, positionals } = parseCommandArgs("forgekit stacks serve", args, {
    db: { type: "string" },
    host: { type: "string" },
    port: { type: "string" },
    "hook-backoff-ms": { type: "string" },
    "busy-timeout-ms": { type: "string" },
    "allow-private-hook-targets": { type: "boolean" },
    "public-url": { type: "string" },
  });
  if (positionals.length) {
    throw usageError(`Unexpected argument: ${positionals[0]}`, "run: forgekit stacks serve --help");
  }
  const port = intOption("port", values.port, { fallback: 8080, min: 0, max: 65535 });
  const backoffMs = intOption("hook-backoff-ms", values["hook-backoff-ms"], {
    fallback: 2000,
    min: 1, // 0 would spend every retry at once: a receiver down for a moment loses the event
    max: 3_600_000,
  });
  const busyTimeoutMs = intOption("busy-timeout-ms", values["busy-timeout-ms"], {
    fallback: 5000,
    min: 0,
    max: 600_000,
  });
  const publicUrl = values["public-url"] === undefined
    ? undefined
    : publicOrigin(values["public-url"]);
  const db = values.db ?? DEFAULT_DB;
  const hostname = values.host ?? "127.0.0.1";
  // Listen first, so that a taken port or a bad --host creates no database.
  let handler: Deno.ServeHandler<Deno.NetAddr> = () => new Response(null, { status: 503 });
  // Requests whose response is not sent yet: what a forced stop cuts off.
  let inFlight = 0;
  const settled = () => inFlight--;
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve(
      { hostname, port, onListen() {} },
      (req, info) => {
        inFlight++;
        info.completed.then(settled, settled);
        return handler(req, info);
      },
    );
  } catch (err) {
    throw listenError(err, hostname, port);
  }
  let store: Store;
  try {
    store = await openStore(db, busyTimeoutMs);
  } catch (err) {
    await server.shutdown();
    throw err;
  }
  const allowPrivateHookTargets = values["allow-private-hook-targets"] ?? false;
  const worker = new DeliveryWorker(store, {
    backoffMs,
    allowPrivateTargets: allowPrivateHookTargets,
  });
  const app = createApp({
    store,
    notify: () => worker.wake(),
    allowPrivateHookTargets,
    publicUrl,
  });
  handler = app.fetch;
  const { hostname: h, port: p } = server.addr;
  console.log(
    `forgekit stacks: listening on http://${h.includes(":") ? `[${h}]` : h}:${p} (db ${db})`,
  );
  worker.start();
  // A signal stops new connections; requests in flight are answered (a write
  // that was committed is never left without its response), for as long as a
  // write may wait for the lock plus a margin. A second signal stops at once.
  let stopNow = () => {};
  const stoppedNow = new Promise<void>((resolve) => stopNow = resolve);
  let grace: ReturnType<typeof setTimeout> | undefined;
  const stop = () => {
    if (grace !== undefined) return stopNow();
    grace = setTimeout(stopNow, busyTimeoutMs + SHUTDOWN_GRACE_MS);
    server.shutdown().catch(() => {});
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  const forced = await Promise.race([
    server.finished.then(() => false),
    stoppedNow.then(() => true),
  ]);
  clearTimeout(grace);
  Deno.removeSignalListener("SIGINT", stop);
  Deno.removeSignalListener("SIGTERM", stop);
  await worker.stop();
  // Forced with requests in flight, a write may still wait for the lock: the
  // process ends without it (what it began is not committed), rather than
  // wait on. Forced with none (only idle connections were left open, such as
  // an HTTP/2 client's), nothing was cut off.
  const cutOff = forced ? inFlight : 0;
  if (cutOff > 0) {
    console.error(`forgekit stacks: stopped without the requests still in flight: ${cutOff}`);
  } else await store.close();
  return 0;
}

function newToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(30));
  return `fks_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function tokenCreate(args: string[]): Promise<number> {
  if (wantsHelp(args)) {
    console.log(TOKEN_HELP);
    return 0;
  }
  const { values, positionals } = parseCommandArgs("forgekit stacks token create", args, {
    user: { type: "string" },
    db: { type: "string" },
  });
  if (positionals.length) {
    throw usageError(
      `Unexpected argument: ${positionals[0]}`,
      "run: forgekit stacks token create --help",
    );
  }
  const user = values.user;
  if (!user) {
    throw usageError("Missing --user NAME", "e.g. forgekit stacks token create --user alice");
  }
  if (!/^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/.test(user)) {
    throw usageError(
      `--user must be a login of letters, digits and hyphens (got: ${JSON.stringify(user)})`,
      "e.g. --user alice",
    );
  }
  const store = await openStore(values.db ?? DEFAULT_DB);
  try {
    const token = newToken();
    await store.transaction(async () => {
      const u = await store.ensureUser(user);
      await store.addToken(u.id, hashToken(token));
    });
    console.log(token);
  } finally {
    await store.close();
  }
  return 0;
}

/** Runs `forgekit stacks …`. */
export function runStacks(args: string[]): Promise<number> {
  return dispatchSubcommand("forgekit stacks", HELP, args, {
    serve,
    token: (rest) =>
      dispatchSubcommand("forgekit stacks token", TOKEN_HELP, rest, { create: tokenCreate }),
  });
}
