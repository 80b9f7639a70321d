/** Turning stored rows into API JSON with their stack objects, in batches (no N+1). */
import type { PullRow, RepoRow, StackRow } from "./model.ts";
import { pullJson, type StackContext, stackJson, type Urls } from "./render.ts";
import type { Store } from "./store.ts";

const ZERO_SHA = "0".repeat(40);

/** Resolves branch shas once per request. */
export class BranchShas {
  #cache = new Map<string, string>();
  constructor(private store: Store, private repoId: number) {}
  async get(name: string): Promise<string> {
    let sha = this.#cache.get(name);
    if (sha === undefined) {
      sha = (await this.store.getBranch(this.repoId, name))?.sha ?? ZERO_SHA;
      this.#cache.set(name, sha);
    }
    return sha;
  }
}

/** Pull requests as JSON, each with its `stack` object. */
export async function pullViews(store: Store, repo: RepoRow, pulls: PullRow[], urls: Urls) {
  const stackIds = [
    ...new Set(pulls.map((p) => p.stack_id).filter((id): id is number => id !== null)),
  ];
  const stacks = new Map((await store.stacksByIds(stackIds)).map((s) => [s.id, s]));
  const sizes = new Map<number, number>();
  for (const p of await store.pullsInStacks(stackIds)) {
    sizes.set(p.stack_id!, (sizes.get(p.stack_id!) ?? 0) + 1);
  }
  const shas = new BranchShas(store, repo.id);
  const out = [];
  for (const p of pulls) {
    let ctx: StackContext | null = null;
    if (p.stack_id !== null && stacks.has(p.stack_id)) {
      const stack = stacks.get(p.stack_id)!;
      ctx = { stack, size: sizes.get(stack.id) ?? 0, baseSha: await shas.get(stack.base_ref) };
    }
    out.push(pullJson(repo, p, await shas.get(p.base_ref), ctx, urls));
  }
  return out;
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
