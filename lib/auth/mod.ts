/**
 * lib/auth: the credential file (`~/.forgekit/auth.json`) and the one fetch
 * wrapper every outbound request of forgekit goes through.
 *
 * @example
 * ```ts
 * import { authFetch } from "./lib/auth/mod.ts";
 * const res = await authFetch("https://api.github.com/user", {}, { verbose: console.error });
 * ```
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";
import { runAuth } from "./cmd_auth.ts";
import { runFetch } from "./cmd_fetch.ts";

export { type AuthEvent, authFetch, type AuthFetchOptions, matchingEntries } from "./fetch.ts";
export { type AuthConfig, type AuthEntry, parseAuthConfig } from "./config.ts";
export { authFilePath, loadAuthConfig } from "./config_file.ts";
export { parseUrlArgument, redactUrlText } from "./redact.ts";

/** The commands lib/auth adds to forgekit. */
export const commands: Command[] = [
  {
    name: "fetch",
    summary: "Make an HTTP request with the credentials auth.json assigns",
    run: runFetch,
  },
  {
    name: "auth",
    summary: "Check, explain and initialise auth.json; git credential helper",
    run: runAuth,
  },
];
