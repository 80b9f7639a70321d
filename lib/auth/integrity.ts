/** Download integrity: `--sha256 HEX` / `sha256:HEX`. */
import { createHash, type Hash } from "node:crypto";
import { usageError } from "../cli/mod.ts";

/**
 * Parses a `--sha256` value into 64 lower-case hex digits.
 *
 * @example
 * ```ts
 * parseSha256("sha256:ABC…") // "abc…"
 * ```
 */
export function parseSha256(value: string): string {
  const hex = value.replace(/^sha256:/i, "").trim().toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    throw usageError(
      `--sha256 must be 64 hex digits (got: ${JSON.stringify(value)})`,
      "e.g. --sha256 sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    );
  }
  return hex;
}

/** An incremental SHA-256 over streamed chunks. */
export function sha256Stream(): { hash: Hash; hex(): string } {
  const hash = createHash("sha256");
  return { hash, hex: () => hash.digest("hex") };
}
