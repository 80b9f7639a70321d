/**
 * Whether auth.json's entries apply to a URL at all. Pure: `forgekit fetch`
 * (through authFetch) and `forgekit auth explain` decide with this one
 * function, so that explain never lists entries a request would not use.
 */
import { plainHttpProblem } from "./plain_http.ts";

/**
 * Why auth.json's entries are not used for `url`, or null when its host's
 * entries apply: a scheme other than http(s), a user name or password in the
 * URL (the caller's own credentials), or plain `http://` to a host that is
 * not this machine.
 *
 * @example
 * ```ts
 * entriesNotUsedReason(new URL("https://api.github.com/user")); // null
 * entriesNotUsedReason(new URL("https://me:pw@api.github.com/user"));
 * // "the URL carries its own user name or password"
 * ```
 */
export function entriesNotUsedReason(url: URL): string | null {
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return `${url.protocol} is neither https: nor http:`;
  }
  if (hasUserinfo(url)) return "the URL carries its own user name or password";
  return plainHttpProblem(url);
}

/** Whether a URL carries a user name or password (the caller's own credentials). */
export function hasUserinfo(url: URL): boolean {
  return url.username !== "" || url.password !== "";
}
