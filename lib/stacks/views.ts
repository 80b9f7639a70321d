/** Turning stored rows into API JSON with their stack objects, in batches (no N+1). */
import type { PullRow, RepoRow, StackMember, StackRow } from "./model.ts";
import { pullRenderer, type StackContext, stackJson, type Urls } from "./render.ts";
import type { Store } from "./store.ts";

const ZERO_SHA = "0".repeat(40);

/**
 * Pull requests as JSON, each with its `stack` object. Two queries for any
 * number of them: their stacks with sizes, then every base branch's sha.
 */
export async function pullViews(store: Store, repo: RepoRow, pulls: PullRow[], urls: Urls) {
  const stackIds = new Set<number>();
  const branches = new Set<string>();
  for (const p of pulls) {
    if (p.stack_id !== null) stackIds.add(p.stack_id);
    branches.add(p.base_ref);
  }
  const stacks = stackIds.size === 0 ? [] : await store.stacksWithSizes([...stackIds]);
  for (const { stack } of stacks) branches.add(stack.base_ref);
  const shas = await store.branchShas(repo.id, [...branches]);
  const shaOf = (name: string) => shas.get(name) ?? ZERO_SHA;
  const contexts = new Map<number, StackContext>();
  for (const { stack, size } of stacks) {
    contexts.set(stack.id, { stack, size, baseSha: shaOf(stack.base_ref) });
  }
  const render = pullRenderer(repo, urls);
  return pulls.map((p) => {
    const ctx = p.stack_id === null ? null : contexts.get(p.stack_id) ?? null;
    // Outside a transaction each read sees the latest commit: a pull request
    // that left its stack (unstacked, or the stack dissolved) between reading
    // it and reading the stack has no stack, not a position past its size.
    // Those that stay are the merged bottom ones, so a leaver's position is
    // always past the size that remains.
    return render(p, shaOf(p.base_ref), ctx && p.stack_position! <= ctx.size ? ctx : null);
  });
}

/** One pull request as JSON. */
export async function pullView(store: Store, repo: RepoRow, pull: PullRow, urls: Urls) {
  return (await pullViews(store, repo, [pull], urls))[0];
}

/**
 * Stacks as JSON, each with its pull requests bottom to top (one query for
 * any number). A stack always holds a pull request (unstacking the last one
 * dissolves it), so one read with none was dissolved after it was read: it
 * is left out, not shown empty and closed.
 */
export async function stackViews(store: Store, repo: RepoRow, stacks: StackRow[], urls: Urls) {
  const byStack = new Map<number, StackMember[]>();
  for (const p of await store.stackMembers(stacks.map((s) => s.id))) {
    const list = byStack.get(p.stack_id!) ?? [];
    list.push(p);
    byStack.set(p.stack_id!, list);
  }
  return stacks.flatMap((s) => {
    const members = byStack.get(s.id);
    return members ? [stackJson(repo, s, members, urls)] : [];
  });
}
