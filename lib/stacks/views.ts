/** Turning stored rows into API JSON with their stack objects, in batches (no N+1). */
import { type ChainPull, chainPull, mergeability } from "./chain.ts";
import type { PullRow, RepoRow, StackMember, StackRow } from "./model.ts";
import { pullRenderer, type StackContext, stackJson, type Urls } from "./render.ts";
import type { Store } from "./store.ts";

const ZERO_SHA = "0".repeat(40);

/**
 * Pull requests as a listing shows them, each with its `stack` object. Two
 * queries for any number of them: their stacks with sizes, then every base
 * branch's sha.
 */
export function pullViews(store: Store, repo: RepoRow, pulls: PullRow[], urls: Urls) {
  return render(store, repo, pulls, { urls, full: false });
}

/**
 * One pull request as GitHub shows one read alone (GET, create, update, and
 * webhook payloads): as listed, plus `mergeable` and `mergeable_state`,
 * which take one more query when it is open in a stack.
 */
export async function pullView(store: Store, repo: RepoRow, pull: PullRow, urls: Urls) {
  return (await render(store, repo, [pull], { urls, full: true }))[0];
}

async function render(
  store: Store,
  repo: RepoRow,
  pulls: PullRow[],
  options: { urls: Urls; full: boolean },
) {
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
  // Whether an open stacked pull request can be merged depends on those below it.
  const chains = new Map<number, ChainPull[]>();
  const open = options.full ? pulls.filter((p) => p.state === "open" && p.stack_id !== null) : [];
  if (open.length) {
    for (const q of await store.pullsInStacks([...new Set(open.map((p) => p.stack_id!))])) {
      const chain = chains.get(q.stack_id!) ?? [];
      chain.push(chainPull(q));
      chains.set(q.stack_id!, chain);
    }
  }
  const renderPull = pullRenderer(repo, options.urls);
  return pulls.map((p) => {
    let ctx = p.stack_id === null ? null : contexts.get(p.stack_id) ?? null;
    // Outside a transaction each read sees the latest commit: a pull request
    // that left its stack (unstacked, or the stack dissolved) between reading
    // it and reading the stack has no stack, not a position past its size.
    // Those that stay are the merged bottom ones, so a leaver's position is
    // always past the size that remains.
    if (ctx && p.stack_position! > ctx.size) ctx = null;
    if (!options.full) return renderPull(p, shaOf(p.base_ref), ctx);
    // A merge lands on the stack's base branch, else on the pull request's own.
    const chain = ctx ? chains.get(p.stack_id!) ?? [] : [];
    const index = chain.findIndex((q) => q.number === p.number);
    const merge = index >= 0
      ? mergeability(chain, index, shas.has(ctx!.stack.base_ref))
      : mergeability([chainPull(p)], 0, shas.has(p.base_ref));
    return renderPull(p, shaOf(p.base_ref), ctx, merge);
  });
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
