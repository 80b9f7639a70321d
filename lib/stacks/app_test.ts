/** The Hono app through app.request: every endpoint, validation and status. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { createApp, hashToken } from "./app.ts";
import { openSqliteStore } from "./sqlite_store.ts";
import type { Store } from "./store.ts";

const SHA = (c: string) => c.repeat(40);

async function setup() {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-" });
  const store = openSqliteStore(join(dir, "s.db"));
  const tokens: Record<string, string> = {};
  for (const login of ["alice", "bob", "carol"]) {
    tokens[login] = `tok-${login}`;
    await store.transaction(async () => {
      const u = await store.ensureUser(login);
      await store.addToken(u.id, hashToken(tokens[login]));
    });
  }
  const app = createApp({ store, allowPrivateHookTargets: true }); // its hooks post to loopback
  const call = async (
    method: string,
    path: string,
    body?: unknown,
    who = "alice",
    headers: Record<string, string> = {},
  ) => {
    const res = await app.request(path, {
      method,
      headers: { ...(who ? { authorization: `Bearer ${tokens[who]}` } : {}), ...headers },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null };
  };
  return {
    dir,
    store,
    app,
    call,
    async close() {
      await store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function repoWithChain(
  call: Awaited<ReturnType<typeof setup>>["call"],
  n = 3,
  stacked = true,
) {
  await call("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: stacked });
  let base = "main";
  for (let i = 1; i <= n; i++) {
    const b = `b${i}`;
    assert.equal(
      (await call("POST", "/repos/alice/app/git/refs", {
        ref: `refs/heads/${b}`,
        sha: SHA(String(i)),
      })).status,
      201,
    );
    assert.equal(
      (await call("POST", "/repos/alice/app/pulls", { title: `PR ${i}`, head: b, base })).status,
      201,
    );
    base = b;
  }
}

Deno.test("users, repositories and auth follow GitHub's statuses and messages", async () => {
  const t = await setup();
  try {
    assert.equal((await t.call("GET", "/user")).json.login, "alice");
    const anon = await t.call("GET", "/user", undefined, "");
    assert.deepEqual([anon.status, anon.json.message], [401, "Requires authentication"]);
    const bad = await t.app.request("/user", { headers: { authorization: "token nope" } });
    assert.deepEqual([bad.status, (await bad.json()).message], [401, "Bad credentials"]);
    const created = await t.call("POST", "/user/repos", { name: "secret", private: true });
    assert.equal(created.status, 201);
    assert.equal(created.json.full_name, "alice/secret");
    assert.equal(created.json.private, true);
    assert.equal((await t.call("GET", "/repos/alice/secret", undefined, "bob")).status, 404);
    assert.equal((await t.call("GET", "/repos/alice/secret", undefined, "")).status, 404);
    assert.equal((await t.call("PUT", "/repos/alice/secret/collaborators/bob")).status, 204);
    assert.equal((await t.call("GET", "/repos/alice/secret", undefined, "bob")).status, 200);
    assert.equal(
      (await t.call("PATCH", "/repos/alice/secret", { allow_stacked_pull_requests: true }, "carol"))
        .status,
      404,
    );
    // Settings are the owner's (admin), as on GitHub: push access is not enough.
    const byCollaborator = await t.call("PATCH", "/repos/alice/secret", {
      allow_stacked_pull_requests: true,
    }, "bob");
    assert.equal(byCollaborator.status, 403);
    const patched = await t.call("PATCH", "/repos/alice/secret", {
      allow_stacked_pull_requests: true,
    });
    assert.equal(patched.json.allow_stacked_pull_requests, true);
    assert.equal((await t.call("POST", "/user/repos", { name: "secret" })).status, 422);
    await t.call("POST", "/user/repos", { name: "pub" });
    const forbidden = await t.call("POST", "/repos/alice/pub/git/refs", {
      ref: "refs/heads/x",
      sha: SHA("a"),
    }, "carol");
    assert.equal(forbidden.status, 403);
    // Enterprise base path serves the same API, with /api/v3 URLs.
    const ghe = await t.call("GET", "/api/v3/repos/alice/pub");
    assert.equal(ghe.status, 200);
    assert.match(ghe.json.url, /\/api\/v3\/repos\/alice\/pub$/);
  } finally {
    await t.close();
  }
});

Deno.test("bad bodies get 400/413/422 in GitHub's error shape, never 500", async () => {
  const t = await setup();
  try {
    const cases: [string | unknown, number, string][] = [
      ["{not json", 400, "Problems parsing JSON"],
      ["[1,2]", 400, "Body should be a JSON object"],
      ['"x"', 400, "Body should be a JSON object"],
      [{ name: 42 }, 422, "Validation Failed"],
      [{}, 422, "Validation Failed"],
      [{ name: "a/b" }, 422, "Validation Failed"],
      ["x".repeat((1 << 20) + 10), 413, "Payload too large"],
    ];
    for (const [body, status, message] of cases) {
      const r = await t.call("POST", "/user/repos", body);
      assert.equal(r.status, status, String(body).slice(0, 20));
      assert.equal(r.json.message, message);
      assert.equal(r.json.documentation_url, "https://docs.github.com/rest");
      assert.equal(r.json.status, String(status));
    }
    const v = await t.call("POST", "/user/repos", {});
    assert.deepEqual(v.json.errors, [{
      resource: "Repository",
      field: "name",
      code: "missing_field",
    }]);
    const version = await t.call("GET", "/user", undefined, "alice", {
      "X-GitHub-Api-Version": "1999-01-01",
    });
    assert.equal(version.status, 400);
    for (const ok of ["2022-11-28", "2026-03-10"]) {
      assert.equal(
        (await t.call("GET", "/user", undefined, "alice", { "X-GitHub-Api-Version": ok })).status,
        200,
      );
    }
    assert.equal((await t.call("GET", "/repos/alice/none/pulls/abc")).status, 404);
    assert.equal((await t.call("GET", "/nowhere")).status, 404);
  } finally {
    await t.close();
  }
});

Deno.test("branches move through the refs API and moving a head synchronizes its pull request", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 1);
    const ref = await t.call("GET", "/repos/alice/app/git/ref/heads/b1");
    assert.equal(ref.json.object.sha, SHA("1"));
    assert.equal(
      (await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/b1", sha: SHA("1") }))
        .json.message,
      "Reference already exists",
    );
    assert.equal(
      (await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/x", sha: "xyz" }))
        .status,
      422,
    );
    assert.equal(
      (await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/tags/x", sha: SHA("1") }))
        .status,
      422,
    );
    await t.call("POST", "/repos/alice/app/git/refs", {
      ref: "refs/heads/feature/deep",
      sha: SHA("2"),
    });
    assert.equal(
      (await t.call("GET", "/repos/alice/app/git/ref/heads/feature/deep")).json.ref,
      "refs/heads/feature/deep",
    );
    const moved = await t.call("PATCH", "/repos/alice/app/git/refs/heads/b1", {
      sha: SHA("9"),
      force: true,
    });
    assert.equal(moved.json.object.sha, SHA("9"));
    assert.equal((await t.call("GET", "/repos/alice/app/pulls/1")).json.head.sha, SHA("9"));
    assert.equal(
      (await t.call("DELETE", "/repos/alice/app/git/refs/heads/b1")).status,
      422,
      "in use by an open PR",
    );
    assert.equal(
      (await t.call("DELETE", "/repos/alice/app/git/refs/heads/feature/deep")).status,
      204,
    );
    assert.equal((await t.call("GET", "/repos/alice/app/git/ref/heads/feature/deep")).status, 404);
  } finally {
    await t.close();
  }
});

Deno.test("pull requests: create, validate, list with filters and Link pagination, edit, close, reopen", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 3, false);
    const pr = (await t.call("GET", "/repos/alice/app/pulls/2")).json;
    for (
      const f of [
        "id",
        "node_id",
        "number",
        "url",
        "html_url",
        "state",
        "title",
        "body",
        "draft",
        "user",
        "head",
        "base",
        "created_at",
        "updated_at",
        "closed_at",
        "merged_at",
        "merged",
        "merge_commit_sha",
        "stack",
      ]
    ) {
      assert.ok(f in pr, f);
    }
    // As on GitHub, head and base name their repository and its owner (what bots read to spot forks).
    const repo = (await t.call("GET", "/repos/alice/app")).json;
    assert.equal(repo.fork, false);
    assert.deepEqual(pr.head, {
      label: "alice:b2",
      ref: "b2",
      sha: SHA("2"),
      user: repo.owner,
      repo,
    });
    assert.deepEqual(pr.base, {
      label: "alice:b1",
      ref: "b1",
      sha: SHA("1"),
      user: repo.owner,
      repo,
    });
    assert.equal(pr.head.repo.full_name, "alice/app");
    assert.equal(pr.stack, null);
    const dupe = await t.call("POST", "/repos/alice/app/pulls", {
      title: "again",
      head: "b1",
      base: "main",
    });
    assert.equal(dupe.json.errors[0].message, "A pull request already exists for alice:b1.");
    const missing = await t.call("POST", "/repos/alice/app/pulls", { head: "nope", base: "main" });
    assert.deepEqual(missing.json.errors.map((e: { field: string }) => e.field), ["title"]);
    const nobranch = await t.call("POST", "/repos/alice/app/pulls", {
      title: "x",
      head: "nope",
      base: "main",
    });
    assert.equal(nobranch.json.errors[0].field, "head");

    const page1 = await t.call("GET", "/repos/alice/app/pulls?per_page=2");
    assert.deepEqual(page1.json.map((p: { number: number }) => p.number), [3, 2]);
    const link = page1.headers.get("link")!;
    assert.match(link, /[?&]per_page=2&page=2>; rel="next"/);
    assert.match(link, /page=2>; rel="last"/);
    const page2 = await t.call("GET", "/repos/alice/app/pulls?per_page=2&page=2");
    assert.deepEqual(page2.json.map((p: { number: number }) => p.number), [1]);
    assert.match(page2.headers.get("link")!, /page=1>; rel="prev".*page=1>; rel="first"/);
    const asc = await t.call("GET", "/repos/alice/app/pulls?direction=asc&base=b1");
    assert.deepEqual(asc.json.map((p: { number: number }) => p.number), [2]);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls?head=alice:b3")).json[0].number, 3);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls?state=weird")).status, 422);
    for (const q of ["page=1.5", "per_page=-1", "page=99999999999999999999"]) {
      const r = await t.call("GET", `/repos/alice/app/pulls?${q}`);
      assert.equal(r.status, 422, q);
      assert.match(r.json.errors[0].message, /must be a whole number/, q);
    }
    // As on GitHub: page 0 is the first page, per_page=0 the default size.
    const zero = await t.call("GET", "/repos/alice/app/pulls?page=0&per_page=0");
    assert.deepEqual([zero.status, zero.json.map((p: { number: number }) => p.number)], [
      200,
      [3, 2, 1],
    ]);
    assert.match(zero.headers.get("link") ?? "", /^$|per_page=30/);
    const beyond = await t.call("GET", "/repos/alice/app/pulls?page=9007199254740991&per_page=100");
    assert.deepEqual([beyond.status, beyond.json], [200, []]);

    const edited = await t.call("PATCH", "/repos/alice/app/pulls/3", {
      title: "New",
      body: "text",
    });
    assert.deepEqual([edited.json.title, edited.json.body], ["New", "text"]);
    const closed = await t.call("PATCH", "/repos/alice/app/pulls/3", { state: "closed" });
    assert.equal(closed.json.state, "closed");
    assert.ok(closed.json.closed_at);
    assert.deepEqual(
      (await t.call("GET", "/repos/alice/app/pulls?state=closed")).json.map((
        p: { number: number },
      ) => p.number),
      [3],
    );
    const reopened = await t.call("PATCH", "/repos/alice/app/pulls/3", { state: "open" });
    assert.deepEqual([reopened.json.state, reopened.json.closed_at], ["open", null]);
    const rebased = await t.call("PATCH", "/repos/alice/app/pulls/3", { base: "main" });
    assert.equal(rebased.json.base.ref, "main");
  } finally {
    await t.close();
  }
});

Deno.test("pull listing: direction defaults to desc only for sort=created, and an unknown sort is 422", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 3, false);
    const numbers = async (q: string) => {
      const r = await t.call("GET", `/repos/alice/app/pulls?${q}`);
      assert.equal(r.status, 200, q);
      return r.json.map((p: { number: number }) => p.number);
    };
    // Equal timestamps tie-break on creation order in the same direction.
    assert.deepEqual(await numbers(""), [3, 2, 1]);
    assert.deepEqual(await numbers("sort=created"), [3, 2, 1]);
    assert.deepEqual(await numbers("sort=updated"), [1, 2, 3]);
    assert.deepEqual(await numbers("sort=updated&direction=desc"), [3, 2, 1]);
    assert.deepEqual(await numbers("sort=popularity"), [1, 2, 3]);
    assert.deepEqual(await numbers("sort=long-running"), [1, 2, 3]);
    await new Promise((r) => setTimeout(r, 1100));
    await t.call("PATCH", "/repos/alice/app/pulls/1", { title: "touched" });
    assert.deepEqual(await numbers("sort=updated"), [2, 3, 1]);
    assert.deepEqual(await numbers("sort=updated&direction=desc"), [1, 3, 2]);
    for (const q of ["sort=bogus", "sort="]) {
      const r = await t.call("GET", `/repos/alice/app/pulls?${q}`);
      assert.equal(r.status, 422, q);
      assert.deepEqual(r.json.errors[0].field, "sort", q);
    }
  } finally {
    await t.close();
  }
});

Deno.test("ETag on GETs answers 304 to If-None-Match, and every response has a request id", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 1);
    const first = await t.call("GET", "/repos/alice/app/pulls/1");
    const etag = first.headers.get("etag")!;
    assert.match(etag, /^W\/"[0-9a-f]{32}"$/);
    assert.ok(first.headers.get("x-github-request-id"));
    const again = await t.call("GET", "/repos/alice/app/pulls/1", undefined, "alice", {
      "If-None-Match": etag,
    });
    assert.equal(again.status, 304);
    await t.call("PATCH", "/repos/alice/app/pulls/1", { title: "changed" });
    assert.equal(
      (await t.call("GET", "/repos/alice/app/pulls/1", undefined, "alice", {
        "If-None-Match": etag,
      })).status,
      200,
    );
  } finally {
    await t.close();
  }
});

Deno.test("If-None-Match compares weakly and takes *; the selected API version is the request's, not the cache's", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 1);
    const path = "/repos/alice/app/pulls/1";
    const etag = (await t.call("GET", path)).headers.get("etag")!;
    const strong = etag.replace(/^W\//, "");
    for (const inm of [etag, strong, `"other", ${etag}`, "*"]) {
      const r = await t.call("GET", path, undefined, "alice", { "If-None-Match": inm });
      assert.equal(r.status, 304, inm);
      assert.equal(r.headers.get("etag"), etag, inm);
    }
    assert.equal(
      (await t.call("GET", path, undefined, "alice", { "If-None-Match": '"other"' })).status,
      200,
    );
    for (const version of ["2026-03-10", "2022-11-28", undefined, "2026-03-10"]) {
      const r = await t.call(
        "GET",
        path,
        undefined,
        "alice",
        version ? { "X-GitHub-Api-Version": version } : {},
      );
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("x-github-api-version-selected"), version ?? null, version);
    }
  } finally {
    await t.close();
  }
});

Deno.test("an in-memory store's GETs see every change (the response cache does not serve stale data)", async () => {
  const store = openSqliteStore(":memory:");
  try {
    await store.transaction(async () => {
      const u = await store.ensureUser("alice");
      await store.addToken(u.id, hashToken("tok-alice"));
    });
    const app = createApp({ store });
    const auth = { authorization: "Bearer tok-alice" };
    await app.request("/user/repos", { method: "POST", headers: auth, body: '{"name":"app"}' });
    assert.equal(
      (await (await app.request("/repos/alice/app", { headers: auth })).json()).private,
      false,
    );
    assert.equal((await app.request("/repos/alice/app")).status, 200);
    await app.request("/repos/alice/app", {
      method: "PATCH",
      headers: auth,
      body: '{"private":true}',
    });
    assert.equal(
      (await (await app.request("/repos/alice/app", { headers: auth })).json()).private,
      true,
    );
    const anon = await app.request("/repos/alice/app");
    await anon.body?.cancel();
    assert.equal(anon.status, 404, "a repository made private is hidden at once");
  } finally {
    await store.close();
  }
});

Deno.test("the Stacks API is 404 on a repository without stacked pull requests, for every caller", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 2, false);
    for (
      const [m, p, b] of [
        ["GET", "/repos/alice/app/stacks"],
        ["GET", "/repos/alice/app/stacks/1"],
        ["POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] }],
        ["POST", "/repos/alice/app/stacks/1/add", { pull_requests: [2] }],
        ["POST", "/repos/alice/app/stacks/1/unstack"],
      ] as [string, string, unknown?][]
    ) {
      // The owner, a user without push access, and no token at all: the
      // feature is absent, so no 401/403 about who may write to it.
      for (const who of ["alice", "bob", ""]) {
        assert.equal(
          (await t.call(m, p, b, who)).status,
          404,
          `${m} ${p} as ${who || "anonymous"}`,
        );
      }
    }
  } finally {
    await t.close();
  }
});

Deno.test("stacks: create, validate, add, list newest first, filter, stack objects on pulls", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 5);
    const tooFew = await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1] });
    assert.deepEqual([tooFew.status, tooFew.json.errors[0].message], [
      422,
      "Stack must contain at least two pull requests",
    ]);
    const broken = await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 3] });
    assert.equal(
      broken.json.errors[0].message,
      "Pull requests must form a stack, where each PR's base ref is the previous PR's head ref",
    );
    assert.equal(
      (await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 99] })).json.errors[0]
        .message,
      "Pull request #99 does not exist",
    );
    const s = await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2, 3] });
    assert.equal(s.status, 201);
    assert.deepEqual(
      [
        s.json.number,
        s.json.base.ref,
        s.json.open,
        s.json.pull_requests.map((p: { number: number }) => p.number),
      ],
      [1, "main", true, [1, 2, 3]],
    );
    for (const f of ["id", "node_id", "url", "created_at"]) assert.ok(s.json[f], f);
    assert.deepEqual(Object.keys(s.json.pull_requests[0]).sort(), [
      "draft",
      "head",
      "merged_at",
      "number",
      "state",
    ]);
    const again = await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [2, 3] });
    assert.equal(
      again.json.errors.find((e: { message: string }) => /already stacked/.test(e.message)).message,
      "Pull requests #2, #3 are already stacked",
    );
    const pr2 = (await t.call("GET", "/repos/alice/app/pulls/2")).json;
    assert.deepEqual(pr2.stack, {
      id: s.json.id,
      number: 1,
      size: 3,
      position: 2,
      base: {
        ref: "main",
        sha: (await t.call("GET", "/repos/alice/app/git/ref/heads/main")).json.object.sha,
      },
    });
    assert.equal(
      (await t.call("POST", "/repos/alice/app/stacks/1/add", { pull_requests: [5] })).status,
      422,
    );
    const added = await t.call("POST", "/repos/alice/app/stacks/1/add", { pull_requests: [4, 5] });
    assert.equal(added.status, 200);
    assert.deepEqual(added.json.pull_requests.map((p: { number: number }) => p.number), [
      1,
      2,
      3,
      4,
      5,
    ]);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls/5")).json.stack.position, 5);
    // A second stack, to see ordering and the filter.
    await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/x1", sha: SHA("a") });
    await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/x2", sha: SHA("b") });
    await t.call("POST", "/repos/alice/app/pulls", { title: "x1", head: "x1", base: "main" });
    await t.call("POST", "/repos/alice/app/pulls", { title: "x2", head: "x2", base: "x1" });
    assert.equal(
      (await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [6, 7] })).json.number,
      2,
    );
    const list = await t.call("GET", "/repos/alice/app/stacks");
    assert.deepEqual(list.json.map((s: { number: number }) => s.number), [2, 1]);
    assert.deepEqual(
      (await t.call("GET", "/repos/alice/app/stacks?pull_request=4")).json.map((
        s: { number: number },
      ) => s.number),
      [1],
    );
    const paged = await t.call("GET", "/repos/alice/app/stacks?per_page=1&page=2");
    assert.deepEqual(paged.json.map((s: { number: number }) => s.number), [1]);
    assert.match(paged.headers.get("link")!, /rel="prev"/);
    assert.equal((await t.call("GET", "/repos/alice/app/stacks/9")).status, 404);
  } finally {
    await t.close();
  }
});

Deno.test("merging in a stack cascades from the bottom, retargets, moves the base; closed middle blocks", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 4);
    await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2, 3, 4] });
    const mainBefore = (await t.call("GET", "/repos/alice/app/git/ref/heads/main")).json.object.sha;
    const merged = await t.call("PUT", "/repos/alice/app/pulls/2/merge");
    assert.equal(merged.status, 200);
    assert.equal(merged.json.merged, true);
    const [p1, p2, p3] = await Promise.all(
      [1, 2, 3].map(async (n) => (await t.call("GET", `/repos/alice/app/pulls/${n}`)).json),
    );
    assert.ok(p1.merged && p2.merged && !p3.merged);
    assert.ok(p1.merged_at <= p2.merged_at);
    assert.equal(p3.base.ref, "main", "lowest unmerged is retargeted to the stack base");
    const mainAfter = (await t.call("GET", "/repos/alice/app/git/ref/heads/main")).json.object.sha;
    assert.notEqual(mainAfter, mainBefore);
    assert.equal(mainAfter, p2.merge_commit_sha);
    assert.equal(p3.stack.base.sha, mainAfter);
    // Close #3 (middle of what remains): #4 cannot be merged.
    await t.call("PATCH", "/repos/alice/app/pulls/3", { state: "closed" });
    const blocked = await t.call("PUT", "/repos/alice/app/pulls/4/merge");
    assert.equal(blocked.status, 405);
    assert.match(blocked.json.message, /not mergeable/);
    assert.equal(
      (await t.call("PUT", "/repos/alice/app/pulls/1/merge")).status,
      405,
      "already merged",
    );
    await t.call("PATCH", "/repos/alice/app/pulls/4", { state: "closed" });
    const s = (await t.call("GET", "/repos/alice/app/stacks/1")).json;
    assert.equal(s.open, false);
    const ext = await t.call("POST", "/repos/alice/app/stacks/1/add", { pull_requests: [5] });
    assert.equal(ext.status, 409);
    // Unstack: closed-unmerged leave, merged stay.
    const un = await t.call("POST", "/repos/alice/app/stacks/1/unstack");
    assert.equal(un.status, 200);
    assert.deepEqual(un.json.pull_requests.map((p: { number: number }) => p.number), [1, 2]);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls/4")).json.stack, null);
    assert.equal(
      (await t.call("GET", "/repos/alice/app/pulls/4")).json.base.ref,
      "b3",
      "leaving keeps the base",
    );
  } finally {
    await t.close();
  }
});

Deno.test("unstack of a stack with nothing merged dissolves it with 204", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 2);
    await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] });
    const r = await t.app.request("/repos/alice/app/stacks/1/unstack", {
      method: "POST",
      headers: { authorization: "Bearer tok-alice" },
    });
    assert.equal(r.status, 204);
    assert.equal((await t.call("GET", "/repos/alice/app/stacks/1")).status, 404);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls/2")).json.stack, null);
  } finally {
    await t.close();
  }
});

Deno.test("webhooks: create, list, edit, delete; events land in the outbox with the stack object", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 2);
    const bad = await t.call("POST", "/repos/alice/app/hooks", { config: { url: "ftp://x" } });
    assert.equal(bad.status, 422);
    const h = await t.call("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/hook", secret: "s3cret" },
      events: ["pull_request"],
    });
    assert.equal(h.status, 201);
    assert.equal(h.json.config.secret, "********");
    assert.equal((await t.call("GET", "/repos/alice/app/hooks", undefined, "bob")).status, 403);
    await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] });
    const deliveries = await t.call("GET", `/repos/alice/app/hooks/${h.json.id}/deliveries`);
    assert.deepEqual(deliveries.json.map((d: { event: string }) => d.event), [
      "pull_request",
      "pull_request",
      "ping",
    ]);
    assert.deepEqual(deliveries.json.map((d: { action: string }) => d.action), [
      "stacked",
      "stacked",
      null,
    ]);
    const d = await (t.store as Store).getDelivery(h.json.id, deliveries.json[0].id);
    const payload = JSON.parse(d!.payload);
    assert.equal(payload.pull_request.stack.number, 1);
    assert.equal(payload.stack.number, 1);
    const re = await t.call(
      "POST",
      `/repos/alice/app/hooks/${h.json.id}/deliveries/${deliveries.json[0].id}/attempts`,
    );
    assert.equal(re.status, 202);
    assert.equal(
      (await t.call("GET", `/repos/alice/app/hooks/${h.json.id}/deliveries`)).json[0].redelivery,
      true,
    );
    const p = await t.call("PATCH", `/repos/alice/app/hooks/${h.json.id}`, { active: false });
    assert.equal(p.json.active, false);
    assert.equal((await t.call("DELETE", `/repos/alice/app/hooks/${h.json.id}`)).status, 204);
    assert.equal((await t.call("GET", `/repos/alice/app/hooks/${h.json.id}`)).status, 404);
  } finally {
    await t.close();
  }
});

Deno.test("redelivery names a delivery of this repository's hook: another repository's, or an unknown one, is 404", async () => {
  const t = await setup();
  try {
    await repoWithChain(t.call, 2);
    const h = await t.call("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/hook" },
      events: ["pull_request"],
    });
    await t.call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] });
    const listing = `/repos/alice/app/hooks/${h.json.id}/deliveries`;
    const [d] = (await t.call("GET", listing)).json;
    await t.call("POST", "/user/repos", { name: "own" }, "bob");
    const cases: [string, string][] = [
      ["bob", `/repos/bob/own/hooks/${h.json.id}/deliveries/${d.id}/attempts`],
      ["alice", `/repos/alice/app/hooks/${h.json.id}/deliveries/999999/attempts`],
      ["alice", `/repos/alice/app/hooks/999999/deliveries/${d.id}/attempts`],
      ["alice", `/repos/alice/app/hooks/${h.json.id}/deliveries/x/attempts`],
    ];
    for (const [who, path] of cases) {
      assert.equal((await t.call("POST", path, undefined, who)).status, 404, `${who} ${path}`);
    }
    assert.equal((await t.call("GET", listing)).json.length, 3, "no delivery was added");
  } finally {
    await t.close();
  }
});

Deno.test("a hook's content_type is form (GitHub's default) or json; anything else is 422", async () => {
  const t = await setup();
  try {
    await t.call("POST", "/user/repos", { name: "app" });
    const create = (config: Record<string, unknown>) =>
      t.call("POST", "/repos/alice/app/hooks", {
        config: { url: "http://127.0.0.1:9/", ...config },
      });
    const plain = await create({ url: "http://127.0.0.1:9/plain" });
    assert.equal(plain.json.config.content_type, "form");
    const json = await create({ content_type: "json" });
    assert.equal(json.json.config.content_type, "json");
    assert.equal(
      (await t.call("GET", `/repos/alice/app/hooks/${json.json.id}`)).json.config.content_type,
      "json",
    );
    for (const bad of ["xml", "", 1, null]) {
      const r = await create({ content_type: bad });
      assert.equal(r.status, 422, JSON.stringify(bad));
      assert.equal(r.json.errors[0].field, "content_type");
    }
    const p = await t.call("PATCH", `/repos/alice/app/hooks/${json.json.id}`, {
      config: { content_type: "form" },
    });
    assert.equal(p.status, 200);
    assert.equal(p.json.config.content_type, "form");
    assert.equal(p.json.config.url, "http://127.0.0.1:9/", "a PATCH without url keeps it");
  } finally {
    await t.close();
  }
});

Deno.test("an unexpected error is logged with its stack, and the request's text in it neither writes escapes nor adds lines", async () => {
  const store = openSqliteStore(":memory:");
  // A store that fails as a bug would, with the request's owner in the message.
  const failing = new Proxy(store, {
    get(target, prop) {
      if (prop === "getRepo") {
        return (owner: string) => {
          throw new TypeError(`Cannot read the repositories of ${owner}`);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const logged: string[] = [];
  const consoleError = console.error;
  console.error = (...args: unknown[]) => logged.push(args.join(" "));
  try {
    const owner = "\x1b[2J\x1b]0;pwned\x07\rx\nforgekit stacks: a forged line\u202e";
    const res = await createApp({ store: failing }).request(
      `/repos/${encodeURIComponent(owner)}/app`,
    );
    assert.equal(res.status, 500);
    assert.equal((await res.json()).message, "Internal Server Error");
  } finally {
    console.error = consoleError;
    await store.close();
  }
  assert.equal(logged.length, 1);
  const [first, ...frames] = logged[0].split("\n");
  assert.equal(
    first,
    "forgekit stacks: internal error on GET /repos/\\x1b[2J\\x1b]0%3Bpwned\\x07\\x0dx\\x0aforgekit stacks%3A a forged line\\u202e/app: " +
      "TypeError: Cannot read the repositories of \\x1b[2J\\x1b]0;pwned\\x07\\x0dx\\x0aforgekit stacks: a forged line\\u202e",
  );
  assert.ok(frames.length > 0, "the stack's frames are kept");
  for (const frame of frames) assert.match(frame, /^ {4}at \S/);
});
