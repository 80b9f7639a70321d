/** Pull requests: create, list, read, update, merge (with the stack cascade). */
import { Hono } from "hono";
import { ApiError, validationFailed } from "./api_error.ts";
import { pairProblem } from "./branch_rules.ts";
import { chainPull, mergePlan } from "./chain.ts";
import { emitPullEvent } from "./events.ts";
import {
  boolField,
  type Env,
  intParam,
  jsonBody,
  pageParams,
  repoFor,
  requireUser,
  setLinks,
  strField,
} from "./http.ts";
import type { PullRow, RepoRow } from "./model.ts";
import { moveBranch } from "./routes_repos.ts";
import { mergeSha } from "./shas.ts";
import type { PullFilter, Store } from "./store.ts";
import { pullView, pullViews } from "./views.ts";

function branchOf(repo: RepoRow, ref: string): string {
  const i = ref.indexOf(":");
  return i >= 0 && ref.slice(0, i).toLowerCase() === repo.owner_login.toLowerCase()
    ? ref.slice(i + 1)
    : ref;
}

async function mustGetPull(store: Store, repo: RepoRow, n: number): Promise<PullRow> {
  const p = await store.getPull(repo.id, n);
  if (!p) throw new ApiError(404, "Not Found");
  return p;
}

/** The `sort` values of a pull-request listing, as GitHub has them. */
const PULL_SORTS = ["created", "updated", "popularity", "long-running"];

/** The longest title and body of a pull request, as GitHub's. */
const TITLE_MAX = 256;
const BODY_MAX = 65_536;

const stamp = () => new Date().toISOString().replace(/\.\d{3}Z$/, "Z");

/** Routes for pull requests. */
export function pullRoutes(): Hono<Env> {
  const app = new Hono<Env>();

  app.post("/repos/:owner/:repo/pulls", async (c) => {
    const repo = await repoFor(c, "write");
    const user = requireUser(c);
    const body = await jsonBody(c);
    const title = strField(body, "title", { resource: "PullRequest", maxLength: TITLE_MAX });
    const headRaw = strField(body, "head", "PullRequest");
    const baseRaw = strField(body, "base", "PullRequest");
    const text = strField(body, "body", { resource: "PullRequest", maxLength: BODY_MAX }) ?? null;
    const draft = boolField(body, "draft", "PullRequest") ?? false;
    const missing = (["title", "head", "base"] as const).filter((f) =>
      !{ title, head: headRaw, base: baseRaw }[f]
    );
    if (missing.length) {
      throw validationFailed(
        "PullRequest",
        missing.map((field) => ({ field, code: "missing_field" })),
      );
    }
    const head = branchOf(repo, headRaw!);
    const base = branchOf(repo, baseRaw!);
    const store = c.get("store");
    const urls = c.get("urls");
    const pull = await store.transaction(async () => {
      const [h, b] = [await store.getBranch(repo.id, head), await store.getBranch(repo.id, base)];
      const problems = [
        ...(!h
          ? [{ field: "head", code: "invalid", message: `head branch ${head} does not exist` }]
          : []),
        ...(!b
          ? [{ field: "base", code: "invalid", message: `base branch ${base} does not exist` }]
          : []),
      ];
      if (problems.length) throw validationFailed("PullRequest", problems);
      const clash = pairProblem(
        { head, base },
        await store.openPullsByHead(repo.id, head),
        { owner: repo.owner_login },
      );
      if (clash) throw validationFailed("PullRequest", [clash]);
      const p = await store.insertPull({
        repo_id: repo.id,
        user_id: user.id,
        title: title!,
        body: text,
        draft,
        head_ref: head,
        head_sha: h!.sha,
        base_ref: base,
      });
      await emitPullEvent(store, { repo, sender: user, urls }, "opened", p);
      return p;
    });
    c.get("notify")();
    return c.json(await pullView(store, repo, pull, urls), 201);
  });

  app.get("/repos/:owner/:repo/pulls", async (c) => {
    const repo = await repoFor(c, "read");
    const { perPage, page } = pageParams(c);
    const state = c.req.query("state") ?? "open";
    if (!["open", "closed", "all"].includes(state)) {
      throw validationFailed("PullRequest", [{
        field: "state",
        code: "invalid",
        message: "state must be open, closed or all",
      }]);
    }
    const sortRaw = c.req.query("sort") ?? "created";
    if (!PULL_SORTS.includes(sortRaw)) {
      throw validationFailed("PullRequest", [{
        field: "sort",
        code: "invalid",
        message: `sort must be one of: ${PULL_SORTS.join(", ")}`,
      }]);
    }
    // No comments are kept, so popularity (comment count) ties everywhere and
    // falls back to creation order, as does long-running (age).
    const sort = sortRaw === "updated" ? "updated" : "created";
    const dirRaw = c.req.query("direction");
    if (dirRaw !== undefined && dirRaw !== "asc" && dirRaw !== "desc") {
      throw validationFailed("PullRequest", [{
        field: "direction",
        code: "invalid",
        message: "direction must be asc or desc",
      }]);
    }
    const filter: PullFilter = {
      state: state as PullFilter["state"],
      sort,
      // GitHub's default: desc for sort=created, asc for every other sort.
      direction: (dirRaw as "asc" | "desc" | undefined) ?? (sortRaw === "created" ? "desc" : "asc"),
      head: c.req.query("head") !== undefined ? branchOf(repo, c.req.query("head")!) : undefined,
      base: c.req.query("base"),
    };
    const store = c.get("store");
    const { items, total } = await store.listPulls(repo.id, filter, perPage, (page - 1) * perPage);
    setLinks(c, page, perPage, total);
    return c.json(await pullViews(store, repo, items, c.get("urls")));
  });

  app.get("/repos/:owner/:repo/pulls/:number", async (c) => {
    const repo = await repoFor(c, "read");
    const store = c.get("store");
    return c.json(
      await pullView(
        store,
        repo,
        await mustGetPull(store, repo, intParam(c, "number")),
        c.get("urls"),
      ),
    );
  });

  app.patch("/repos/:owner/:repo/pulls/:number", async (c) => {
    const repo = await repoFor(c, "write");
    const user = requireUser(c);
    const n = intParam(c, "number");
    const body = await jsonBody(c);
    const title = strField(body, "title", { resource: "PullRequest", maxLength: TITLE_MAX });
    const text = body.body === null
      ? null
      : strField(body, "body", { resource: "PullRequest", maxLength: BODY_MAX });
    const state = strField(body, "state", "PullRequest");
    const base = strField(body, "base", "PullRequest");
    if (state !== undefined && state !== "open" && state !== "closed") {
      throw validationFailed("PullRequest", [{
        field: "state",
        code: "invalid",
        message: "state must be open or closed",
      }]);
    }
    const store = c.get("store");
    const urls = c.get("urls");
    const ctx = { repo, sender: user, urls };
    const pull = await store.transaction(async () => {
      let p = await mustGetPull(store, repo, n);
      const changes: Record<string, unknown> = {};
      const patch: Parameters<Store["updatePull"]>[1] = {};
      if (title !== undefined && title !== p.title) {
        if (title.trim() === "") {
          throw validationFailed("PullRequest", [{ field: "title", code: "missing_field" }]);
        }
        changes.title = { from: p.title };
        patch.title = title;
      }
      if (text !== undefined && text !== p.body) {
        changes.body = { from: p.body };
        patch.body = text;
      }
      if (base !== undefined && base !== p.base_ref) {
        if (p.stack_id !== null) {
          throw validationFailed("PullRequest", [{
            field: "base",
            code: "custom",
            message: "Cannot change the base of a stacked pull request; unstack it first",
          }]);
        }
        if (p.state !== "open") {
          throw validationFailed("PullRequest", [{
            field: "base",
            code: "custom",
            message: "Cannot change the base of a closed pull request",
          }]);
        }
        if (!await store.getBranch(repo.id, base)) {
          throw validationFailed("PullRequest", [{
            field: "base",
            code: "invalid",
            message: `base branch ${base} does not exist`,
          }]);
        }
        const clash = pairProblem(
          { head: p.head_ref, base, number: p.number },
          await store.openPullsByHead(repo.id, p.head_ref),
          { owner: repo.owner_login },
        );
        if (clash) throw validationFailed("PullRequest", [clash]);
        changes.base = { ref: { from: p.base_ref } };
        patch.base_ref = base;
      }
      let action: "closed" | "reopened" | null = null;
      if (state !== undefined && state !== p.state) {
        if (p.merged_at !== null) {
          throw validationFailed("PullRequest", [{
            field: "state",
            code: "custom",
            message: "A merged pull request cannot be reopened",
          }]);
        }
        if (state === "closed") {
          patch.state = "closed";
          patch.closed_at = stamp();
          action = "closed";
        } else {
          if (
            !await store.getBranch(repo.id, p.head_ref) ||
            !await store.getBranch(repo.id, p.base_ref)
          ) {
            throw validationFailed("PullRequest", [{
              field: "state",
              code: "custom",
              message: "The head or base branch no longer exists",
            }]);
          }
          const clash = pairProblem(
            { head: p.head_ref, base: p.base_ref, number: p.number },
            await store.openPullsByHead(repo.id, p.head_ref),
            { owner: repo.owner_login },
          );
          if (clash) throw validationFailed("PullRequest", [clash]);
          patch.state = "open";
          patch.closed_at = null;
          action = "reopened";
        }
      }
      if (Object.keys(patch).length === 0) return p;
      p = await store.updatePull(p.id, patch);
      if (Object.keys(changes).length) await emitPullEvent(store, ctx, "edited", p, { changes });
      if (action) await emitPullEvent(store, ctx, action, p);
      return p;
    });
    c.get("notify")();
    return c.json(await pullView(store, repo, pull, urls));
  });

  app.put("/repos/:owner/:repo/pulls/:number/merge", async (c) => {
    const repo = await repoFor(c, "write");
    const user = requireUser(c);
    const n = intParam(c, "number");
    const body = await jsonBody(c, { optional: true });
    const expectSha = strField(body, "sha", "PullRequest");
    const store = c.get("store");
    const ctx = { repo, sender: user, urls: c.get("urls") };
    const result = await store.transaction(async () => {
      const p = await mustGetPull(store, repo, n);
      if (expectSha !== undefined && expectSha !== p.head_sha) {
        throw new ApiError(409, "Head branch was modified. Review and try the merge again.");
      }
      let stackPulls: PullRow[] = [p];
      let index = 0;
      let targetBase = p.base_ref;
      if (p.stack_id !== null) {
        stackPulls = await store.pullsInStacks([p.stack_id]);
        index = stackPulls.findIndex((x) => x.id === p.id);
        targetBase = (await store.stacksByIds([p.stack_id]))[0].base_ref;
      } else if (p.draft && p.state === "open") {
        throw new ApiError(405, "Pull Request is still a draft");
      }
      const plan = mergePlan(stackPulls.map(chainPull), index);
      if (!plan.ok) throw new ApiError(405, plan.message);
      const baseBranch = await store.getBranch(repo.id, targetBase);
      if (!baseBranch) {
        throw new ApiError(
          405,
          `Pull Request is not mergeable: base branch ${targetBase} does not exist`,
        );
      }
      let baseSha = baseBranch.sha;
      const at = stamp();
      for (const num of plan.merge) {
        const q = stackPulls.find((x) => x.number === num)!;
        baseSha = mergeSha(repo.id, q.number, q.head_sha, baseSha);
        const merged = await store.updatePull(q.id, {
          state: "closed",
          closed_at: at,
          merged_at: at,
          merge_commit_sha: baseSha,
          // The caller merges each one below too: one merge, one merger.
          merged_by_id: user.id,
          base_ref: targetBase,
        });
        await store.putBranch(repo.id, targetBase, baseSha);
        await emitPullEvent(store, ctx, "closed", merged);
      }
      // Open pull requests from the base (e.g. main into release) now have its new head.
      await moveBranch(store, ctx, targetBase, baseSha);
      if (plan.retarget !== null) {
        const r = stackPulls.find((x) => x.number === plan.retarget)!;
        if (r.base_ref !== targetBase) {
          const moved = await store.updatePull(r.id, { base_ref: targetBase });
          await emitPullEvent(store, ctx, "edited", moved, {
            changes: { base: { ref: { from: r.base_ref } } },
          });
        }
      }
      return { sha: baseSha, merged: true, message: "Pull Request successfully merged" };
    });
    c.get("notify")();
    return c.json(result);
  });

  return app;
}
