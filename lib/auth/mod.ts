/**
 * lib/auth: the credential file and the one fetch wrapper every outbound
 * request goes through.
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";

/** Options of {@linkcode authFetch}. */
export interface AuthFetchOptions {
  /** Path of auth.json; default FORGEKIT_AUTH_FILE or ~/.forgekit/auth.json. */
  authFile?: string;
  /** Receives one line per attempt / redirect (tokens masked), for `-v`. */
  verbose?: (line: string) => void;
  /** A Deno HTTP client (custom CA or proxy); default Deno's, which honours HTTPS_PROXY and DENO_CERT. */
  client?: Deno.HttpClient;
}

/**
 * Fetches a URL with the credentials auth.json assigns to its host.
 * (Placeholder until the lib/auth work lands: plain fetch, same signature.)
 */
export function authFetch(
  input: string | URL,
  init?: RequestInit,
  options: AuthFetchOptions = {},
): Promise<Response> {
  return fetch(input, { ...init, client: options.client } as RequestInit);
}

/** The commands lib/auth adds to forgekit. */
export const commands: Command[] = [];
