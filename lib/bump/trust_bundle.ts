/**
 * The trust bundle given to the sandboxed workload: the host's system roots
 * plus the session CA. The host's own trust store is only read.
 *
 * @module
 */

/** Where system root bundles live on common distributions, first found wins. */
export const SYSTEM_BUNDLES = [
  "/etc/ssl/certs/ca-certificates.crt",
  "/etc/pki/tls/certs/ca-bundle.crt",
  "/etc/ssl/ca-bundle.pem",
  "/etc/ssl/cert.pem",
];

/** Reads the first system root bundle that exists, or "" when there is none. */
export async function readSystemRoots(candidates: string[] = SYSTEM_BUNDLES): Promise<string> {
  for (const path of candidates) {
    try {
      return await Deno.readTextFile(path);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  return "";
}

/**
 * Joins system roots and the session CA into one PEM bundle (pure).
 *
 * @example
 * ```ts
 * const bundle = buildTrustBundle(await readSystemRoots(), ca.certPem, "t1");
 * ```
 */
export function buildTrustBundle(systemRoots: string, caPem: string, sessionId: string): string {
  const roots = systemRoots === "" || systemRoots.endsWith("\n") ? systemRoots : systemRoots + "\n";
  return `${roots}# forgekit session CA ${sessionId}\n${caPem}`;
}
