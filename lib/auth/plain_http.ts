/**
 * Where credentials may travel without TLS: only to this machine. Pure.
 *
 * A token sent over plain `http://` can be read (and replayed) by anyone on
 * the path; a loopback address never leaves the machine, which is what
 * local test servers and `forgekit stacks serve` use.
 */
import { normalizeHost } from "./host_pattern.ts";

/**
 * Whether a host (as in a URL, or git's `host=` with a port) is this
 * machine: `localhost` (and names under it), 127.0.0.0/8, `::1`.
 *
 * @example
 * ```ts
 * isLoopbackHost("127.0.0.1:8080"); // true
 * isLoopbackHost("api.github.com"); // false
 * ```
 */
export function isLoopbackHost(host: string): boolean {
  const h = normalizeHost(host);
  if (h === null) return false;
  return h === "localhost" || h.endsWith(".localhost") || h === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Why credentials must not be sent to `url`, or null when they may: plain
 * `http://` to anywhere but this machine.
 *
 * @example
 * ```ts
 * plainHttpProblem(new URL("http://ghe.corp/api/v3")); // "plain http:// to ghe.corp (not loopback)"
 * plainHttpProblem(new URL("https://ghe.corp/api/v3")); // null
 * ```
 */
export function plainHttpProblem(url: URL): string | null {
  if (url.protocol !== "http:" || isLoopbackHost(url.host)) return null;
  return `plain http:// to ${url.hostname} (not loopback)`;
}
