/**
 * Whether this machine can make the namespaces the firewall needs. Tests
 * that need them are ignored with a printed reason where the kernel refuses,
 * and fail instead when FORGEKIT_REQUIRE_NAMESPACES=1 (as in CI).
 */

function probe(): string | null {
  if (Deno.build.os !== "linux") return `namespaces need Linux (this is ${Deno.build.os})`;
  try {
    const out = new Deno.Command("unshare", {
      args: [
        ...(Deno.uid() === 0 ? [] : ["--user", "--map-root-user"]),
        "--net",
        "--mount",
        "true",
      ],
      stdout: "null",
      stderr: "piped",
    }).outputSync();
    return out.success ? null : `unshare failed: ${new TextDecoder().decode(out.stderr).trim()}`;
  } catch (err) {
    return `unshare cannot run: ${(err as Error).message}`;
  }
}

const why = probe();
const required = Deno.env.get("FORGEKIT_REQUIRE_NAMESPACES") === "1";
if (why !== null) {
  console.error(
    required
      ? `namespaces are required here but unavailable: ${why}`
      : `SKIPPING namespace tests: ${why}`,
  );
}

/** Options for Deno.test: ignore when namespaces are unavailable, unless they are required. */
export const needsNamespaces = {
  ignore: why !== null && !required,
  sanitizeResources: false,
  sanitizeOps: false,
};

/** Throws (failing the test) when namespaces are required but unavailable. */
export function assertNamespaces(): void {
  if (why !== null) throw new Error(`network namespaces are unavailable: ${why}`);
}
