import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { sqliteFailure } from "./sqlite_failure.ts";
import { StoreError } from "./store_error.ts";

Deno.test("sqliteFailure() sorts SQLite's errors into busy, full, readonly and io; others are not storage failures", () => {
  const withCode = (code: number) => Object.assign(new Error("x"), { errcode: code });
  const cases: [unknown, string | null][] = [
    [new Error("database is locked"), "busy"],
    [new Error("database table is locked: users"), "busy"],
    [new Error("database or disk is full"), "full"],
    [new Error("attempt to write a readonly database"), "readonly"],
    [new Error("disk I/O error"), "io"],
    [withCode(5), "busy"],
    [withCode(517), "busy"], // SQLITE_BUSY_SNAPSHOT
    [withCode(13), "full"],
    [withCode(778), "io"], // SQLITE_IOERR_WRITE
    [withCode(19), null], // SQLITE_CONSTRAINT
    [new Error("UNIQUE constraint failed: users.login"), null],
    [new Error("cannot rollback - no transaction is active"), null],
    [new Error("no such table: pulls"), null],
    ["database is locked", null],
    [null, null],
  ];
  for (const [err, want] of cases) {
    const got = sqliteFailure(err);
    assert.equal(got?.failure ?? null, want, String(err));
    if (got) assert.equal(got.cause, err);
  }
  const already = new StoreError("busy", "Database is locked");
  assert.equal(sqliteFailure(already), already);
});

Deno.test("sqliteFailure() knows the errors node:sqlite really throws", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-sqlite-failure-" });
  const holder = new DatabaseSync(`${dir}/s.db`);
  const waiter = new DatabaseSync(`${dir}/s.db`);
  try {
    holder.exec("PRAGMA journal_mode = WAL; CREATE TABLE t (x); BEGIN IMMEDIATE;");
    waiter.exec("PRAGMA busy_timeout = 0");
    let busy: unknown;
    try {
      waiter.exec("BEGIN IMMEDIATE");
    } catch (err) {
      busy = err;
    }
    assert.equal(sqliteFailure(busy)?.failure, "busy");
  } finally {
    holder.close();
    waiter.close();
    await Deno.remove(dir, { recursive: true });
  }
  const db = new DatabaseSync(":memory:");
  try {
    db.exec("CREATE TABLE t (x); PRAGMA max_page_count = 2;");
    let thrown: unknown;
    try {
      db.exec("INSERT INTO t VALUES (randomblob(100000))");
    } catch (err) {
      thrown = err;
    }
    assert.equal(sqliteFailure(thrown)?.failure, "full");
    try {
      db.exec("INSERT INTO nope VALUES (1)");
    } catch (err) {
      thrown = err;
    }
    assert.equal(sqliteFailure(thrown), null);
  } finally {
    db.close();
  }
});
