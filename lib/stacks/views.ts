/** Turning stored rows into API JSON with their stack objects, in batches (no N+1). */
import type { PullRow, RepoRow, StackRow } from "./model.ts";
import { pullJson, type StackContext, stackJson, type Urls } from "./render.ts";
import type { Store } from "./store.ts";

const ZERO_SHA = "0".repeat(40);

/** Pull requests as JSON, each with its `stack` object. */
export async function pullViews(store: Store, repo: RepoRow, pulls: PullRow[], urls: Urls) {
  const stackIds = [
    ...new Set(pulls.map((p) => p.stack_id).filter((id): id is number => id !== null)),
  ];
  const stacks = new Map((await store.stacksByIds(stackIds)).map((s) => [s.id, s]));
  const sizes = await store.stackSizes(stackIds);
  const branches = new Set(pulls.map((p) => p.base_ref));
  for (const s of stacks.values()) branches.add(s.base_ref);
  const shas = await store.branchShas(repo.id, [...branches]);
  const shaOf = (name: string) => shas.get(name) ?? ZERO_SHA;
  return pulls.map((p) => {
    const stack = p.stack_id === null ? undefined : stacks.get(p.stack_id);
    const ctx: StackContext | null = stack
      ? { stack, size: sizes.get(stack.id) ?? 0, baseSha: shaOf(stack.base_ref) }
      : null;
    return pullJson(repo, p, shaOf(p.base_ref), ctx, urls);
  });
}

/** One pull request as JSON. */
export async function pullView(store: Store, repo: RepoRow, pull: PullRow, urls: Urls) {
  return (await pullViews(store, repo, [pull], urls))[0];
}

/** Stacks as JSON, each with its pull requests bottom to top. */
export async function stackViews(store: Store, repo: RepoRow, stacks: StackRow[], urls: Urls) {
  const byStack = new Map<number, PullRow[]>();
  for (const p of await store.pullsInStacks(stacks.map((s) => s.id))) {
    const list = byStack.get(p.stack_id!) ?? [];
    list.push(p);
    byStack.set(p.stack_id!, list);
  }
  return stacks.map((s) => stackJson(repo, s, byStack.get(s.id) ?? [], urls));
}
