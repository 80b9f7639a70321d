/**
 * The trust bundle the sandbox sees with `--ssl-bump`: the system roots plus
 * the session CA. Only the file in the session directory is written; the
 * host's own trust store is read, never modified.
 *
 * @module
 */

/** Where Debian-style systems keep the system root bundle. */
export const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/**
 * Reads the system roots, or "" when the system has no bundle.
 *
 * @example
 * ```ts
 * const roots = await readSystemRoots();
 * ```
 */
export async function readSystemRoots(path = SYSTEM_BUNDLE): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return "";
    throw new Error(`Cannot read the system trust store: ${path}`, { cause: e });
  }
}

/**
 * Joins PEM bundles, each ending with a newline.
 *
 * @example
 * ```ts
 * joinBundle(["-----BEGIN CERTIFICATE-----…", caPem]);
 * ```
 */
export function joinBundle(pems: string[]): string {
  return pems.filter((p) => p.trim() !== "").map((p) => p.endsWith("\n") ? p : p + "\n").join("");
}
