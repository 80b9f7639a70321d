/**
 * Credentials a URL may carry, masked for logs and messages. Pure.
 *
 * A request's URL is logged whole (the access log, `--log-level debug`,
 * the end-of-run summary of blocked URLs, which CI prints publicly), and
 * URLs carry secrets often enough: `?access_token=`, presigned downloads
 * (`X-Amz-Signature`, `X-Goog-Credential`, Azure's `sig`), API keys
 * (`?key=`), OAuth codes, a token pasted into a path. The URL stays
 * readable: only the secret values become `****`.
 *
 * @module
 */

/** What replaces a secret. */
export const MASK = "****";

/** Query parameters whose values are secrets, by name (lower case, `-` read as `_`). */
const SECRET_NAMES = new Set([
  "auth",
  "authorization",
  "code",
  "jwt",
  "key",
  "passwd",
  "pwd",
  "session",
  "session_id",
  "sessionid",
  "sig",
]);

/** Parts of a parameter name that make its value a secret. */
const SECRET_PARTS = /token|secret|passw|signature|credential|api_?key|private_?key|sess(ion)?_?id/;

/**
 * Token formats worth masking wherever they appear (a path too): GitHub's
 * tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`) and JWTs.
 * The prefix is kept: it says what kind of secret was there.
 *
 * A token starts where a word does, or right after a percent escape
 * (`Bearer%20eyJ…`, `token%3Aghp_…`: `\b` would see no boundary there). The
 * lookbehinds also keep the scan linear: a JWT is tried only where a run of
 * its characters begins, never again at each `eyJ` inside a long run
 * (`eyJ-eyJ-…`, quadratic on a 64 KiB URL).
 */
const TOKEN_FORMATS = new RegExp(
  "(?<=^|[^A-Za-z0-9]|%[0-9A-Fa-f]{2})(gh[pousr]_|github_pat_)[A-Za-z0-9_]{16,}" +
    "|(?<=^|[^A-Za-z0-9_-]|%[0-9A-Fa-f]{2})(eyJ)[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]*",
  "g",
);

/** Whether a URL may need masking at all (most do not: this is the fast path). */
const MAY_HOLD = /[?#@;]|gh[pousr]_|github_pat_|eyJ/;

/** A path parameter, `;name=value` (`;jsessionid=…`), up to the next `;`, `/`, `?` or `#`. */
const PATH_PARAM = /;([^=;/?#]*)=([^;/?#]*)/g;

/**
 * What separates parameters: `&`, and `;` (which many servers take as `&`),
 * `?` and `#` too, so that a second `?` or a fragment
 * (`#access_token=…`, OAuth's implicit grant) is masked as the query is.
 */
const PARAM_SEPARATOR = /([&;?#])/;

/** Whether a query parameter's value is a secret, from its (raw) name. */
export function isSecretParam(rawName: string): boolean {
  let name = rawName.replaceAll("+", " ");
  try {
    name = decodeURIComponent(name);
  } catch {
    // a malformed escape: judged as written
  }
  name = name.trim().toLowerCase().replaceAll("-", "_");
  return SECRET_NAMES.has(name) || SECRET_PARTS.test(name);
}

/**
 * The URL with the credentials it carries masked: a user name and password
 * (`https://****@host/…`), the values of secret query parameters
 * (`?access_token=****&per_page=100`), and GitHub tokens and JWTs anywhere
 * (a token in a path becomes `ghp_****`). Anything else is kept as written, so the result still
 * says which URL it was. Works on any text, URL or not.
 *
 * @example
 * ```ts
 * maskUrlSecrets("https://api.github.com/user?access_token=ghp_x&page=2");
 * // "https://api.github.com/user?access_token=****&page=2"
 * ```
 */
export function maskUrlSecrets(url: string): string {
  if (!MAY_HOLD.test(url)) return url;
  let out = maskTokens(url);
  // user:password@ in the authority (before the first /, ? or # after the scheme)
  const start = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(out)?.[0].length ?? 0;
  if (start > 0) {
    const end = out.slice(start).search(/[/?#]/);
    const authority = end === -1 ? out.slice(start) : out.slice(start, start + end);
    const at = authority.lastIndexOf("@");
    if (at !== -1) out = `${out.slice(0, start)}${MASK}${out.slice(start + at)}`;
  }
  // The query and the fragment, read alike; before them, path parameters.
  const q = out.search(/[?#]/);
  const path = q === -1 ? out : out.slice(0, q);
  const shown = path.includes(";")
    ? path.replace(
      PATH_PARAM,
      (all, name: string) => isSecretParam(name) ? `;${name}=${MASK}` : all,
    )
    : path;
  return q === -1 ? shown : `${shown}${out[q]}${maskQuery(out.slice(q + 1))}`;
}

/**
 * A query string (or an `application/x-www-form-urlencoded` body) with the
 * values of secret parameters masked: `a=1&token=****` (also after a `;`,
 * `?` or `#`, {@linkcode PARAM_SEPARATOR}).
 */
export function maskQuery(query: string): string {
  // Separators at odd indices, kept as written.
  return query.split(PARAM_SEPARATOR).map((pair, i) => {
    const eq = pair.indexOf("=");
    if (i % 2 === 1 || eq === -1 || eq === pair.length - 1) return pair;
    return isSecretParam(pair.slice(0, eq)) ? `${pair.slice(0, eq + 1)}${MASK}` : pair;
  }).join("");
}

/** Text with GitHub tokens and JWTs masked wherever they appear, their prefix kept. */
export function maskTokens(text: string): string {
  return text.replace(
    TOKEN_FORMATS,
    (_, gh: string | undefined, jwt: string | undefined) => `${gh ?? jwt}${MASK}`,
  );
}
