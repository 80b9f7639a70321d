/**
 * Webhook events: a delivery row per subscribed hook, written in the same
 * transaction as the change that caused it (an outbox), and sent later by
 * the delivery worker.
 */
import type { HookRow, PullRow, RepoRow, StackRow, UserRow } from "./model.ts";
import { repoJson, type Urls, userJson } from "./render.ts";
import type { Store } from "./store.ts";
import { pullView, stackViews } from "./views.ts";

/** Actions of `pull_request` events. */
export type PullAction = "opened" | "edited" | "closed" | "reopened" | "synchronize" | "stacked";

/**
 * Queues a `pull_request` event for every active hook of the repository that
 * subscribes to it. Call inside the transaction that made the change.
 */
export async function emitPullEvent(
  store: Store,
  ctx: { repo: RepoRow; sender: Pick<UserRow, "id" | "login">; urls: Urls },
  action: PullAction,
  pull: PullRow,
  extra: { stack?: StackRow; changes?: Record<string, unknown>; before?: string } = {},
): Promise<number> {
  const hooks = (await store.listHooks(ctx.repo.id)).filter((h) =>
    h.active && (h.events.includes("pull_request") || h.events.includes("*"))
  );
  if (hooks.length === 0) return 0;
  const payload: Record<string, unknown> = {
    action,
    number: pull.number,
    pull_request: await pullView(store, ctx.repo, pull, ctx.urls),
  };
  if (extra.changes) payload.changes = extra.changes;
  if (action === "synchronize") {
    // As GitHub's: the head's sha before the push (when the caller knows it) and after it.
    if (extra.before !== undefined) payload.before = extra.before;
    payload.after = pull.head_sha;
  }
  if (extra.stack) payload.stack = (await stackViews(store, ctx.repo, [extra.stack], ctx.urls))[0];
  payload.repository = repoJson(ctx.repo, ctx.urls);
  payload.sender = userJson(ctx.sender, ctx.urls);
  const body = JSON.stringify(payload);
  // As GitHub's X-GitHub-Delivery, the GUID names the event: every hook's delivery of it shares one.
  const guid = crypto.randomUUID();
  for (const h of hooks) {
    await store.insertDelivery({
      guid,
      hook_id: h.id,
      repo_id: ctx.repo.id,
      event: "pull_request",
      action,
      payload: body,
      redelivery: false,
    });
  }
  return hooks.length;
}

/**
 * Queues a `ping` for one hook, whatever its `events` (GitHub pings every
 * hook it is asked to): `zen`, `hook_id`, the hook as the API shows it
 * (`view`, its secret masked), the repository and the sender. Call inside a
 * transaction; the delivery worker sends it as any other.
 *
 * @example
 * ```ts
 * await store.transaction(() => emitPing(store, ctx, hook, hookView));
 * ```
 */
export async function emitPing(
  store: Store,
  ctx: { repo: RepoRow; sender: Pick<UserRow, "id" | "login">; urls: Urls },
  hook: Pick<HookRow, "id">,
  view: Record<string, unknown>,
): Promise<void> {
  const payload = {
    zen: "Small changes, stacked, merge easily.",
    hook_id: hook.id,
    hook: view,
    repository: repoJson(ctx.repo, ctx.urls),
    sender: userJson(ctx.sender, ctx.urls),
  };
  await store.insertDelivery({
    guid: crypto.randomUUID(),
    hook_id: hook.id,
    repo_id: ctx.repo.id,
    event: "ping",
    action: null,
    payload: JSON.stringify(payload),
    redelivery: false,
  });
}
