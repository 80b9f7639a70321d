/** `forgekit stacks`: run the server, make tokens. */
import { dirname } from "node:path";
import {
  CliError,
  dispatchSubcommand,
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

The API is served at the root (like api.github.com) and under /api/v3 (like an
enterprise server). Prints one line with the URL. SIGINT/SIGTERM stop it cleanly.`;

const TOKEN_HELP = `forgekit stacks token create: make an API token for a user

Usage: forgekit stacks token create --user NAME [--db PATH]

Creates the user if needed and prints only the token on stdout. Tokens are
stored hashed (SHA-256); a lost token cannot be shown again.`;

async function openStore(path: string): Promise<Store> {
  if (path !== ":memory:") await Deno.mkdir(dirname(path), { recursive: true });
  try {
    return openSqliteStore(path);
  } catch (err) {
    throw new CliError(`Cannot open database ${path}`, {
      hint: "check the path and its permissions",
      exitCode: 2,
      cause: err,
    });
  }
}

function intOption(name: string, raw: string | undefined, dflt: number, max: number): number {
  if (raw === undefined) return dflt;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n > max) {
    throw usageError(
      `--${name} must be a whole number from 0 to ${max} (got: ${raw})`,
      `e.g. --${name} ${dflt}`,
    );
  }
  return n;
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
  });
  if (positionals.length) {
    throw usageError(`Unexpected argument: ${positionals[0]}`, "run: forgekit stacks serve --help");
  }
  const port = intOption("port", values.port, 8080, 65535);
  const backoffMs = intOption("hook-backoff-ms", values["hook-backoff-ms"], 2000, 3_600_000);
  const db = values.db ?? DEFAULT_DB;
  const hostname = values.host ?? "127.0.0.1";
  const store = await openStore(db);
  const worker = new DeliveryWorker(store, { backoffMs });
  const app = createApp({ store, notify: () => worker.wake() });
  const ac = new AbortController();
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({
      hostname,
      port,
      signal: ac.signal,
      onListen({ hostname: h, port: p }) {
        const host = h.includes(":") ? `[${h}]` : h;
        console.log(`forgekit stacks: listening on http://${host}:${p} (db ${db})`);
      },
    }, app.fetch);
  } catch (err) {
    await store.close();
    throw new CliError(`Cannot listen on ${hostname}:${port}`, {
      hint: "pick another --port, or stop what uses it",
      cause: err,
    });
  }
  worker.start();
  const stop = () => ac.abort();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await server.finished;
  Deno.removeSignalListener("SIGINT", stop);
  Deno.removeSignalListener("SIGTERM", stop);
  await worker.stop();
  await store.close();
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
