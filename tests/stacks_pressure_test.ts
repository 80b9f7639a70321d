/**
 * The stacks server as a real process under pressure: many large GET
 * responses, a database another process keeps locked, and a full disk.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { join } from "node:path";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { apiCaller, createToken, seedStacks, startStacksServer } from "./support/stacks_server.ts";

/** The resident memory of a process, in MiB. */
function rssMiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)![1]) / 1024;
}

Deno.test({
  name:
    "GET responses are cached by bytes: 40 distinct 10 MB listings leave the server's memory bounded",
  ignore: Deno.build.os !== "linux",
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-cache-mem-" });
  const db = join(dir, "stacks.db");
  // Ten pull requests with 1 MB bodies: each listing is about 10 MB.
  await seedStacks(db, 5, { body: "x".repeat(1_000_000) });
  const s = await startStacksServer(db);
  try {
    const before = rssMiB(s.child.pid);
    for (let i = 0; i < 40; i++) {
      // Anonymous, and an ignored parameter makes each URL new.
      const res = await fetch(`${s.url}/repos/alice/app/pulls?per_page=100&x=${i}`);
      assert.equal(res.status, 200);
      assert.ok((await res.arrayBuffer()).byteLength > 10_000_000);
    }
    const grown = rssMiB(s.child.pid) - before;
    // Kept, 40 listings are 400 MB; not kept, what remains is garbage not yet collected.
    assert.ok(grown < 250, `the server grew by ${grown.toFixed(0)} MiB`);
    // Small responses are still cached: the same ETag, and 304 to it.
    const first = await fetch(`${s.url}/repos/alice/app`);
    await first.body?.cancel();
    const again = await fetch(`${s.url}/repos/alice/app`, {
      headers: { "if-none-match": first.headers.get("etag")! },
    });
    await again.body?.cancel();
    assert.equal(again.status, 304);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a page of pull requests out of 100,000 comes at once, and other requests do not wait for it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-pulls-scale-" });
  const db = join(dir, "stacks.db");
  await seedStacks(db, 0);
  const sql = new DatabaseSync(db);
  sql.exec(`
    WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 100000)
    INSERT INTO pulls (repo_id, number, user_id, title, body, state, draft, head_ref, head_sha,
                       base_ref, created_at, updated_at)
    SELECT 1, i, 1, 'PR ' || i, printf('%.2000c', 'y'), CASE WHEN i % 10 THEN 'open' ELSE 'closed' END,
           0, 'h' || i, '${"1".repeat(40)}', 'main', '2026-01-01T00:00:00Z',
           strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || ((i * 7919) % 100000) || ' seconds')
    FROM k;
    UPDATE repos SET next_pull = 100001;`);
  sql.close();
  const s = await startStacksServer(db);
  try {
    const call = apiCaller(s.url);
    const slowest: Record<string, number> = {};
    for (
      const q of [
        "per_page=100",
        "per_page=100&page=500",
        "per_page=100&page=800&sort=updated",
        "per_page=100&page=900&state=all&sort=updated&direction=desc",
        "per_page=100&page=50&state=closed",
        "per_page=100&page=500&base=main",
      ]
    ) {
      // Uncached (a new parameter each time), and a small request beside it.
      const [page, other] = await Promise.all([
        call("GET", `/repos/alice/app/pulls?${q}&n=${crypto.randomUUID()}`),
        new Promise((r) => setTimeout(r, 5)).then(() => call("GET", `/repos/alice/app?n=${q}`)),
      ]);
      assert.equal(page.status, 200, q);
      assert.equal(page.json.length, 100, q);
      slowest[q] = Math.max(page.ms, other.ms);
    }
    const worst = Math.max(...Object.values(slowest));
    assert.ok(worst < 400, `slowest listing or request beside it: ${JSON.stringify(slowest)}`);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("while another process holds the write lock, reads go on at once and a write gets 503 with Retry-After", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-busy-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  await seedStacks(db, 0);
  const s = await startStacksServer(db, ["--busy-timeout-ms", "1500"]);
  // Another process's long transaction, e.g. a backup tool or a second server.
  const holder = new DatabaseSync(db);
  holder.exec("PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE");
  try {
    const call = apiCaller(s.url, tok);
    const ref = (name: string) => ({ ref: `refs/heads/${name}`, sha: "2".repeat(40) });
    const write = call("POST", "/repos/alice/app/git/refs", ref("x"));
    await sleep(200);
    for (let i = 0; i < 5; i++) {
      const read = await call("GET", `/repos/alice/app/pulls?state=all&i=${i}`);
      assert.equal(read.status, 200);
      assert.ok(read.ms < 500, `a read took ${read.ms.toFixed(0)} ms while a write waited`);
    }
    const refused = await write;
    assert.equal(refused.status, 503, JSON.stringify(refused.json));
    assert.equal(refused.headers.get("retry-after"), "2");
    assert.match(refused.json.message, /locked by another writer; nothing was changed/);
    assert.ok(refused.ms > 1_400 && refused.ms < 5_000, `answered after ${refused.ms} ms`);
    // A write that starts while the lock is held goes through once it is let go.
    const waiting = call("POST", "/repos/alice/app/git/refs", ref("y"));
    await sleep(500);
    holder.exec("COMMIT");
    assert.equal((await waiting).status, 201);
    assert.equal((await call("GET", "/repos/alice/app/git/ref/heads/x")).status, 404);
  } finally {
    if (holder.isTransaction) holder.exec("ROLLBACK");
    holder.close();
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
  assert.match(s.stderr(), /POST \/repos\/alice\/app\/git\/refs: Database is locked/);
  assert.doesNotMatch(s.stderr(), /internal error/);
});

Deno.test({
  name: "on a full disk a write is 507 naming the cause, and what was saved is still served",
  ...needsNamespaces,
}, async () => {
  assertNamespaces();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-full-" });
  const seed = join(dir, "seed.db");
  const mnt = join(dir, "mnt");
  await Deno.mkdir(mnt);
  const tok = await createToken(seed, "alice");
  await seedStacks(seed, 0);
  // The server runs in its own mount namespace, on a 600 KiB tmpfs holding a copy of the seed.
  const wrap = [
    "unshare",
    ...(Deno.uid() === 0 ? [] : ["--user", "--map-root-user"]),
    "--mount",
    "sh",
    "-c",
    'mount -t tmpfs -o size=600k tmpfs "$MNT" && cp "$SEED" "$MNT/s.db" && exec "$@"',
    "sh",
  ];
  const s = await startStacksServer(join(mnt, "s.db"), [], { wrap, env: { MNT: mnt, SEED: seed } });
  try {
    const call = apiCaller(s.url, tok);
    const statuses: number[] = [];
    let full: Awaited<ReturnType<typeof call>> | null = null;
    for (let i = 1; i <= 30 && !full; i++) {
      for (
        const r of [
          await call("POST", "/repos/alice/app/git/refs", {
            ref: `refs/heads/b${i}`,
            sha: "1".repeat(40),
          }),
          await call("POST", "/repos/alice/app/pulls", {
            title: `t${i}`,
            head: `b${i}`,
            base: "main",
            body: "x".repeat(60_000),
          }),
        ]
      ) {
        statuses.push(r.status);
        if (r.status !== 201) {
          full = r;
          break;
        }
      }
    }
    assert.ok(full, `the disk never filled: ${statuses}`);
    assert.equal(full.status, 507, `${statuses}: ${JSON.stringify(full.json)}`);
    assert.equal(
      full.json.message,
      "Insufficient storage: the server's disk is full; nothing was changed",
    );
    const again = await call("POST", "/repos/alice/app/git/refs", {
      ref: "refs/heads/later",
      sha: "1".repeat(40),
    });
    assert.equal(again.status, 507, "the next write is refused the same way");
    const read = await call("GET", "/repos/alice/app/pulls?state=all&per_page=100");
    assert.equal(read.status, 200);
    const made = statuses.filter((x) => x === 201).length;
    assert.equal(
      read.json.length,
      Math.floor(made / 2),
      "every pull request answered 201 is there",
    );
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
  assert.match(s.stderr(), /POST \/repos\/alice\/app\/\S+: Database or disk is full/);
  assert.doesNotMatch(s.stderr(), /internal error|cannot rollback/);
});
