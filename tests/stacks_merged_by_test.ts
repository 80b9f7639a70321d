/**
 * `merged_by` and the other merge fields of a pull request, the schema
 * migration that keeps who merged, what processes opening one database at
 * once (or upgrading it under a running server) may do, and what a stop
 * says: real `forgekit stacks serve` processes on loopback, real SQLite
 * files, and the database checked with SQL afterwards.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { runForgekit } from "./support/cli.ts";
import { apiCaller, createToken, seedStacks, startStacksServer } from "./support/stacks_server.ts";
import { until } from "./support/until.ts";

const SHA = (c: string) => c.repeat(40);
const P = "/repos/alice/app/pulls";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A temporary directory with a database (made by forgekit) and alice's token, removed by `close`. */
async function workspace(prefix: string) {
  const dir = await Deno.makeTempDir({ prefix: `forgekit-${prefix}-` });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  return { dir, db, tok, close: () => Deno.remove(dir, { recursive: true }) };
}

/** The database's schema version. */
function schemaVersion(db: string): number {
  const sql = new DatabaseSync(db);
  try {
    return Number(
      (sql.prepare("PRAGMA user_version").get() as { user_version: number }).user_version,
    );
  } finally {
    sql.close();
  }
}

/** The columns of `table`, as SQLite describes them. */
function columns(db: string, table: string): unknown[] {
  const sql = new DatabaseSync(db);
  try {
    return sql.prepare(`SELECT * FROM pragma_table_info('${table}')`).all();
  } finally {
    sql.close();
  }
}

/** Takes a version 5 database back to version 4: before pull requests kept who merged them. */
function toVersion4(sql: DatabaseSync) {
  sql.exec("ALTER TABLE pulls DROP COLUMN merged_by_id; PRAGMA user_version = 4;");
}

/** A receiver of JSON webhook deliveries on loopback, collecting `[event, payload]`. */
function receiver() {
  // deno-lint-ignore no-explicit-any -- payloads are read freely
  const got: [string, any][] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    got.push([req.headers.get("x-github-event") ?? "", await req.json()]);
    return new Response(null, { status: 204 });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/hook`, got, close: () => server.shutdown() };
}

Deno.test("merged_by is the user who made the merge call, on GET, listings and the closed webhook; the merge response keeps GitHub's shape", async () => {
  const w = await workspace("merged-by");
  const bobTok = await createToken(w.db, "bob");
  const s = await startStacksServer(w.db);
  const hooks = receiver();
  try {
    const alice = apiCaller(s.url, w.tok);
    const bob = apiCaller(s.url, bobTok);
    assert.equal(
      (await alice("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true }))
        .status,
      201,
    );
    assert.equal((await alice("PUT", "/repos/alice/app/collaborators/bob")).status, 204);
    let base = "main";
    for (const b of ["b1", "b2", "b3"]) {
      await alice("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/${b}`, sha: SHA("1") });
      assert.equal((await alice("POST", P, { title: b, head: b, base })).status, 201);
      base = b;
    }
    assert.equal(
      (await alice("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2, 3] })).status,
      201,
    );
    const hook = await alice("POST", "/repos/alice/app/hooks", {
      config: { url: hooks.url, content_type: "json" },
      events: ["pull_request"],
    });
    assert.equal(hook.status, 201, JSON.stringify(hook.json));

    const before = (await alice("GET", `${P}/2`)).json;
    assert.equal(before.merged_by, null, "an open pull request has no merger");
    assert.equal(before.merged, false);

    // Bob merges #2: #1 below it is merged in the same call, by him too.
    const merged = await bob("PUT", `${P}/2/merge`);
    assert.equal(merged.status, 200, JSON.stringify(merged.json));
    assert.deepEqual(Object.keys(merged.json).sort(), ["merged", "message", "sha"]);
    assert.equal(merged.json.merged, true);

    const me = (await bob("GET", "/user")).json;
    const pulls = await Promise.all(
      [1, 2, 3].map(async (n) => (await alice("GET", `${P}/${n}`)).json),
    );
    for (const p of pulls.slice(0, 2)) {
      assert.equal(p.merged, true, `#${p.number}`);
      assert.equal(p.state, "closed");
      assert.equal(typeof p.merged_at, "string");
      assert.equal(p.merge_commit_sha.length, 40);
      assert.deepEqual(Object.keys(p.merged_by), Object.keys(p.user), "a user object, as `user`");
      assert.deepEqual([p.merged_by.login, p.merged_by.id], ["bob", me.id]);
      assert.equal(p.merged_by.node_id, me.node_id);
      assert.equal(p.user.login, "alice", "the author stays alice");
      assert.deepEqual([p.mergeable, p.mergeable_state], [null, "unknown"]);
    }
    assert.equal(pulls[1].merge_commit_sha, merged.json.sha);
    const open = pulls[2];
    assert.deepEqual(
      [open.merged, open.merged_at, open.merge_commit_sha, open.merged_by],
      [false, null, null, null],
    );
    assert.deepEqual([open.mergeable, open.mergeable_state], [true, "clean"]);

    // A listing shows the same merger; like GitHub's, it leaves out mergeable and mergeable_state.
    const listed = (await alice("GET", `${P}?state=all&direction=asc`)).json;
    assert.deepEqual(
      listed.map((p: { number: number; merged_by: { login: string } | null }) => [
        p.number,
        p.merged_by?.login ?? null,
      ]),
      [[1, "bob"], [2, "bob"], [3, null]],
    );
    assert.deepEqual(listed[0].merged_by, pulls[0].merged_by);
    for (const p of listed) {
      assert.ok(!("mergeable" in p) && !("mergeable_state" in p), `#${p.number} in the listing`);
    }

    // The closed events' pull requests say who merged them.
    await until(
      "both closed events",
      () =>
        hooks.got.filter(([e, p]) => e === "pull_request" && p.action === "closed").length === 2,
    );
    const closed = hooks.got.filter(([, p]) => p.action === "closed").map(([, p]) => p);
    assert.deepEqual(closed.map((p) => p.number).sort(), [1, 2]);
    for (const p of closed) {
      assert.equal(p.pull_request.merged, true);
      assert.deepEqual(p.pull_request.merged_by, pulls[0].merged_by);
      assert.equal(p.sender.login, "bob");
      assert.deepEqual([p.pull_request.mergeable, p.pull_request.mergeable_state], [
        null,
        "unknown",
      ]);
    }
  } finally {
    await hooks.close();
    await s.stop();
    await w.close();
  }
});

Deno.test("a version 4 database is upgraded in place: pull requests merged before have merged_by null, later merges name the merger", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-merged-by-v4-" });
  const db = join(dir, "stacks.db");
  const fresh = join(dir, "fresh.db");
  try {
    await createToken(fresh, "alice");
    await seedStacks(db, 2);
    const tok = await createToken(db, "alice");
    const v4 = new DatabaseSync(db);
    toVersion4(v4);
    // #1 was merged by a forgekit that did not keep who merged.
    v4.exec(`UPDATE pulls SET state = 'closed', closed_at = '2024-01-01T00:00:00Z',
      merged_at = '2024-01-01T00:00:00Z', merge_commit_sha = '${SHA("9")}' WHERE number = 1`);
    v4.close();
    assert.equal(schemaVersion(db), 4);

    const s = await startStacksServer(db);
    try {
      const call = apiCaller(s.url, tok);
      const old = (await call("GET", `${P}/1`)).json;
      assert.deepEqual([old.merged, old.merged_at, old.merged_by], [
        true,
        "2024-01-01T00:00:00Z",
        null,
      ]);
      assert.equal((await call("PUT", `${P}/4/merge`)).status, 200); // #3 and #4: the second stack
      const now = (await call("GET", `${P}/3`)).json;
      assert.equal(now.merged_by.login, "alice");
    } finally {
      await s.stop();
    }
    assert.equal(schemaVersion(db), schemaVersion(fresh));
    assert.deepEqual(columns(db, "pulls"), columns(fresh, "pulls"), "as a new database's");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a migration is one transaction: when a step fails, the database keeps its version and none of the steps before it", async () => {
  const w = await workspace("merged-by-rollback");
  try {
    const sql = new DatabaseSync(w.db);
    // Version 3 (no serials, no merged_by_id) with its pulls table gone:
    // step 4 makes the serials table, then step 5 cannot add the column.
    sql.exec("DROP TABLE serials; DROP TABLE pulls; PRAGMA user_version = 3;");
    sql.close();
    const r = await runForgekit(["stacks", "token", "create", "--user", "bob", "--db", w.db]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^error: Cannot open database .*: no such table: pulls/);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
    assert.equal(schemaVersion(w.db), 3);
    const after = new DatabaseSync(w.db);
    try {
      const serials = after.prepare("SELECT name FROM sqlite_master WHERE name = 'serials'").all();
      assert.deepEqual(serials, [], "step 4 was rolled back with step 5");
      assert.equal(after.prepare("SELECT count(*) AS n FROM users").get()?.n, 1, "only alice");
    } finally {
      after.close();
    }
  } finally {
    await w.close();
  }
});

Deno.test("a version 5 database that an older forgekit set back to version 4 opens, and is version 5 again", async () => {
  const w = await workspace("merged-by-set-back");
  try {
    const current = schemaVersion(w.db);
    const sql = new DatabaseSync(w.db);
    sql.exec("PRAGMA user_version = 4"); // what a racing version 4 forgekit wrote
    sql.close();
    const r = await runForgekit(["stacks", "token", "create", "--user", "bob", "--db", w.db]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(schemaVersion(w.db), current);
  } finally {
    await w.close();
  }
});

Deno.test("a forgekit that opens a database while a newer one upgrades it waits for the upgrade, then refuses it and writes nothing", async () => {
  for (const from of ["current", "older"] as const) {
    const w = await workspace(`merged-by-upgrading-${from}`);
    const newer = new DatabaseSync(w.db);
    try {
      const current = schemaVersion(w.db);
      if (from === "older") toVersion4(newer);
      // The newer forgekit migrates under the write lock, and is slow about it.
      newer.exec("BEGIN IMMEDIATE");
      if (from === "older") newer.exec("ALTER TABLE pulls ADD COLUMN merged_by_id INTEGER");
      newer.exec(`ALTER TABLE pulls ADD COLUMN reviewed_by_id INTEGER;
        PRAGMA user_version = ${current + 1};`);
      const runs = [
        runForgekit(["stacks", "token", "create", "--user", "bob", "--db", w.db], {
          timeoutMs: 30_000,
        }),
        runForgekit(["stacks", "serve", "--db", w.db, "--port", "0"], { timeoutMs: 30_000 }),
      ];
      await sleep(2000); // both have read the version the upgrade has not committed yet
      newer.exec("COMMIT");
      for (const r of await Promise.all(runs)) {
        assert.equal(r.code, 2, `${from}: ${r.stderr}`);
        assert.equal(r.stdout, "", from);
        assert.match(
          r.stderr,
          new RegExp(
            `^error: Cannot open database .*: Database .* has schema version ${
              current + 1
            }, newer than this forgekit \\(${current}\\).*\\n$`,
          ),
          from,
        );
      }
      assert.equal(schemaVersion(w.db), current + 1, `${from}: the version is the newer one's`);
      assert.equal(
        newer.prepare("SELECT count(*) AS n FROM users WHERE login = 'bob'").get()?.n,
        0,
        `${from}: no token was written`,
      );
    } finally {
      if (newer.isTransaction) newer.exec("ROLLBACK");
      newer.close();
      await w.close();
    }
  }
});

Deno.test("servers and token commands started together on one database: one migrates, every one starts, none logs an error", async () => {
  for (const kind of ["version 4", "new file"] as const) {
    const dir = await Deno.makeTempDir({ prefix: "forgekit-merged-by-together-" });
    const db = join(dir, "stacks.db");
    const fresh = join(dir, "fresh.db");
    try {
      await createToken(fresh, "alice");
      if (kind === "version 4") {
        await createToken(db, "alice");
        const sql = new DatabaseSync(db);
        toVersion4(sql);
        sql.close();
      }
      const [servers, tokens] = await Promise.all([
        Promise.allSettled([1, 2, 3].map(() => startStacksServer(db))),
        Promise.all(
          [1, 2, 3].map((i) =>
            runForgekit(["stacks", "token", "create", "--user", `u${i}`, "--db", db])
          ),
        ),
      ]);
      const started = servers.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
      try {
        assert.deepEqual(
          servers.map((s) => s.status),
          ["fulfilled", "fulfilled", "fulfilled"],
          kind,
        );
        for (const t of tokens) assert.equal(t.code, 0, `${kind}: ${t.stderr}`);
        for (const s of started) {
          const res = await fetch(`${s.url}/repos/alice/nope`);
          await res.body?.cancel();
          assert.equal(res.status, 404, `${kind}: each one answers`);
        }
      } finally {
        for (const s of started) await s.stop();
      }
      for (const s of started) assert.equal(s.stderr(), "", kind);
      assert.equal(schemaVersion(db), schemaVersion(fresh), kind);
      assert.deepEqual(columns(db, "pulls"), columns(fresh, "pulls"), kind);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
});

Deno.test("a running server answers writes 503 once a newer forgekit has upgraded its database, and writes nothing to it", async () => {
  const w = await workspace("merged-by-upgraded");
  const s = await startStacksServer(w.db);
  const newer = new DatabaseSync(w.db);
  const current = schemaVersion(w.db);
  try {
    const call = apiCaller(s.url, w.tok);
    assert.equal((await call("POST", "/user/repos", { name: "app" })).status, 201);
    newer.exec(`ALTER TABLE pulls ADD COLUMN reviewed_by_id INTEGER;
      PRAGMA user_version = ${current + 1};`);
    const refused = await call("POST", "/user/repos", { name: "two" });
    assert.equal(refused.status, 503, JSON.stringify(refused.json));
    assert.match(
      refused.json.message,
      /newer version of the server upgraded its database; nothing was changed/,
    );
    assert.equal((await call("GET", "/repos/alice/app")).status, 200, "reads go on");
    assert.equal(newer.prepare("SELECT count(*) AS n FROM repos").get()?.n, 1);
  } finally {
    newer.close();
    await s.stop();
    await w.close();
  }
  assert.match(
    s.stderr(),
    /^forgekit stacks: POST \/user\/repos: Database has schema version \d+, newer than this forgekit \(\d+\)/,
  );
  assert.equal(s.stderr().trim().split("\n").length, 1, s.stderr());
});

/** HTTP/2's client preface and an empty SETTINGS frame: a connection that asks for nothing. */
const H2_PREFACE = new Uint8Array([
  ...new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
  ...[0, 0, 0, 4, 0, 0, 0, 0, 0],
]);

Deno.test("a stop forced while only idle connections are open says nothing of requests cut off; one with a request in flight says how many", async () => {
  const w = await workspace("merged-by-stop");
  try {
    // An HTTP/2 client's idle connection keeps a graceful stop waiting; no request is in flight.
    const s = await startStacksServer(w.db);
    const idle = await Deno.connect({ hostname: "127.0.0.1", port: Number(new URL(s.url).port) });
    try {
      const answered = await apiCaller(s.url, w.tok)("GET", "/user");
      assert.equal(answered.status, 200);
      await idle.write(H2_PREFACE);
      await sleep(200);
      s.child.kill("SIGTERM");
      const early = await Promise.race([s.child.status.then(() => "stopped"), sleep(500)]);
      assert.equal(early, undefined, "the first signal waits for the open connection");
      s.child.kill("SIGTERM");
      assert.equal((await s.child.status).code, 0);
    } finally {
      idle.close();
      await s.stop().catch(() => {}); // already stopped: its exit code is asserted above
    }
    assert.equal(s.stderr(), "", "nothing was cut off");

    // A write waiting for another process's lock is in flight when the second signal comes.
    const busy = await startStacksServer(w.db);
    const holder = new DatabaseSync(w.db);
    try {
      holder.exec("BEGIN IMMEDIATE");
      const write = apiCaller(busy.url, w.tok)("POST", "/user/repos", { name: "app" })
        .then((r) => r.status, () => "cut off");
      await sleep(300);
      busy.child.kill("SIGTERM");
      await sleep(200);
      busy.child.kill("SIGTERM");
      assert.equal((await busy.child.status).code, 0);
      assert.equal(await write, "cut off");
    } finally {
      if (holder.isTransaction) holder.exec("ROLLBACK");
      holder.close();
      await busy.stop().catch(() => {});
    }
    assert.equal(
      busy.stderr(),
      "forgekit stacks: stopped without the requests still in flight: 1\n",
    );
  } finally {
    await w.close();
  }
});
