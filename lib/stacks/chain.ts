/**
 * Stack rules as pure decisions over plain data: which pull requests may
 * form a stack, be added to one, leave one, and what merging one does.
 */

import type { PullRow } from "./model.ts";

/** The facts about a pull request that the rules look at. */
export interface ChainPull {
  number: number;
  state: "open" | "closed";
  merged: boolean;
  draft: boolean;
  head_ref: string;
  base_ref: string;
  stack_id: number | null;
}

/** A stored pull request as the rules see it. */
export function chainPull(p: PullRow): ChainPull {
  return {
    number: p.number,
    state: p.state,
    merged: p.merged_at !== null,
    draft: p.draft,
    head_ref: p.head_ref,
    base_ref: p.base_ref,
    stack_id: p.stack_id,
  };
}

/** One problem, as a GitHub validation error entry. */
export interface Problem {
  field: string;
  code: string;
  message: string;
}

const CHAIN_MESSAGE =
  "Pull requests must form a stack, where each PR's base ref is the previous PR's head ref";

/** Checks the `pull_requests` value of a request body: an array of integers. */
export function requestedNumbers(
  value: unknown,
  min: number,
  max: number,
): { numbers: number[]; problems: Problem[] } {
  // Safe integers only: 9007199254740993 would be read as 9007199254740992, another number.
  if (!Array.isArray(value) || !value.every((n) => Number.isSafeInteger(n) && n > 0)) {
    return {
      numbers: [],
      problems: [{
        field: "pull_requests",
        code: "invalid",
        message: "pull_requests must be an array of pull request numbers",
      }],
    };
  }
  const problems: Problem[] = [];
  if (value.length < min) {
    problems.push({
      field: "pull_requests",
      code: "invalid",
      message: min === 2
        ? "Stack must contain at least two pull requests"
        : "At least one pull request must be added",
    });
  }
  if (value.length > max) {
    problems.push({
      field: "pull_requests",
      code: "invalid",
      message: `At most ${max} pull requests can be given`,
    });
  }
  return { numbers: value as number[], problems };
}

/**
 * The problems with stacking `numbers` (bottom to top) on top of `below`
 * (the current top of an existing stack, or null for a new stack).
 */
export function chainProblems(
  numbers: number[],
  pulls: Map<number, ChainPull>,
  below: ChainPull | null,
): Problem[] {
  const problems: Problem[] = [];
  const seen = new Set<number>();
  const dup = new Set<number>();
  for (const n of numbers) (seen.has(n) ? dup : seen).add(n);
  for (const n of dup) {
    problems.push({
      field: "pull_requests",
      code: "invalid",
      message: `Pull request #${n} appears more than once`,
    });
  }
  const missing = numbers.filter((n) => !pulls.has(n));
  for (const n of new Set(missing)) {
    problems.push({
      field: "pull_requests",
      code: "missing",
      message: `Pull request #${n} does not exist`,
    });
  }
  const present = [...new Set(numbers)].filter((n) => pulls.has(n)).map((n) => pulls.get(n)!);
  for (const p of present) {
    if (p.state !== "open") {
      problems.push({
        field: "pull_requests",
        code: "invalid",
        message: `Pull request #${p.number} is not open`,
      });
    }
  }
  const stacked = present.filter((p) => p.stack_id !== null).map((p) => `#${p.number}`);
  if (stacked.length > 0) {
    problems.push({
      field: "pull_requests",
      code: "already_exists",
      message: stacked.length === 1
        ? `Pull request ${stacked[0]} is already stacked`
        : `Pull requests ${stacked.join(", ")} are already stacked`,
    });
  }
  if (missing.length === 0 && dup.size === 0) {
    const chain = [...(below ? [below] : []), ...numbers.map((n) => pulls.get(n)!)];
    for (let i = 1; i < chain.length; i++) {
      if (chain[i].base_ref !== chain[i - 1].head_ref) {
        problems.push({ field: "pull_requests", code: "invalid", message: CHAIN_MESSAGE });
        break;
      }
    }
  }
  return problems;
}

/** Whether a stack is open: any of its pull requests is open. */
export function stackOpen(pulls: readonly Pick<ChainPull, "state">[]): boolean {
  return pulls.some((p) => p.state === "open");
}

/** Which pull requests leave a stack on unstack (all but the merged ones). */
export function unstackSplit<T extends Pick<ChainPull, "merged">>(
  pulls: readonly T[],
): { leave: T[]; stay: T[] } {
  return { leave: pulls.filter((p) => !p.merged), stay: pulls.filter((p) => p.merged) };
}

/** The outcome of asking to merge the pull request at `index` of a stack (bottom first). */
export type MergePlan =
  | { ok: true; merge: number[]; retarget: number | null }
  | { ok: false; message: string };

/**
 * Merging a stacked pull request merges every unmerged one below it too,
 * bottom to top; then the lowest unmerged one above is retargeted to the
 * stack's base, closed or not: it is the one whose base branch was merged,
 * and skipping a closed one would leave the stack's chain broken when it is
 * reopened (and show its changes in the diff of the one retargeted instead).
 * A closed (unmerged) or draft pull request below blocks it.
 */
export function mergePlan(stack: readonly ChainPull[], index: number): MergePlan {
  const target = stack[index];
  if (target.merged) return { ok: false, message: "Pull Request is not mergeable" };
  if (target.state !== "open") return { ok: false, message: "Pull Request is not mergeable" };
  const merge: number[] = [];
  for (let i = 0; i <= index; i++) {
    const p = stack[i];
    if (p.merged) continue;
    if (p.state !== "open") {
      return {
        ok: false,
        message: `Pull Request is not mergeable: #${p.number} below it is closed`,
      };
    }
    if (p.draft) {
      return { ok: false, message: `Pull Request is not mergeable: #${p.number} is a draft` };
    }
    merge.push(p.number);
  }
  const above = stack.slice(index + 1).find((p) => !p.merged);
  return { ok: true, merge, retarget: above ? above.number : null };
}

/** A pull request's `mergeable` and `mergeable_state`, as GitHub shows them. */
export interface Mergeability {
  mergeable: boolean | null;
  mergeable_state: "clean" | "draft" | "blocked" | "dirty" | "unknown";
}

/**
 * What GitHub's `mergeable` and `mergeable_state` say of the pull request at
 * `index` of a stack (a standalone one is a stack of one), whose merge
 * would land on a branch that exists or not (`baseExists`). The server
 * keeps shas, not commits, so nothing conflicts: `mergeable` is whether a
 * merge commit can be made at all, and the state says what else decides it.
 * A closed or merged pull request is not looked at (null, `unknown`, as
 * GitHub shows a merged one); a draft is `draft`; one that {@linkcode
 * mergePlan} refuses (a closed or draft pull request below it) `blocked`.
 *
 * @example
 * ```ts
 * mergeability([{ ...bottom, state: "closed" }, top], 1, true); // { mergeable: true, mergeable_state: "blocked" }
 * ```
 */
export function mergeability(
  stack: readonly ChainPull[],
  index: number,
  baseExists: boolean,
): Mergeability {
  const target = stack[index];
  if (target.merged || target.state !== "open") {
    return { mergeable: null, mergeable_state: "unknown" };
  }
  if (!baseExists) return { mergeable: false, mergeable_state: "dirty" };
  if (target.draft) return { mergeable: true, mergeable_state: "draft" };
  return { mergeable: true, mergeable_state: mergePlan(stack, index).ok ? "clean" : "blocked" };
}
