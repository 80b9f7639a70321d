/**
 * The listings' rendered JSON is pinned byte for byte: a repository of varied
 * pull requests and stacks (drafts, closed, merged, stacked at every
 * position, escapes, non-ASCII, deleted base branches, two authors) is read
 * through every listing shape, and each response's status, body, `Link`,
 * `ETag` and `Content-Type` must equal the fixture captured from the server
 * before its list path was made faster (`stacks_list_perf_fixture.json`).
 *
 * Regenerate the fixture only for an intended change of the JSON:
 * `FORGEKIT_UPDATE_FIXTURE=1 deno test -A lib/stacks/stacks_list_perf_test.ts`.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DatabaseSync } from "node:sqlite";
import { createApp, hashToken } from "./app.ts";
import { pullListQuery } from "./pull_list_query.ts";
import { openSqliteStore } from "./sqlite_store.ts";
import type { PullFilter } from "./store.ts";

const FIXTURE = fileURLToPath(new URL("./stacks_list_perf_fixture.json", import.meta.url));
const ORIGIN = "http://forge.test";
const SHA = (c: string) => c.repeat(40);

/** What a response is pinned by. */
interface Captured {
  status: number;
  body: string;
  link: string | null;
  etag: string | null;
  contentType: string | null;
}

/** The listings read, each as a path under {@linkcode ORIGIN}. */
const READS = [
  "/repos/alice/app/pulls?per_page=100&state=all",
  "/repos/alice/app/pulls",
  "/repos/alice/app/pulls?state=closed&sort=updated",
  "/repos/alice/app/pulls?state=all&sort=updated&direction=desc&per_page=7&page=2",
  "/repos/alice/app/pulls?state=all&sort=popularity&per_page=4&page=3",
  "/repos/alice/app/pulls?state=all&direction=asc&per_page=9",
  "/repos/alice/app/pulls?state=all&base=main",
  "/repos/alice/app/pulls?state=all&head=alice:feature/%E6%97%A5%E6%9C%AC",
  "/repos/alice/app/pulls?state=open&base=s1",
  "/repos/alice/app/pulls?per_page=100&page=9",
  "/api/v3/repos/alice/app/pulls?state=all&per_page=5&page=3",
  "/repos/alice/app/pulls/1",
  "/repos/alice/app/pulls/3",
  "/repos/alice/app/pulls/12",
  "/repos/alice/app/stacks",
  "/repos/alice/app/stacks?per_page=2&page=2",
  "/repos/alice/app/stacks?pull_request=5",
  "/repos/alice/app/stacks?pull_request=1",
  "/repos/alice/app/stacks/1",
  "/repos/alice/app/stacks/3",
  "/api/v3/repos/alice/app/stacks?per_page=100",
];

/** Builds the repository through the API, pins every timestamp, and reads {@linkcode READS}. */
async function capture(): Promise<Record<string, Captured>> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-golden-" });
  const path = join(dir, "s.db");
  const store = openSqliteStore(path);
  try {
    const tokens: Record<string, string> = {};
    for (const login of ["alice", "bob"]) {
      tokens[login] = `tok-${login}`;
      await store.transaction(async () => {
        const u = await store.ensureUser(login);
        await store.addToken(u.id, hashToken(tokens[login]));
      });
    }
    const app = createApp({ store });
    const call = async (method: string, p: string, body?: unknown, who = "alice") => {
      const res = await app.request(`${ORIGIN}${p}`, {
        method,
        headers: { authorization: `Bearer ${tokens[who]}` },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      assert.ok(res.status < 300, `${method} ${p}: ${res.status} ${text}`);
      return text ? JSON.parse(text) : null;
    };
    const branch = (name: string, sha: string) =>
      call("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/${name}`, sha });
    const pull = (fields: Record<string, unknown>, who = "alice") =>
      call("POST", "/repos/alice/app/pulls", fields, who);

    await call("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true });
    await call("PUT", "/repos/alice/app/collaborators/bob");
    // Stack 1: s1 <- s2 <- s3 on main; its bottom two are merged below.
    for (const [i, b] of ["s1", "s2", "s3"].entries()) await branch(b, SHA(String(i + 1)));
    await pull({ title: "Stack one, bottom", head: "s1", base: "main", body: "First\n\nLine" });
    await pull({ title: 'Quotes "double" and \\ backslash', head: "s2", base: "s1" });
    await pull({ title: "Top of stack one", head: "s3", base: "s2", draft: true });
    await call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2, 3] });
    // Stack 2, by bob, on a release branch deleted once its pull requests are closed.
    await branch("release", SHA("7"));
    await branch("t1", SHA("a"));
    await branch("t2", SHA("b"));
    await pull({ title: "日本語のタイトル ✓ 🚀", head: "t1", base: "release", body: "" }, "bob");
    await pull(
      { title: "Controls \t\n\u0001\u001f and \u2028\u2029", head: "t2", base: "t1" },
      "bob",
    );
    await call("POST", "/repos/alice/app/stacks", { pull_requests: [4, 5] }, "bob");
    // Standalone pull requests: unicode branch, HTML-ish text, a long title, drafts.
    await branch("feature/日本", SHA("c"));
    await pull({ title: "</script><b>&amp;</b>", head: "feature/日本", base: "main" });
    await branch("long", SHA("d"));
    await pull({ title: "L".repeat(256), head: "long", base: "main", body: "é".repeat(300) });
    await branch("drafty", SHA("e"));
    await pull({ title: "Draft standalone", head: "drafty", base: "main", draft: true }, "bob");
    // Stack 3: four deep, with an extra pull request added afterwards.
    let base = "main";
    for (let i = 1; i <= 5; i++) {
      await branch(`deep${i}`, SHA("abcdef"[i]));
      await pull({ title: `Deep ${i}`, head: `deep${i}`, base });
      base = `deep${i}`;
    }
    await call("POST", "/repos/alice/app/stacks", { pull_requests: [9, 10, 11, 12] });
    await call("POST", "/repos/alice/app/stacks/3/add", { pull_requests: [13] });
    // More standalone ones, to fill pages.
    for (let i = 0; i < 9; i++) {
      await branch(`misc${i}`, SHA(String(i)));
      await pull({ title: `Misc ${i} 🙂`, head: `misc${i}`, base: i % 2 ? "main" : "s3" });
    }
    // Changes: a merge in stack 1 (cascade, retarget), a close, a reopen, a
    // moved head, an edited title, stack 2 closed and its base branch deleted.
    await call("PUT", "/repos/alice/app/pulls/2/merge", {});
    await call("PATCH", "/repos/alice/app/pulls/6", { state: "closed" });
    await call("PATCH", "/repos/alice/app/pulls/14", { state: "closed" });
    await call("PATCH", "/repos/alice/app/pulls/14", { state: "open" });
    await call("PATCH", "/repos/alice/app/git/refs/heads/misc2", { sha: SHA("9") });
    await call("PATCH", "/repos/alice/app/pulls/15", { title: "Edited ✎", body: null });
    await call("PATCH", "/repos/alice/app/pulls/4", { state: "closed" });
    await call("PATCH", "/repos/alice/app/pulls/5", { state: "closed" });
    await call("DELETE", "/repos/alice/app/git/refs/heads/release");
    await call("PUT", "/repos/alice/app/pulls/7/merge", {});

    // Pin every timestamp: updated_at has ties, so sort=updated falls back on ids.
    const db = new DatabaseSync(path);
    try {
      const at = (minute: number) =>
        `2024-03-0${1 + Math.floor(minute / 60)}T10:${String(minute % 60).padStart(2, "0")}:00Z`;
      for (const { id } of db.prepare("SELECT id FROM pulls").all() as { id: number }[]) {
        db.prepare(
          `UPDATE pulls SET created_at = ?, updated_at = ?,
             closed_at = CASE WHEN closed_at IS NULL THEN NULL ELSE ? END,
             merged_at = CASE WHEN merged_at IS NULL THEN NULL ELSE ? END WHERE id = ?`,
        ).run(at(id), at(40 + (id * 7) % 5), at(90 + id), at(90 + id), id);
      }
      db.prepare("UPDATE stacks SET created_at = ? || id || 'Z'").run("2024-02-01T00:00:0");
      db.prepare("UPDATE repos SET created_at = ?, updated_at = ?").run(
        "2024-01-01T00:00:00Z",
        "2024-01-02T00:00:00Z",
      );
    } finally {
      db.close();
    }

    const out: Record<string, Captured> = {};
    for (const p of READS) {
      const res = await app.request(`${ORIGIN}${p}`, {
        headers: { authorization: `Bearer ${tokens.alice}` },
      });
      out[p] = {
        status: res.status,
        body: await res.text(),
        link: res.headers.get("link"),
        etag: res.headers.get("etag"),
        contentType: res.headers.get("content-type"),
      };
    }
    return out;
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("every listing renders exactly the JSON, Link and ETag captured before the fast path", async () => {
  const got = await capture();
  if (Deno.env.get("FORGEKIT_UPDATE_FIXTURE") === "1") {
    await Deno.writeTextFile(FIXTURE, JSON.stringify(got, null, 2) + "\n");
  }
  const want = JSON.parse(await Deno.readTextFile(FIXTURE)) as Record<string, Captured>;
  assert.deepEqual(Object.keys(got), Object.keys(want));
  for (const p of READS) assert.deepEqual(got[p], want[p], p);
});

Deno.test("listPulls returns every page in the listing's order: the ids its page statement reads, in that order", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-order-" });
  const path = join(dir, "s.db");
  const store = openSqliteStore(path);
  const db = new DatabaseSync(path);
  try {
    const repoId = await store.transaction(async () => {
      const u = await store.ensureUser("alice");
      const repo = await store.createRepo({
        owner_id: u.id,
        name: "app",
        private: false,
        allow_stacked_pull_requests: true,
        default_branch: "main",
      });
      for (let i = 0; i < 60; i++) {
        await store.insertPull({
          repo_id: repo.id,
          user_id: u.id,
          title: `PR ${i}`,
          body: null,
          draft: i % 5 === 0,
          head_ref: `topic${i % 9}`,
          head_sha: SHA("a"),
          base_ref: i % 3 ? "main" : "dev",
        });
      }
      return repo.id;
    });
    // Ties in updated_at, and ids out of step with it, so that every order is checked.
    db.exec(`UPDATE pulls SET updated_at = '2024-01-0' || (1 + (id * 7) % 4) || 'T00:00:00Z',
      state = CASE WHEN id % 4 = 0 THEN 'closed' ELSE 'open' END`);
    const filters: PullFilter[] = (["open", "closed", "all"] as const).flatMap((state) =>
      (["created", "updated"] as const).flatMap((sort) =>
        (["asc", "desc"] as const).flatMap((direction) => [
          { state, sort, direction },
          { state, sort, direction, base: "main" },
          { state, sort, direction, head: "topic4" },
        ])
      )
    );
    for (const f of filters) {
      const q = pullListQuery(repoId, f);
      const total = (db.prepare(q.count).get(...q.args) as { n: number }).n;
      for (const [limit, offset] of [[7, 0], [7, 14], [100, 0], [13, 39], [5, total], [5, 500]]) {
        const want = db.prepare(q.page).all(...q.args, limit, offset)
          .map((r) => (r as { id: number }).id);
        const got = await store.listPulls(repoId, f, limit, offset);
        const what = `${JSON.stringify(f)} limit ${limit} offset ${offset}`;
        assert.deepEqual(got.items.map((p) => p.id), want, what);
        assert.equal(got.total, total, what);
      }
    }
  } finally {
    db.close();
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});
