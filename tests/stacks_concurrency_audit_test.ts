/**
 * Audit of the stacks server under concurrency and failure, and of the
 * Stacks API's corners: real `forgekit stacks serve` processes on loopback,
 * real SQLite files, clients as separate processes (curl) where the race is
 * between processes, and the database checked with SQL afterwards.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { runForgekit } from "./support/cli.ts";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import {
  apiCaller,
  type ApiReply,
  createToken,
  seedStacks,
  type StacksServer,
  startStacksServer,
} from "./support/stacks_server.ts";

const SHA = (c: string) => c.repeat(40);
const S = "/repos/alice/app/stacks";
const P = "/repos/alice/app/pulls";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Alice's stacked repository `app` with a chain of `n` pull requests: #i from bi onto b(i-1), #1 onto main. */
async function chain(call: ReturnType<typeof apiCaller>, n: number) {
  const repo = await call("POST", "/user/repos", {
    name: "app",
    allow_stacked_pull_requests: true,
  });
  assert.equal(repo.status, 201, JSON.stringify(repo.json));
  let base = "main";
  for (let i = 1; i <= n; i++) {
    await branch(call, `b${i}`);
    await pull(call, `b${i}`, base);
    base = `b${i}`;
  }
}

async function branch(call: ReturnType<typeof apiCaller>, name: string, sha = SHA("1")) {
  const r = await call("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/${name}`, sha });
  assert.equal(r.status, 201, JSON.stringify(r.json));
}

async function pull(call: ReturnType<typeof apiCaller>, head: string, base: string) {
  const r = await call("POST", P, { title: head, head, base });
  assert.equal(r.status, 201, JSON.stringify(r.json));
  return r.json.number as number;
}

/** A temporary directory with a database and alice's token in it, removed by `close`. */
async function workspace(prefix: string) {
  const dir = await Deno.makeTempDir({ prefix: `forgekit-${prefix}-` });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  return { dir, db, tok, close: () => Deno.remove(dir, { recursive: true }) };
}

/** One request by a curl process of its own: a client separate from the test and the servers. */
async function curl(
  base: string,
  tok: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: ApiReply["json"] }> {
  const out = await new Deno.Command("curl", {
    args: [
      "-s",
      "-o",
      "-",
      "-w",
      "\n%{http_code}",
      "-X",
      method,
      "-H",
      `Authorization: token ${tok}`,
      ...(body === undefined ? [] : ["-H", "Content-Type: application/json"]),
      ...(body === undefined ? [] : ["--data-binary", JSON.stringify(body)]),
      `${base}${path}`,
    ],
    stdout: "piped",
    stderr: "null",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const cut = text.lastIndexOf("\n");
  const raw = text.slice(0, cut);
  let json: ApiReply["json"] = null;
  try {
    json = raw ? JSON.parse(raw) : null;
  } catch { /* not JSON: the status says what happened */ }
  return { status: Number(text.slice(cut + 1)), json };
}

/** mulberry32: the same sequence of operations every run. */
function random(seed: number): (n: number) => number {
  return (n) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * n);
  };
}

interface StackRowSql {
  id: number;
  repo_id: number;
  number: number;
  base_ref: string;
}
interface PullRowSql {
  number: number;
  state: string;
  merged_at: string | null;
  base_ref: string;
  head_ref: string;
  stack_position: number;
}

/**
 * Every rule a stored stack must keep, read with SQL; returns what breaks
 * them (empty when none): the file is intact, no row points at a missing
 * one, each stack holds positions 1..n, numbers are unique and grow with ids,
 * pull request numbers have no gaps, merged pull requests are a bottom run on
 * the stack's base, and each unmerged one's base is the head below it (the
 * stack's base for the lowest).
 */
function invariantProblems(db: string): string[] {
  const sql = new DatabaseSync(db, { readOnly: true });
  const problems: string[] = [];
  try {
    const integrity = sql.prepare("PRAGMA integrity_check").all().map((r) => r.integrity_check);
    if (integrity.join() !== "ok") problems.push(`integrity_check: ${integrity.join("; ")}`);
    const fk = sql.prepare("PRAGMA foreign_key_check").all();
    if (fk.length) problems.push(`foreign_key_check: ${JSON.stringify(fk)}`);
    for (const r of sql.prepare("SELECT id, next_pull, next_stack FROM repos").all()) {
      const pulls = sql.prepare("SELECT number FROM pulls WHERE repo_id = ? ORDER BY number")
        .all(r.id as number).map((p) => p.number);
      if (pulls.some((n, i) => n !== i + 1) || pulls.length !== Number(r.next_pull) - 1) {
        problems.push(`repo ${r.id}: pull numbers ${pulls.join(",")} (next ${r.next_pull})`);
      }
      const stacks = sql.prepare(
        "SELECT id, number FROM stacks WHERE repo_id = ? ORDER BY id",
      ).all(r.id as number);
      stacks.forEach((s, i) => {
        if (i > 0 && Number(s.number) <= Number(stacks[i - 1].number)) {
          problems.push(`stack id ${s.id} has number ${s.number}, not above the last one's`);
        }
        if (Number(s.number) >= Number(r.next_stack)) {
          problems.push(`stack ${s.number} at or past next_stack ${r.next_stack}`);
        }
      });
    }
    const stacks = sql.prepare("SELECT id, repo_id, number, base_ref FROM stacks")
      .all() as unknown as StackRowSql[];
    for (const s of stacks) {
      const pulls = sql.prepare(
        `SELECT number, state, merged_at, base_ref, head_ref, stack_position FROM pulls
         WHERE stack_id = ? ORDER BY stack_position`,
      ).all(s.id) as unknown as PullRowSql[];
      const shown = pulls.map((p) =>
        `#${p.number}${p.merged_at ? "(merged)" : p.state === "closed" ? "(closed)" : ""} ` +
        `${p.base_ref}<-${p.head_ref}`
      ).join(", ");
      const bad = (what: string) => problems.push(`stack ${s.number} [${shown}]: ${what}`);
      if (pulls.length === 0) bad("no pull requests");
      if (pulls.some((p, i) => p.stack_position !== i + 1)) bad("positions are not 1..n");
      let below: PullRowSql | null = null;
      for (const p of pulls) {
        if (p.merged_at !== null) {
          if (below) bad(`#${p.number} is merged above an unmerged one`);
          if (p.base_ref !== s.base_ref) bad(`merged #${p.number} is not on the stack's base`);
          continue;
        }
        const want: string = below ? below.head_ref : s.base_ref;
        if (p.base_ref !== want) bad(`#${p.number} is based on ${p.base_ref}, not ${want}`);
        below = p;
      }
    }
  } finally {
    sql.close();
  }
  return problems;
}

Deno.test("merging below a closed pull request retargets that one, not the one past it: the chain holds when it reopens", async () => {
  const w = await workspace("closed-middle");
  const s = await startStacksServer(w.db);
  try {
    const call = apiCaller(s.url, w.tok);
    await chain(call, 4);
    assert.equal((await call("POST", S, { pull_requests: [1, 2, 3, 4] })).status, 201);
    assert.equal((await call("PATCH", `${P}/2`, { state: "closed" })).status, 200);
    assert.equal((await call("PUT", `${P}/1/merge`)).status, 200);
    const base = async (n: number) => (await call("GET", `${P}/${n}`)).json.base.ref;
    // b1 is merged: the closed #2 now targets main; #3 still targets #2's head, with only #3's changes.
    assert.deepEqual([await base(2), await base(3), await base(4)], ["main", "b2", "b3"]);
    assert.equal((await call("PATCH", `${P}/2`, { state: "open" })).status, 200);
    assert.deepEqual(invariantProblems(w.db), []);
    const merged = await call("PUT", `${P}/3/merge`);
    assert.equal(merged.status, 200, JSON.stringify(merged.json));
    const stack = (await call("GET", `${S}/1`)).json;
    assert.deepEqual(
      stack.pull_requests.map((p: { number: number; merged_at: string | null }) => [
        p.number,
        p.merged_at !== null,
      ]),
      [[1, true], [2, true], [3, true], [4, false]],
    );
    assert.equal(await base(4), "main");
    assert.deepEqual(invariantProblems(w.db), []);
  } finally {
    await s.stop();
    await w.close();
  }
});

Deno.test("SIGTERM answers the requests in flight before the server stops; a second signal stops at once and commits nothing", async () => {
  const w = await workspace("sigterm");
  const s = await startStacksServer(w.db);
  const holder = new DatabaseSync(w.db);
  try {
    const call = apiCaller(s.url, w.tok);
    await chain(call, 2);
    // Another process holds the write lock: the stack waits for it, in flight.
    holder.exec("BEGIN IMMEDIATE");
    const create = call("POST", S, { pull_requests: [1, 2] }).catch((err) => err as Error);
    await sleep(300);
    s.child.kill("SIGTERM");
    await sleep(300);
    const late = await fetch(`${s.url}/repos/alice/app`).then((r) => r.status, () => "refused");
    assert.equal(late, "refused", "no new connection once stopping");
    holder.exec("COMMIT");
    const created = await create;
    assert.ok(!(created instanceof Error), `the request in flight got no answer: ${created}`);
    assert.equal(created.status, 201, JSON.stringify(created.json));
    assert.equal((await s.child.status).code, 0, s.stderr());
    const stored = holder.prepare("SELECT count(*) AS n FROM pulls WHERE stack_id = ?")
      .get(created.json.id);
    assert.equal(stored?.n, 2, "the answered stack is stored");
  } finally {
    if (holder.isTransaction) holder.exec("ROLLBACK");
    await s.stop().catch(() => {}); // its exit code is asserted above
  }
  // A second signal does not wait for a write still waiting for the lock.
  const again = await startStacksServer(w.db);
  try {
    holder.exec("BEGIN IMMEDIATE");
    const call = apiCaller(again.url, w.tok);
    const unstack = call("POST", `${S}/1/unstack`).then((r) => r.status, () => "cut off");
    await sleep(300);
    const t0 = performance.now();
    again.child.kill("SIGTERM");
    await sleep(200);
    again.child.kill("SIGTERM");
    assert.equal((await again.child.status).code, 0);
    assert.ok(performance.now() - t0 < 3000, "stopped at once, not after the busy timeout");
    assert.equal(await unstack, "cut off");
    holder.exec("COMMIT");
    assert.equal(
      holder.prepare("SELECT count(*) AS n FROM stacks").get()?.n,
      1,
      "the write cut off committed nothing",
    );
  } finally {
    if (holder.isTransaction) holder.exec("ROLLBACK");
    holder.close();
    await again.stop().catch(() => {}); // already stopped: stop() asserts on its exit code only
    await w.close();
  }
  assert.match(again.stderr(), /stopped without the requests still in flight/);
});

Deno.test("a corrupt page of the database is answered 503 with one log line, never 500 or a stack trace", async () => {
  const w = await workspace("corrupt");
  try {
    let s = await startStacksServer(w.db);
    await chain(apiCaller(s.url, w.tok), 2);
    await s.stop();
    // Overwrite the header of the pulls table's root page.
    const sql = new DatabaseSync(w.db);
    const root = Number(
      sql.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'pulls'")
        .get()!.rootpage,
    );
    const pageSize = Number(sql.prepare("PRAGMA page_size").get()!.page_size);
    sql.close();
    const f = await Deno.open(w.db, { write: true });
    await f.seek((root - 1) * pageSize, Deno.SeekMode.Start);
    await f.write(new Uint8Array(12).fill(0x77));
    f.close();
    s = await startStacksServer(w.db);
    try {
      const call = apiCaller(s.url, w.tok);
      for (
        const [m, p, b] of [
          ["GET", `${P}?state=all`],
          ["GET", `${P}/1`],
          ["POST", S, { pull_requests: [1, 2] }],
        ] as [string, string, unknown?][]
      ) {
        const r = await call(m, p, b);
        assert.equal(r.status, 503, `${m} ${p}: ${JSON.stringify(r.json)}`);
        assert.match(r.json.message, /nothing was changed/);
      }
      assert.equal((await call("GET", "/repos/alice/app")).status, 200, "what can be read is");
    } finally {
      await s.stop();
    }
    const lines = s.stderr().trim().split("\n");
    assert.equal(lines.length, 3, s.stderr());
    for (const line of lines) {
      assert.match(line, /^forgekit stacks: (GET|POST) \S+: Database file is corrupt/);
    }
    assert.doesNotMatch(s.stderr(), /internal error|\n\s+at /);
  } finally {
    await w.close();
  }
});

Deno.test("a database from a newer forgekit, or a file that is not a database, is refused in one line with exit 2 and left as it was", async () => {
  const w = await workspace("refused");
  try {
    const sql = new DatabaseSync(w.db);
    sql.exec("PRAGMA user_version = 99");
    sql.close();
    const junk = join(w.dir, "junk.db");
    // Readable by others, as a file made by another program often is: still one line, no warning.
    await Deno.writeFile(junk, new Uint8Array(8192).fill(0x5a), { mode: 0o644 });
    await Deno.chmod(junk, 0o644);
    const entries = async () =>
      (await Array.fromAsync(Deno.readDir(w.dir))).map((e) => e.name).sort();
    const names = await entries();
    const bytes = [await Deno.readFile(w.db), await Deno.readFile(junk)];
    for (const db of [w.db, junk]) {
      for (
        const args of [
          ["stacks", "serve", "--db", db, "--port", "0"],
          ["stacks", "token", "create", "--user", "bob", "--db", db],
        ]
      ) {
        const r = await runForgekit(args, { timeoutMs: 20_000 });
        assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
        assert.equal(r.stdout, "");
        assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
        assert.doesNotMatch(r.stderr, /\n\s+at /);
      }
    }
    const newer = await runForgekit(["stacks", "serve", "--db", w.db, "--port", "0"]);
    assert.match(
      newer.stderr,
      /^error: Cannot open database .*: Database .* has schema version 99, newer than this forgekit \(5\).*\(run the forgekit that wrote it, or pass another --db\)\n$/,
    );
    const notDb = await runForgekit(["stacks", "serve", "--db", junk, "--port", "0"]);
    assert.match(notDb.stderr, /^error: Cannot open database .*junk\.db: Database file is corrupt/);
    assert.deepEqual(await entries(), names, "no -wal or -shm file is left beside them");
    assert.deepEqual([await Deno.readFile(w.db), await Deno.readFile(junk)], bytes);
  } finally {
    await w.close();
  }
});

Deno.test("a database from a newer forgekit in rollback-journal mode is refused without switching it to WAL", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-refused-journal-" });
  try {
    const db = join(dir, "stacks.db");
    const sql = new DatabaseSync(db);
    sql.exec("PRAGMA journal_mode = DELETE; CREATE TABLE t (x); PRAGMA user_version = 99");
    sql.close();
    await Deno.chmod(db, 0o600);
    const before = await Deno.readFile(db);
    for (
      const args of [
        ["stacks", "serve", "--db", db, "--port", "0"],
        ["stacks", "token", "create", "--user", "bob", "--db", db],
      ]
    ) {
      const r = await runForgekit(args, { timeoutMs: 20_000 });
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, /has schema version 99, newer than this forgekit/);
      // Bytes 18 and 19 of the header say the journal mode (1: rollback, 2: WAL).
      assert.deepEqual(await Deno.readFile(db), before, args.join(" "));
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a SQLite database of another program (a mistyped --db) is refused with exit 2 and left as it was", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-foreign-db-" });
  try {
    const db = join(dir, "notes.db");
    const sql = new DatabaseSync(db);
    sql.exec(
      "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes VALUES (1, 'x')",
    );
    sql.close();
    await Deno.chmod(db, 0o600);
    const before = await Deno.readFile(db);
    for (
      const args of [
        ["stacks", "serve", "--db", db, "--port", "0"],
        ["stacks", "token", "create", "--user", "bob", "--db", db],
      ]
    ) {
      const r = await runForgekit(args, { timeoutMs: 20_000 });
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
      assert.equal(r.stdout, "");
      assert.match(r.stderr, /^error: Cannot open database .*notes\.db: .*not forgekit's.*\n$/);
      assert.deepEqual(await Deno.readFile(db), before, args.join(" "));
    }
    assert.deepEqual((await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name), ["notes.db"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("reads on one server never show a stack another server is dissolving half-way: no empty stack, no position past the size", async () => {
  const w = await workspace("torn");
  const reader = await startStacksServer(w.db);
  const writer = await startStacksServer(w.db);
  try {
    const R = apiCaller(reader.url, w.tok);
    const W = apiCaller(writer.url, w.tok);
    await chain(W, 0);
    let stop = false;
    let latest = 0;
    const cycles = (async () => {
      for (let i = 0; !stop; i++) {
        const nums: number[] = [];
        let base = "main";
        for (const k of ["p", "q", "r"]) {
          await branch(W, `${k}${i}`);
          nums.push(await pull(W, `${k}${i}`, base));
          base = `${k}${i}`;
        }
        const made = await W("POST", S, { pull_requests: nums });
        latest = made.json.number;
        assert.equal((await W("PUT", `${P}/${nums[0]}/merge`)).status, 200);
        // Unstacked, #q and #r leave; the merged #p stays.
        assert.equal((await W("POST", `${S}/${latest}/unstack`)).status, 200);
        const again = await W("POST", S, { pull_requests: nums.slice(1) });
        latest = again.json.number;
        // Nothing merged: the stack is dissolved.
        assert.equal((await W("POST", `${S}/${latest}/unstack`)).status, 204);
      }
    })();
    const seen: string[] = [];
    let reads = 0;
    const until = Date.now() + 5000;
    await Promise.all(Array.from({ length: 3 }, async (_, k) => {
      while (Date.now() < until) {
        const q = `k=${k}&n=${reads++}`;
        const stacks = await R("GET", `${S}?per_page=5&${q}`);
        for (const s of stacks.json) {
          if (s.pull_requests.length === 0) seen.push(`listed empty stack ${s.number}`);
        }
        const one = await R("GET", `${S}/${latest}?${q}`);
        if (one.status === 200 && one.json.pull_requests.length === 0) {
          seen.push(`stack ${latest} read empty`);
        }
        const pulls = await R("GET", `${P}?state=all&per_page=6&${q}`);
        for (const p of pulls.json) {
          if (p.stack && p.stack.position > p.stack.size) {
            seen.push(`#${p.number} at ${p.stack.position} of ${p.stack.size}`);
          }
        }
      }
    }));
    stop = true;
    await cycles;
    assert.ok(reads > 300, `only ${reads} reads`);
    assert.deepEqual(seen, []);
  } finally {
    await reader.stop();
    await writer.stop();
    await w.close();
  }
});

Deno.test("a merge that moves its base branch brings the open pull requests from that branch along", async () => {
  const w = await workspace("base-moves");
  const s = await startStacksServer(w.db);
  try {
    const call = apiCaller(s.url, w.tok);
    await chain(call, 0);
    for (const b of ["dev", "a", "b", "y"]) await branch(call, b);
    // Stack #1 runs main ← dev ← y; stack #2 runs dev ← a ← b: its base is #1's bottom head.
    const x = await pull(call, "dev", "main");
    const y = await pull(call, "y", "dev");
    const a = await pull(call, "a", "dev");
    const b = await pull(call, "b", "a");
    assert.equal((await call("POST", S, { pull_requests: [x, y] })).status, 201);
    assert.equal((await call("POST", S, { pull_requests: [a, b] })).status, 201);
    assert.equal((await call("PUT", `${P}/${b}/merge`)).status, 200);
    const dev = (await call("GET", "/repos/alice/app/git/ref/heads/dev")).json.object.sha;
    assert.equal((await call("GET", `${P}/${x}`)).json.head.sha, dev);
    assert.equal((await call("GET", `${S}/1`)).json.pull_requests[0].head.sha, dev);
    const merged = await call("PUT", `${P}/${x}/merge`, { sha: dev });
    assert.equal(merged.status, 200, JSON.stringify(merged.json));
  } finally {
    await s.stop();
    await w.close();
  }
});

Deno.test("a stack change waiting for the lock while another process switches stacked pull requests off is 404 and changes nothing", async () => {
  const w = await workspace("switched-off");
  const s = await startStacksServer(w.db);
  const other = new DatabaseSync(w.db);
  try {
    const call = apiCaller(s.url, w.tok);
    await chain(call, 3);
    assert.equal((await call("POST", S, { pull_requests: [1, 2] })).status, 201);
    for (
      const [path, body] of [[S, { pull_requests: [3, 4] }], [`${S}/1/add`, {
        pull_requests: [3],
      }], [`${S}/1/unstack`]] as [string, unknown?][]
    ) {
      other.exec("BEGIN IMMEDIATE");
      const change = call("POST", path, body);
      await sleep(300);
      other.exec("UPDATE repos SET allow_stacked = 0; COMMIT");
      const r = await change;
      assert.equal(r.status, 404, `${path}: ${JSON.stringify(r.json)}`);
      other.exec("UPDATE repos SET allow_stacked = 1");
    }
    const stacks = (await call("GET", S)).json;
    assert.deepEqual(
      stacks.map((x: { pull_requests: { number: number }[] }) =>
        x.pull_requests.map((p) => p.number)
      ),
      [[1, 2]],
    );
  } finally {
    if (other.isTransaction) other.exec("ROLLBACK");
    other.close();
    await s.stop();
    await w.close();
  }
});

Deno.test("client processes racing on two servers over overlapping pull requests leave every rule of stacks whole", async () => {
  const w = await workspace("race");
  const a = await startStacksServer(w.db);
  const b = await startStacksServer(w.db);
  const servers = [a.url, b.url];
  try {
    const call = apiCaller(a.url, w.tok);
    const N = 60;
    await chain(call, N);
    // The same pull request added to two stacks at once: their tops share the head t.
    for (const br of ["s1", "t", "s2", "x"]) await branch(call, br);
    const s1 = await pull(call, "s1", "main");
    const t1 = await pull(call, "t", "s1");
    const s2 = await pull(call, "s2", "main");
    const t2 = await pull(call, "t", "s2");
    const x = await pull(call, "x", "t");
    const one = (await call("POST", S, { pull_requests: [s1, t1] })).json.number;
    const two = (await call("POST", S, { pull_requests: [s2, t2] })).json.number;
    const adds = await Promise.all(
      Array.from(
        { length: 12 },
        (_, i) =>
          curl(servers[i % 2], w.tok, "POST", `${S}/${i % 3 ? one : two}/add`, {
            pull_requests: [x],
          }),
      ),
    );
    assert.deepEqual(
      adds.map((r) => r.status).sort(),
      [200, ...Array(11).fill(422)],
      JSON.stringify(adds.map((r) => r.json?.errors ?? r.status)),
    );

    // Then everything at once over the chain #1..#N: create, extend, dissolve, merge, close, reopen, rebase.
    const statuses: Record<string, number> = {};
    const stacks = [one, two];
    const until = Date.now() + 8000;
    await Promise.all(Array.from({ length: 8 }, async (_, k) => {
      const rnd = random(k + 1);
      const url = servers[k % 2];
      const send = (method: string, path: string, body?: unknown) =>
        curl(url, w.tok, method, path, body);
      while (Date.now() < until) {
        const start = 1 + rnd(N);
        const run = (from: number) =>
          Array.from({ length: 1 + rnd(3) }, (_, j) => from + j).filter((n) => n <= N);
        const stack = stacks[rnd(stacks.length)];
        const ops: [string, () => ReturnType<typeof curl>][] = [
          ["create", () => send("POST", S, { pull_requests: [start, ...run(start + 1)] })],
          ["create", () => send("POST", S, { pull_requests: [start, ...run(start + 1)] })],
          ["add", async () => {
            // On top of the stack as this client last saw it: others may have moved it since.
            const seen = await send("GET", `${S}/${stack}`);
            const top = seen.json?.pull_requests?.at(-1)?.number ?? start;
            return send("POST", `${S}/${stack}/add`, { pull_requests: run(top + 1) });
          }],
          ["add", () => send("POST", `${S}/${stack}/add`, { pull_requests: run(start) })],
          ["add", async () => {
            const seen = await send("GET", `${S}/${stack}`);
            const top = seen.json?.pull_requests?.at(-1)?.number ?? start;
            return send("POST", `${S}/${stack}/add`, { pull_requests: run(top + 1) });
          }],
          ["unstack", () => send("POST", `${S}/${stack}/unstack`)],
          ["merge", () => send("PUT", `${P}/${start}/merge`)],
          ["close", () => send("PATCH", `${P}/${start}`, { state: "closed" })],
          ["reopen", () => send("PATCH", `${P}/${start}`, { state: "open" })],
          ["reopen", () => send("PATCH", `${P}/${start}`, { state: "open" })],
          ["rebase", () =>
            send("PATCH", `${P}/${start}`, {
              base: rnd(4) ? `b${start - 1}` : "main",
            })],
        ];
        const [name, op] = ops[rnd(ops.length)];
        const r = await op();
        if (name === "create" && r.status === 201) stacks.push(r.json.number);
        if (r.status === 204 || (name === "add" && r.status === 404)) {
          const gone = stacks.indexOf(stack);
          if (gone >= 0 && stacks.length > 1) stacks.splice(gone, 1);
        }
        const key = `${name} ${r.status}`;
        statuses[key] = (statuses[key] ?? 0) + 1;
      }
    }));
    const text = JSON.stringify(statuses);
    assert.ok(!/ 5\d\d"/.test(text), text);
    // Each kind of change took effect at least once (an unstack leaves merged members, a 200,
    // only when a merge happened to land in that stack first: either answer counts).
    for (const ok of ["create 201", "merge 200", "reopen 200"]) {
      assert.ok(statuses[ok] > 0, `no ${ok}: ${text}`);
    }
    assert.ok(
      (statuses["unstack 200"] ?? 0) + (statuses["unstack 204"] ?? 0) > 0,
      `no unstack: ${text}`,
    );
  } finally {
    await a.stop();
    await b.stop();
  }
  try {
    assert.deepEqual(invariantProblems(w.db), []);
    assert.doesNotMatch(a.stderr() + b.stderr(), /internal error/);
  } finally {
    await w.close();
  }
});

Deno.test("kill -9 during a burst of writes loses no answered write and leaves no stack half-made; the WAL is recovered", async () => {
  const w = await workspace("kill9");
  let s: StacksServer = await startStacksServer(w.db);
  try {
    await chain(apiCaller(s.url, w.tok), 0);
    type Ack = { kind: "branch"; name: string } | { kind: "pull" | "stack"; number: number };
    const acked: Ack[] = [];
    let cut = false;
    const clients = Array.from({ length: 6 }, async (_, k) => {
      for (let i = 0; !cut; i++) {
        const nums: number[] = [];
        let base = "main";
        for (const part of ["a", "b"]) {
          const name = `c${k}-${i}${part}`;
          const ref = await curl(s.url, w.tok, "POST", "/repos/alice/app/git/refs", {
            ref: `refs/heads/${name}`,
            sha: SHA("1"),
          });
          if (ref.status !== 201) return;
          acked.push({ kind: "branch", name });
          const p = await curl(s.url, w.tok, "POST", P, { title: name, head: name, base });
          if (p.status !== 201) return;
          acked.push({ kind: "pull", number: p.json.number });
          nums.push(p.json.number);
          base = name;
        }
        const st = await curl(s.url, w.tok, "POST", S, { pull_requests: nums });
        if (st.status !== 201) return;
        acked.push({ kind: "stack", number: st.json.number });
      }
    });
    await sleep(2500);
    s.child.kill("SIGKILL");
    await s.child.status;
    cut = true;
    await Promise.all(clients);
    await s.child.stdout.cancel().catch(() => {});
    await s.child.stderr.cancel().catch(() => {});
    assert.ok(acked.filter((x) => x.kind === "stack").length > 5, `${acked.length} answered`);
    assert.ok((await Deno.stat(`${w.db}-wal`)).size > 0, "the kill left a WAL to recover");
    s = await startStacksServer(w.db);
    const call = apiCaller(s.url, w.tok);
    for (const x of acked) {
      const path = x.kind === "branch"
        ? `/repos/alice/app/git/ref/heads/${x.name}`
        : `${x.kind === "pull" ? P : S}/${x.number}`;
      const r = await call("GET", path);
      assert.equal(r.status, 200, `${path} was answered 201 before the kill`);
      if (x.kind === "stack") assert.equal(r.json.pull_requests.length, 2, path);
    }
  } finally {
    await s.stop();
  }
  try {
    assert.deepEqual(invariantProblems(w.db), []);
  } finally {
    await w.close();
  }
});

Deno.test({
  name:
    "a full disk in the middle of a 100-pull-request stack is 507 and leaves no part of it; the stacks made before are whole",
  ...needsNamespaces,
}, async () => {
  assertNamespaces();
  const dir = await Deno.makeTempDir({ prefix: "forgekit-full-stack-" });
  const seed = join(dir, "seed.db");
  const mnt = join(dir, "mnt");
  await Deno.mkdir(mnt);
  const tok = await createToken(seed, "alice");
  // 400 pull requests in one chain on main, 3 KB each: a stack of 100 rewrites about 100 pages.
  await seedStacks(seed, 0, { spare: 400, body: "x".repeat(3000) });
  const kib = Math.ceil((await Deno.stat(seed)).size / 1024) + 900;
  const wrap = [
    "unshare",
    ...(Deno.uid() === 0 ? [] : ["--user", "--map-root-user"]),
    "--mount",
    "sh",
    "-c",
    `mount -t tmpfs -o size=${kib}k tmpfs "$MNT" && cp "$SEED" "$MNT/s.db" && exec "$@"`,
    "sh",
  ];
  const s = await startStacksServer(join(mnt, "s.db"), [], { wrap, env: { MNT: mnt, SEED: seed } });
  try {
    const call = apiCaller(s.url, tok);
    const made: number[][] = [];
    let full: ApiReply | null = null;
    let range: number[] = [];
    for (let first = 1; first <= 301 && !full; first += 100) {
      range = Array.from({ length: 100 }, (_, i) => first + i);
      const r = await call("POST", S, { pull_requests: range });
      if (r.status === 201) made.push(range);
      else full = r;
    }
    assert.ok(full, "the disk never filled");
    assert.equal(full.status, 507, JSON.stringify(full.json));
    assert.ok(made.length > 0, "the first stack fits");
    const stacks = (await call("GET", `${S}?per_page=100`)).json;
    assert.deepEqual(
      stacks.map((x: { number: number; pull_requests: unknown[] }) => [
        x.number,
        x.pull_requests.length,
      ]),
      made.map((_, i) => [made.length - i, 100]),
    );
    for (const n of [range[0], range[50], range[99]]) {
      assert.equal((await call("GET", `${P}/${n}`)).json.stack, null, `#${n} is in no stack`);
    }
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
  assert.doesNotMatch(s.stderr(), /internal error|cannot rollback/);
});
