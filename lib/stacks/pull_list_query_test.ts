import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { pullListQuery } from "./pull_list_query.ts";
import { openSqliteStore } from "./sqlite_store.ts";
import type { PullFilter } from "./store.ts";

/** A database file with the store's current schema, opened directly. */
async function schemaDb(): Promise<{ db: DatabaseSync; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-plan-" });
  await openSqliteStore(join(dir, "s.db")).close();
  return { db: new DatabaseSync(join(dir, "s.db")), dir };
}

function plan(db: DatabaseSync, sql: string, args: (string | number)[]): string {
  return db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args)
    .map((r) => String((r as { detail: string }).detail)).join("\n");
}

const FILTERS: PullFilter[] = (["open", "closed", "all"] as const).flatMap((state) =>
  (["created", "updated"] as const).flatMap((sort) =>
    (["asc", "desc"] as const).map((direction) => ({ state, sort, direction }))
  )
);

Deno.test("every pull listing is read in index order: no sort, for each state, sort and direction", async () => {
  const { db, dir } = await schemaDb();
  try {
    for (const f of FILTERS) {
      const q = pullListQuery(1, f);
      const page = plan(db, q.page, [...q.args, 100, 49_900]);
      const what = `${JSON.stringify(f)}:\n${page}`;
      assert.doesNotMatch(page, /TEMP B-TREE/, what);
      assert.match(page, /^SEARCH p USING COVERING INDEX pulls_list_\w+ \(repo_id=\?/, what);
      const count = plan(db, q.count, q.args);
      assert.match(count, /^SEARCH p USING COVERING INDEX pulls_list_\w+ \(repo_id=\?/, count);
    }
  } finally {
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("pull listings by head or base find them by that branch's index, never by scanning the repository", async () => {
  const { db, dir } = await schemaDb();
  try {
    for (const f of FILTERS) {
      const head = pullListQuery(1, { ...f, head: "topic" });
      const byHead = plan(db, head.page, [...head.args, 30, 0]);
      assert.match(
        byHead,
        /^SEARCH p USING (COVERING )?INDEX pulls_head \(repo_id=\? AND head_ref=\?\)/,
        byHead,
      );
      const base = pullListQuery(1, { ...f, base: "main" });
      const byBase = plan(db, base.page, [...base.args, 30, 0]);
      assert.match(
        byBase,
        /^SEARCH p USING (COVERING )?INDEX pulls_base \(repo_id=\? AND base_ref=\?/,
        byBase,
      );
      if (f.state !== "all" && f.sort === "created") {
        assert.doesNotMatch(byBase, /TEMP B-TREE/, `${JSON.stringify(f)}: ${byBase}`);
      }
      const count = plan(db, base.count, base.args);
      assert.match(count, /^SEARCH p USING COVERING INDEX pulls_base/, count);
    }
  } finally {
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a version 2 database gets the listing indexes when opened", async () => {
  const { db, dir } = await schemaDb();
  const file = join(dir, "s.db");
  try {
    // Back to version 2's indexes, as a database made before them has.
    db.exec(`
      DROP INDEX pulls_list_state; DROP INDEX pulls_list_state_updated;
      DROP INDEX pulls_list_all; DROP INDEX pulls_list_all_updated;
      DROP INDEX pulls_base; CREATE INDEX pulls_base ON pulls (repo_id, base_ref);
      PRAGMA user_version = 2;`);
    await openSqliteStore(file).close();
    const version = db.prepare("PRAGMA user_version").get() as { user_version: number };
    assert.equal(version.user_version, 5);
    const q = pullListQuery(1, { state: "open", sort: "updated", direction: "desc" });
    assert.doesNotMatch(plan(db, q.page, [...q.args, 30, 0]), /TEMP B-TREE/);
    const cols = db.prepare("SELECT name FROM pragma_index_info('pulls_base')").all()
      .map((r) => (r as { name: string }).name);
    assert.deepEqual(cols, ["repo_id", "base_ref", "state", "id"]);
  } finally {
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
});
