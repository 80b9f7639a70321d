/** The Stacks API: list, read, create, add, unstack. */
import { type Context, Hono } from "hono";
import { ApiError, validationFailed } from "./api_error.ts";
import { branchCycle } from "./branch_rules.ts";
import { chainProblems, chainPull, requestedNumbers, stackOpen, unstackSplit } from "./chain.ts";
import { emitPullEvent } from "./events.ts";
import {
  type Env,
  intParam,
  jsonBody,
  pageParams,
  repoFor,
  requireUser,
  setLinks,
} from "./http.ts";
import type { RepoRow } from "./model.ts";
import type { Urls } from "./render.ts";
import type { Store } from "./store.ts";
import { stackViews } from "./views.ts";

type Ctx = Context<Env>;

/**
 * The repository of a Stacks API request. Without stacked pull requests the
 * API does not exist, for any caller: 404 comes before a write's 401/403.
 */
async function stackedRepo(c: Ctx, mode: "read" | "write"): Promise<RepoRow> {
  const repo = await repoFor(c, "read");
  if (!repo.allow_stacked_pull_requests) throw new ApiError(404, "Not Found");
  return mode === "write" ? await repoFor(c, "write") : repo;
}

/**
 * Inside a change's transaction, the repository read again: a change that
 * waited for the lock while another process switched stacked pull requests
 * off is 404, as it would be a moment later, not a stack made after that.
 */
async function assertStillStacked(store: Store, repo: RepoRow): Promise<void> {
  if (!(await store.getRepoById(repo.id))?.allow_stacked_pull_requests) {
    throw new ApiError(404, "Not Found");
  }
}

async function mustGetStack(store: Store, repo: RepoRow, n: number) {
  const s = await store.getStack(repo.id, n);
  if (!s) throw new ApiError(404, "Not Found");
  return s;
}

/** One stack as JSON, or 404 (also when it was dissolved as it was read: see stackViews). */
async function stackView(store: Store, repo: RepoRow, n: number, urls: Urls) {
  const view = (await stackViews(store, repo, [await mustGetStack(store, repo, n)], urls))[0];
  if (!view) throw new ApiError(404, "Not Found");
  return view;
}

/** Routes for stacks. */
export function stackRoutes(): Hono<Env> {
  const app = new Hono<Env>();

  app.get("/repos/:owner/:repo/stacks", async (c) => {
    const repo = await stackedRepo(c, "read");
    const { perPage, page } = pageParams(c);
    const raw = c.req.query("pull_request");
    let pr: number | null = null;
    if (raw !== undefined) {
      pr = Number(raw);
      if (!/^\d+$/.test(raw) || !Number.isSafeInteger(pr) || pr < 1) {
        throw validationFailed("Stack", [{
          field: "pull_request",
          code: "invalid",
          message: "pull_request must be a pull request number",
        }]);
      }
    }
    const store = c.get("store");
    const { items, total } = await store.listStacks(repo.id, pr, perPage, (page - 1) * perPage);
    setLinks(c, page, perPage, total);
    const views = await stackViews(store, repo, items, c.get("urls"));
    // A stack the pull request left between the two reads no longer contains it.
    return c.json(
      pr === null ? views : views.filter((v) => v.pull_requests.some((p) => p.number === pr)),
    );
  });

  app.get("/repos/:owner/:repo/stacks/:number", async (c) => {
    const repo = await stackedRepo(c, "read");
    return c.json(await stackView(c.get("store"), repo, intParam(c, "number"), c.get("urls")));
  });

  app.post("/repos/:owner/:repo/stacks", async (c) => {
    const repo = await stackedRepo(c, "write");
    const user = requireUser(c);
    const body = await jsonBody(c);
    const { numbers, problems } = requestedNumbers(body.pull_requests, 2, 100);
    if (problems.length) throw validationFailed("Stack", problems);
    const store = c.get("store");
    const urls = c.get("urls");
    const stack = await store.transaction(async () => {
      await assertStillStacked(store, repo);
      const pulls = await store.pullsByNumbers(repo.id, numbers);
      const map = new Map(pulls.map((p) => [p.number, chainPull(p)]));
      const bad = chainProblems(numbers, map, null);
      if (bad.length) throw validationFailed("Stack", bad);
      const byNumber = new Map(pulls.map((p) => [p.number, p]));
      const baseRef = byNumber.get(numbers[0])!.base_ref;
      const cycle = branchCycle(baseRef, numbers.map((num) => map.get(num)!));
      if (cycle) throw validationFailed("Stack", [cycle]);
      const s = await store.insertStack(repo.id, baseRef);
      const joined = [];
      for (const [i, n] of numbers.entries()) {
        joined.push(
          await store.updatePull(byNumber.get(n)!.id, { stack_id: s.id, stack_position: i + 1 }),
        );
      }
      for (const p of joined) {
        await emitPullEvent(store, { repo, sender: user, urls }, "stacked", p, { stack: s });
      }
      // Read in the transaction: the stack as this change left it, whatever commits next.
      return (await stackViews(store, repo, [s], urls))[0];
    });
    c.get("notify")();
    return c.json(stack, 201);
  });

  app.post("/repos/:owner/:repo/stacks/:number/add", async (c) => {
    const repo = await stackedRepo(c, "write");
    const user = requireUser(c);
    const n = intParam(c, "number");
    const body = await jsonBody(c);
    const { numbers, problems } = requestedNumbers(body.pull_requests, 1, 100);
    const store = c.get("store");
    const urls = c.get("urls");
    const stack = await store.transaction(async () => {
      await assertStillStacked(store, repo);
      const s = await mustGetStack(store, repo, n);
      const current = await store.pullsInStacks([s.id]);
      if (!stackOpen(current)) {
        throw new ApiError(409, "Stack is closed: every pull request in it is merged or closed");
      }
      if (problems.length) throw validationFailed("Stack", problems);
      if (current.length + numbers.length > 100) {
        throw validationFailed("Stack", [{
          field: "pull_requests",
          code: "invalid",
          message: "A stack can hold at most 100 pull requests",
        }]);
      }
      const pulls = await store.pullsByNumbers(repo.id, numbers);
      const map = new Map(pulls.map((p) => [p.number, chainPull(p)]));
      const bad = chainProblems(numbers, map, chainPull(current[current.length - 1]));
      if (bad.length) throw validationFailed("Stack", bad);
      const cycle = branchCycle(s.base_ref, [...current, ...numbers.map((num) => map.get(num)!)]);
      if (cycle) throw validationFailed("Stack", [cycle]);
      const byNumber = new Map(pulls.map((p) => [p.number, p]));
      const joined = [];
      for (const [i, num] of numbers.entries()) {
        joined.push(
          await store.updatePull(byNumber.get(num)!.id, {
            stack_id: s.id,
            stack_position: current.length + i + 1,
          }),
        );
      }
      for (const p of joined) {
        await emitPullEvent(store, { repo, sender: user, urls }, "stacked", p, { stack: s });
      }
      return (await stackViews(store, repo, [s], urls))[0];
    });
    c.get("notify")();
    return c.json(stack);
  });

  app.post("/repos/:owner/:repo/stacks/:number/unstack", async (c) => {
    const repo = await stackedRepo(c, "write");
    const n = intParam(c, "number");
    const store = c.get("store");
    const remaining = await store.transaction(async () => {
      await assertStillStacked(store, repo);
      const s = await mustGetStack(store, repo, n);
      const current = await store.pullsInStacks([s.id]);
      const { leave, stay } = unstackSplit(
        current.map((p) => ({ ...p, merged: p.merged_at !== null })),
      );
      if (stay.length === 0) {
        await store.deleteStack(s.id);
        return null;
      }
      for (const p of leave) await store.updatePull(p.id, { stack_id: null, stack_position: null });
      for (const [i, p] of stay.entries()) await store.updatePull(p.id, { stack_position: i + 1 });
      return (await stackViews(store, repo, [s], c.get("urls")))[0];
    });
    if (remaining === null) return c.body(null, 204);
    return c.json(remaining);
  });

  return app;
}
