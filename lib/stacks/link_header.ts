/** The `Link` header of a paged listing, as the client follows it. */

/**
 * The `rel="next"` target of a `Link` header, or null when it names none.
 *
 * @example
 * ```ts
 * nextLink('<https://api.github.com/x?page=2>; rel="next", <https://api.github.com/x?page=5>; rel="last"');
 * // "https://api.github.com/x?page=2"
 * ```
 */
export function nextLink(link: string): string | null {
  for (const [, target, params] of link.matchAll(/<([^>]*)>([^<]*)/g)) {
    const rel = /(?:^|;)\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,]+))/i.exec(params);
    const rels = (rel?.[1] ?? rel?.[2] ?? "").toLowerCase().split(/\s+/);
    if (rels.includes("next")) return target;
  }
  return null;
}

/**
 * The next page's URL on the API's own origin: its path and query, sent to
 * `apiBase`'s scheme, host and port. A proxy in front of the server may put
 * its upstream's host in `Link`; the client talks to the API base only.
 * Throws a TypeError when the target is not a URL under the API base's path.
 *
 * @example
 * ```ts
 * onApiOrigin("http://10.0.0.5:8080/repos/o/r/stacks?page=2", "https://api.example.com");
 * // "https://api.example.com/repos/o/r/stacks?page=2"
 * ```
 */
export function onApiOrigin(target: string, apiBase: string): string {
  const base = new URL(apiBase);
  let next: URL;
  try {
    next = new URL(target, base);
  } catch (err) {
    throw new TypeError(`The next page's link is not a URL: ${target}`, { cause: err });
  }
  const prefix = base.pathname.replace(/\/+$/, "");
  if (!next.pathname.startsWith(`${prefix}/`)) {
    throw new TypeError(`The next page's link is outside the API base ${apiBase}: ${target}`);
  }
  return `${base.origin}${next.pathname}${next.search}`;
}
