/**
 * git's credential-helper protocol over auth.json: `key=value` lines in,
 * `username=`/`password=` out. Decisions are pure; reading the input is the
 * one piece of I/O, and stops at the blank line that ends it.
 */
import type { AuthConfig, AuthEntry } from "./config.ts";
import { matchAnyHost, normalizeHost } from "./host_pattern.ts";

/**
 * Parses git's `key=value` lines up to the first blank line. Unknown keys,
 * repeated `key[]=` keys and lines without `=` are kept or skipped harmlessly:
 * only `protocol` and `host` decide.
 *
 * @example
 * ```ts
 * parseCredentialInput("protocol=https\nhost=github.com\n\n").get("host"); // "github.com"
 * ```
 */
export function parseCredentialInput(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const l = line.replace(/\r$/, "");
    if (l === "") break;
    const i = l.indexOf("=");
    if (i > 0) out.set(l.slice(0, i), l.slice(i + 1));
  }
  return out;
}

/** The most a request may hold; git's are a few hundred bytes. */
const MAX_INPUT = 64 * 1024;

/**
 * Reads git's request from `stream` up to the blank line that ends it (or
 * the end of the input), without waiting for the writer to close: the
 * protocol ends a request with a blank line, and a caller may keep the pipe
 * open for the answer.
 *
 * @example
 * ```ts
 * const input = await readCredentialInput(Deno.stdin.readable);
 * ```
 */
export async function readCredentialInput(
  stream: ReadableStream<Uint8Array>,
): Promise<Map<string, string>> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  try {
    while (text.length <= MAX_INPUT && !/(^|\n)\r?\n/.test(text)) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    reader.releaseLock();
  }
  return parseCredentialInput(text);
}

/** The username git should send with an entry's token on a (normalised) host. */
export function gitUsername(entry: AuthEntry, host: string): string | null {
  if (entry.provider === "repohost") {
    if (host === "bitbucket.org") return entry.auth === "bearer" ? "x-token-auth" : null;
    return entry.auth === "basic" ? entry.username! : "x-token-auth";
  }
  if (entry.provider === "codehost") return "x-access-token";
  // cloud-devops git over HTTPS takes the PAT as the password of any user name.
  return entry.auth === "basic-pat" ? "pat" : null;
}

/** An entry that may answer git for a host, with the user name to answer. */
export interface CredentialCandidate {
  entry: AuthEntry;
  username: string;
}

/**
 * Entries that can answer for a host (as git sends it: any case, a port,
 * brackets around IPv6), in file order. On repohost's web host
 * (`bitbucket.org`, git over HTTPS) the access tokens of the repohost
 * entries for the API host serve, with the user name `x-token-auth`.
 *
 * @example
 * ```ts
 * credentialEntries(config, "GitHub.com:443"); // [{ entry, username: "x-access-token" }]
 * ```
 */
export function credentialEntries(config: AuthConfig, rawHost: string): CredentialCandidate[] {
  const host = normalizeHost(rawHost);
  if (host === null) return [];
  const out: CredentialCandidate[] = [];
  for (const entry of config.entries) {
    const username = gitUsername(entry, host);
    if (username === null) continue;
    if (
      matchAnyHost(entry.hosts, host) ||
      host === "bitbucket.org" && entry.provider === "repohost" &&
        matchAnyHost(entry.hosts, "api.bitbucket.org")
    ) out.push({ entry, username });
  }
  return out;
}
