/** What forgekit prints of a URL: never credentials it carries. Pure. */

/**
 * A URL for messages and `-v` lines: a user name or password in it (such as
 * `https://x-access-token:TOKEN@github.com/…`) is shown as `****`.
 *
 * @example
 * ```ts
 * redactUrl(new URL("https://x-access-token:ghp_abc@github.com/o/r"))
 * // "https://****@github.com/o/r"
 * ```
 */
export function redactUrl(url: URL): string {
  if (url.username === "" && url.password === "") return url.href;
  const shown = new URL(url.href);
  shown.username = "****";
  shown.password = "";
  return shown.href;
}
