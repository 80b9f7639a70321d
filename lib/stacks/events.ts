/**
 * Webhook events: a delivery row per subscribed hook, written in the same
 * transaction as the change that caused it (an outbox), and sent later by
 * the delivery worker.
 */
import type { PullRow, RepoRow, StackRow, UserRow } from "./model.ts";
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
  extra: { stack?: StackRow; changes?: Record<string, unknown> } = {},
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
  if (extra.stack) payload.stack = (await stackViews(store, ctx.repo, [extra.stack], ctx.urls))[0];
  payload.repository = repoJson(ctx.repo, ctx.urls);
  payload.sender = userJson(ctx.sender, ctx.urls);
  const body = JSON.stringify(payload);
  for (const h of hooks) {
    await store.insertDelivery({
      guid: crypto.randomUUID(),
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
