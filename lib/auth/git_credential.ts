/**
 * git's credential-helper protocol over auth.json: `key=value` lines in,
 * `username=`/`password=` out. Decisions are pure.
 */
import type { AuthConfig, AuthEntry } from "./config.ts";
import { matchAnyHost, normalizeHost } from "./host_pattern.ts";

/** Parses git's `key=value` lines (up to a blank line). */
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

/** The username git should send with an entry's token on a host. */
export function gitUsername(entry: AuthEntry, host: string): string | null {
  if (entry.provider === "repohost") {
    if (host === "bitbucket.org") return entry.auth === "bearer" ? "x-token-auth" : null;
    return entry.auth === "basic" ? entry.username! : "x-token-auth";
  }
  if (entry.provider === "codehost") return "x-access-token";
  // cloud-devops git over HTTPS takes the PAT as the password of any user name.
  return entry.auth === "basic-pat" ? "pat" : null;
}

/**
 * Entries that can answer for a host, in file order. On repohost's web host
 * (`bitbucket.org`, git over HTTPS) the access tokens of the repohost
 * entries for the API host serve, with the user name `x-token-auth`.
 */
export function credentialEntries(config: AuthConfig, rawHost: string): AuthEntry[] {
  const host = normalizeHost(rawHost);
  if (host === null) return [];
  return config.entries.filter((e) => {
    if (gitUsername(e, host) === null) return false;
    if (matchAnyHost(e.hosts, host)) return true;
    return host === "bitbucket.org" && e.provider === "repohost" &&
      matchAnyHost(e.hosts, "api.bitbucket.org");
  });
}
