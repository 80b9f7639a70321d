/** What forgekit prints of a URL: never credentials it carries. Pure. */
import { maskUrlSecrets } from "../cli/mod.ts";

/**
 * A URL for messages and `-v` lines: a user name or password in it (such as
 * `https://x-access-token:TOKEN@github.com/…`) is shown as `****`, and so
 * are secret query values and tokens ({@linkcode maskUrlSecrets}).
 *
 * @example
 * ```ts
 * redactUrl(new URL("https://x-access-token:ghp_abc@github.com/o/r?access_token=t"))
 * // "https://****@github.com/o/r?access_token=****"
 * ```
 */
export function redactUrl(url: URL): string {
  return maskUrlSecrets(url.href);
}

/**
 * Text the user gave as a URL, for messages, whether or not it parses:
 * everything between the scheme and the last `@` (a user name and password,
 * often a token) is shown as `****`. An `@` later in the text masks more
 * than needed, never less. Secret query values and tokens are masked too.
 *
 * @example
 * ```ts
 * redactUrlText("https://u:ghp_abc@exa mple.com/"); // "https://****@exa mple.com/"
 * redactUrlText("not a url"); // "not a url"
 * ```
 */
export function redactUrlText(text: string): string {
  const at = text.lastIndexOf("@");
  if (at < 0) return maskUrlSecrets(text);
  const start = /^[A-Za-z][A-Za-z0-9+.-]*:[/\\]+/.exec(text)?.[0].length ?? 0;
  return maskUrlSecrets(`${text.slice(0, start)}****${text.slice(at)}`);
}

/**
 * Parses a URL the user (or a server's `Location`, against `base`) gave.
 * When it does not parse, the TypeError names the text with any credentials
 * in it masked (the runtime's own message quotes the text, and the base, in
 * full).
 *
 * @example
 * ```ts
 * parseUrlArgument("https://api.github.com/user").hostname; // "api.github.com"
 * ```
 */
export function parseUrlArgument(text: string, base?: URL): URL {
  try {
    return new URL(text, base);
  } catch {
    throw new TypeError(`Invalid URL: ${JSON.stringify(redactUrlText(text))}`);
  }
}

/**
 * A JSON.parse error's message without the text V8 quotes around the fault
 * (`Unexpected token 'e', "eyJ0eXAiOi"... is not valid JSON`), which may be
 * a token. Pure.
 *
 * @example
 * ```ts
 * jsonErrorWithoutText(new SyntaxError(`Unexpected token 'e', "eyJ0" is not valid JSON`));
 * // "Unexpected token 'e'"
 * ```
 */
export function jsonErrorWithoutText(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  if (!msg.endsWith(" is not valid JSON")) return msg;
  return msg.slice(0, msg.indexOf('"')).replace(/,?\s*(\.\.\.)?$/, "");
}
