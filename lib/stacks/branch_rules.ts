/**
 * Rules about the branches pull requests connect, as pure decisions over
 * plain data: which head and base one pull request may have, and that a
 * stack's chain of branches never comes back to a branch it already passed.
 */
import type { ChainPull, Problem } from "./chain.ts";

/**
 * The problem with a pull request from `head` into `base` (null when there is
 * none), given the open pull requests from the same head. `number` is the
 * pull request's own, when it exists already, so it does not clash with itself.
 *
 * @example
 * ```ts
 * pairProblem({ head: "b1", base: "b1" }, [], { owner: "alice" });
 * // { field: "base", code: "custom", message: "No commits between b1 and b1" }
 * ```
 */
export function pairProblem(
  pair: { head: string; base: string; number?: number },
  openFromHead: readonly Pick<ChainPull, "number" | "base_ref">[],
  { owner }: { owner: string },
): Problem | null {
  if (pair.head === pair.base) {
    return {
      field: "base",
      code: "custom",
      message: `No commits between ${pair.base} and ${pair.head}`,
    };
  }
  if (openFromHead.some((p) => p.number !== pair.number && p.base_ref === pair.base)) {
    return {
      field: "head",
      code: "custom",
      message: `A pull request already exists for ${owner}:${pair.head}.`,
    };
  }
  return null;
}

/**
 * The problem with a stack whose branches run from `baseRef` through each
 * pull request's head, bottom to top, when a branch comes round twice (a
 * cycle such as main → a → b → a); null when there is none.
 *
 * @example
 * ```ts
 * branchCycle("main", [{ number: 1, head_ref: "a" }, { number: 2, head_ref: "main" }]);
 * // message: "Pull request #2 would make the stack a cycle: its head main is already the stack's base"
 * ```
 */
export function branchCycle(
  baseRef: string,
  chain: readonly Pick<ChainPull, "number" | "head_ref">[],
): Problem | null {
  const passed = new Map<string, number | null>([[baseRef, null]]);
  for (const p of chain) {
    if (passed.has(p.head_ref)) {
      const first = passed.get(p.head_ref);
      return {
        field: "pull_requests",
        code: "invalid",
        message: `Pull request #${p.number} would make the stack a cycle: its head ${p.head_ref} ` +
          `is already ${first === null ? "the stack's base" : `the head of #${first}`}`,
      };
    }
    passed.set(p.head_ref, p.number);
  }
  return null;
}
