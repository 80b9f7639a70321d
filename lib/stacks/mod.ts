/**
 * lib/stacks: a GitHub-compatible REST server for pull requests and the
 * Stacks API (Hono on Deno.serve, SQLite storage), and its client.
 *
 * @example
 * ```ts
 * import { createApp, openSqliteStore } from "./lib/stacks/mod.ts";
 * const app = createApp({ store: openSqliteStore(":memory:") });
 * ```
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";
import { runStack } from "./cmd_stack.ts";
import { runStacks } from "./cmd_stacks.ts";

export { API_VERSIONS, createApp, hashToken } from "./app.ts";
export { openSqliteStore } from "./sqlite_store.ts";
export type { Store } from "./store.ts";
export { DeliveryWorker, signature } from "./deliveries.ts";

/** The commands lib/stacks adds to forgekit. */
export const commands: Command[] = [
  {
    name: "stacks",
    summary: "Run the pull-request and Stacks API server; make tokens",
    run: runStacks,
  },
  {
    name: "stack",
    summary: "List, view, create, extend and dissolve stacks (client)",
    run: runStack,
  },
];
