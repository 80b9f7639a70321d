/** Users, repositories, collaborators and branches (the git refs API). */
import { Hono } from "hono";
import { ApiError, validationFailed } from "./api_error.ts";
import { emitPullEvent } from "./events.ts";
import {
  adminRepo,
  boolField,
  type Env,
  jsonBody,
  repoFor,
  requireUser,
  strField,
} from "./http.ts";
import type { RepoRow, UserRow } from "./model.ts";
import { refJson, repoJson, type Urls, userJson } from "./render.ts";
import { initialSha } from "./shas.ts";
import type { Store } from "./store.ts";

const NAME = /^[A-Za-z0-9._-]{1,100}$/;
const SHA = /^[0-9a-f]{40}$/;
const BRANCH = /^(?!\/|.*\/$|.*\/\/|.*\.\.|.*@\{|.*\.lock$)[^\s\p{Cc}~^:?*\[\\]+$/u;

/** The longest branch name, in characters (git's own limit is the file system's, 255 bytes). */
const BRANCH_MAX = 255;

/**
 * Points branch `name` at `sha` and brings the open pull requests from it up
 * to date (`head.sha`, a `synchronize` event each), as a push does: through
 * the refs API, or when a merge moves the base. Call inside the transaction;
 * resolves to the number of deliveries queued.
 *
 * @example
 * ```ts
 * const queued = await moveBranch(store, { repo, sender, urls }, "main", sha);
 * ```
 */
export async function moveBranch(
  store: Store,
  ctx: { repo: RepoRow; sender: Pick<UserRow, "id" | "login">; urls: Urls },
  name: string,
  sha: string,
): Promise<number> {
  await store.putBranch(ctx.repo.id, name, sha);
  let queued = 0;
  for (const p of await store.openPullsByHead(ctx.repo.id, name)) {
    if (p.head_sha === sha) continue;
    const moved = await store.updatePull(p.id, { head_sha: sha });
    queued += await emitPullEvent(store, ctx, "synchronize", moved, { before: p.head_sha });
  }
  return queued;
}

/** Routes for users, repositories and refs. */
export function repoRoutes(): Hono<Env> {
  const app = new Hono<Env>();

  app.get("/user", (c) => c.json(userJson(requireUser(c), c.get("urls"))));

  app.post("/user/repos", async (c) => {
    const user = requireUser(c);
    const body = await jsonBody(c);
    const name = strField(body, "name", "Repository");
    if (!name) throw validationFailed("Repository", [{ field: "name", code: "missing_field" }]);
    if (!NAME.test(name) || name === "." || name === "..") {
      throw validationFailed("Repository", [{
        field: "name",
        code: "invalid",
        message: `name is invalid: ${name}`,
      }]);
    }
    const priv = boolField(body, "private", "Repository") ?? false;
    const allow = boolField(body, "allow_stacked_pull_requests", "Repository") ?? false;
    const store = c.get("store");
    const repo = await store.transaction(async () => {
      if (await store.getRepo(user.login, name)) {
        throw validationFailed("Repository", [{
          field: "name",
          code: "custom",
          message: "name already exists on this account",
        }]);
      }
      const r = await store.createRepo({
        owner_id: user.id,
        name,
        private: priv,
        allow_stacked_pull_requests: allow,
        default_branch: "main",
      });
      await store.putBranch(r.id, "main", initialSha(`${user.login}/${name}`));
      return r;
    });
    return c.json(repoJson(repo, c.get("urls")), 201);
  });

  app.get(
    "/repos/:owner/:repo",
    async (c) => c.json(repoJson(await repoFor(c, "read"), c.get("urls"))),
  );

  app.patch("/repos/:owner/:repo", async (c) => {
    // Settings are the owner's: a collaborator who could flip `private` could publish the code.
    const repo = await adminRepo(c);
    const body = await jsonBody(c);
    const patch = {
      private: boolField(body, "private", "Repository"),
      allow_stacked_pull_requests: boolField(body, "allow_stacked_pull_requests", "Repository"),
    };
    const store = c.get("store");
    const updated = await store.transaction(async () => {
      await store.updateRepo(repo.id, patch);
      return (await store.getRepoById(repo.id))!;
    });
    return c.json(repoJson(updated, c.get("urls")));
  });

  app.put("/repos/:owner/:repo/collaborators/:user", async (c) => {
    const repo = await adminRepo(c);
    const store = c.get("store");
    const who = await store.userByLogin(c.req.param("user"));
    if (!who) throw new ApiError(404, "Not Found");
    await store.transaction(() => store.addCollaborator(repo.id, who.id));
    return c.body(null, 204);
  });

  app.post("/repos/:owner/:repo/git/refs", async (c) => {
    const repo = await repoFor(c, "write");
    const body = await jsonBody(c);
    const ref = strField(body, "ref", "Reference");
    const sha = strField(body, "sha", "Reference");
    if (!ref || !sha) {
      throw validationFailed("Reference", [
        !ref ? { field: "ref", code: "missing_field" } : { field: "sha", code: "missing_field" },
      ]);
    }
    const name = ref.startsWith("refs/heads/") ? ref.slice("refs/heads/".length) : null;
    if (name === null || !BRANCH.test(name) || name.length > BRANCH_MAX) {
      throw new ApiError(422, "Reference name must be a branch: refs/heads/NAME", {
        errors: [{
          resource: "Reference",
          field: "ref",
          code: "invalid",
          message: `ref is invalid: ${ref}`,
        }],
      });
    }
    if (!SHA.test(sha)) {
      throw validationFailed("Reference", [{
        field: "sha",
        code: "invalid",
        message: "sha must be 40 lower-case hex digits",
      }]);
    }
    const store = c.get("store");
    const branch = await store.transaction(async () => {
      if (await store.getBranch(repo.id, name)) throw new ApiError(422, "Reference already exists");
      await store.putBranch(repo.id, name, sha);
      return { repo_id: repo.id, name, sha };
    });
    return c.json(refJson(repo, branch, c.get("urls")), 201);
  });

  app.get("/repos/:owner/:repo/git/ref/heads/:branch{.+}", async (c) => {
    const repo = await repoFor(c, "read");
    const b = await c.get("store").getBranch(repo.id, c.req.param("branch"));
    if (!b) throw new ApiError(404, "Not Found");
    return c.json(refJson(repo, b, c.get("urls")));
  });

  app.patch("/repos/:owner/:repo/git/refs/heads/:branch{.+}", async (c) => {
    const repo = await repoFor(c, "write");
    const user = requireUser(c);
    const name = c.req.param("branch");
    const body = await jsonBody(c);
    const sha = strField(body, "sha", "Reference");
    boolField(body, "force", "Reference");
    if (!sha) throw validationFailed("Reference", [{ field: "sha", code: "missing_field" }]);
    if (!SHA.test(sha)) {
      throw validationFailed("Reference", [{
        field: "sha",
        code: "invalid",
        message: "sha must be 40 lower-case hex digits",
      }]);
    }
    const store = c.get("store");
    let queued = 0;
    const branch = await store.transaction(async () => {
      const b = await store.getBranch(repo.id, name);
      if (!b) throw new ApiError(422, "Reference does not exist");
      if (b.sha !== sha) {
        queued = await moveBranch(store, { repo, sender: user, urls: c.get("urls") }, name, sha);
      }
      return { repo_id: repo.id, name, sha };
    });
    if (queued) c.get("notify")();
    return c.json(refJson(repo, branch, c.get("urls")));
  });

  app.delete("/repos/:owner/:repo/git/refs/heads/:branch{.+}", async (c) => {
    const repo = await repoFor(c, "write");
    const name = c.req.param("branch");
    const store = c.get("store");
    await store.transaction(async () => {
      if (!await store.getBranch(repo.id, name)) {
        throw new ApiError(422, "Reference does not exist");
      }
      if (name === repo.default_branch) throw new ApiError(422, "Cannot delete the default branch");
      const users = await store.openPullsTouching(repo.id, name);
      if (users.length) {
        throw new ApiError(
          422,
          `Reference is used by open pull request #${users[0].number}; close it first`,
        );
      }
      await store.deleteBranch(repo.id, name);
    });
    return c.body(null, 204);
  });

  return app;
}
