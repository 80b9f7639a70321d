/** The Authorization header each provider and scheme sends. Pure. */
import type { AuthEntry } from "./config.ts";

const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));

/**
 * The exact Authorization header value for an entry and its resolved token.
 *
 * @example
 * ```ts
 * authorizationHeader({ provider: "cloud-devops", auth: "basic-pat" } as AuthEntry, "pat")
 * // "Basic OnBhdA=="  (base64 of ":pat")
 * ```
 */
export function authorizationHeader(
  entry: Pick<AuthEntry, "auth" | "username">,
  token: string,
): string {
  switch (entry.auth) {
    case "basic-pat":
      return `Basic ${b64(`:${token}`)}`;
    case "basic":
      return `Basic ${b64(`${entry.username}:${token}`)}`;
    default:
      return `Bearer ${token}`;
  }
}
