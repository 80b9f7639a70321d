/** Commit ids the server makes up (it stores no commits): deterministic SHA-1 hex. */
import { createHash } from "node:crypto";

/** The sha of a new repository's first commit on its default branch. */
export function initialSha(fullName: string): string {
  return createHash("sha1").update(`forgekit initial commit ${fullName}`).digest("hex");
}

/** The sha of the merge commit of a pull request onto a base sha. */
export function mergeSha(repoId: number, number: number, headSha: string, baseSha: string): string {
  return createHash("sha1").update(`merge ${repoId} #${number} ${headSha} into ${baseSha}`).digest(
    "hex",
  );
}
