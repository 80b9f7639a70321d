/**
 * Mutated requests against the stacks server, from a fixed seed (the same
 * cases every run): a real server on loopback over a real SQLite file, sent
 * wrong JSON types, missing and extra fields, huge, negative and fractional
 * numbers, NUL, unpaired surrogates and non-Latin-1 text, malformed and
 * oversized bodies, odd content types and methods, percent-encoded oddities
 * in owner, repository and branch names, duplicate requests and cyclic or
 * conflicting stack operations. Whatever the input: no 5xx, every error is
 * JSON with a `message`, a rejected write leaves the database as it was, an
 * accepted one leaves it consistent and reads back as sent, and the server
 * logs no internal error.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { createApp, hashToken, openSqliteStore, type Store } from "../lib/stacks/mod.ts";

const CASES = 3000;
/** Cases per fresh database, so later cases still reach deep paths. */
const PER_DB = 200;
const SHA = (c: string) => c.repeat(40);

/** A small deterministic generator, mulberry32 (the cases must be the same every run). */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

interface Fixture {
  base: string;
  port: number;
  db: string;
  store: Store;
  stop(): Promise<void>;
}

const TOKENS = { alice: "tok-alice", bob: "tok-bob", carol: "tok-carol" };

async function startServer(dir: string, n: number): Promise<Fixture> {
  const db = join(dir, `stacks-${n}.db`);
  const store = openSqliteStore(db);
  for (const [login, token] of Object.entries(TOKENS)) {
    await store.transaction(async () => {
      const u = await store.ensureUser(login);
      await store.addToken(u.id, hashToken(token));
    });
  }
  const ac = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen() {} },
    createApp({ store, allowPrivateHookTargets: true }).fetch, // its hooks name loopback
  );
  return {
    base: `http://127.0.0.1:${server.addr.port}`,
    port: server.addr.port,
    db,
    store,
    async stop() {
      ac.abort();
      await server.finished;
      await store.close();
    },
  };
}

interface Answer {
  status: number;
  text: string;
}

async function send(
  f: Fixture,
  req: { method: string; path: string; body?: BodyInit; headers?: Record<string, string> },
): Promise<Answer> {
  const res = await fetch(f.base + req.path, {
    method: req.method,
    headers: req.headers,
    body: req.body,
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, text: await res.text() };
}

const auth = (who: keyof typeof TOKENS) => ({ authorization: `token ${TOKENS[who]}` });

/** Repositories, collaborators, branches b1..b6, pull requests #1..#8, stack 1 of [1, 2], a hook. */
async function seed(f: Fixture) {
  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await send(f, {
      method,
      path,
      headers: auth("alice"),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    assert.ok(r.status < 300, `seed ${method} ${path}: ${r.status} ${r.text}`);
  };
  await ok("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true });
  await ok("POST", "/user/repos", { name: "plain" });
  await ok("PUT", "/repos/alice/app/collaborators/bob");
  let base = "main";
  for (let i = 1; i <= 6; i++) {
    await ok("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/b${i}`, sha: SHA(String(i)) });
    await ok("POST", "/repos/alice/app/pulls", { title: `PR ${i}`, head: `b${i}`, base });
    base = `b${i}`;
  }
  // #7 and #8 chain onto the stack but bring a branch round again (cycles).
  await ok("POST", "/repos/alice/app/pulls", { title: "PR 7", head: "b1", base: "b3" });
  await ok("POST", "/repos/alice/app/pulls", { title: "PR 8", head: "main", base: "b2" });
  await ok("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] });
  await ok("POST", "/repos/alice/app/hooks", {
    config: { url: "http://127.0.0.1:9/hook" },
    events: ["pull_request"],
  });
}

/** Everything the store holds (delivery attempts aside: the worker is not running). */
function dump(db: DatabaseSync): string {
  const tables = ["users", "tokens", "repos", "collaborators", "branches", "stacks", "pulls"];
  const out: Record<string, unknown> = {};
  for (const t of [...tables, "hooks", "deliveries"]) {
    out[t] = db.prepare(`SELECT * FROM ${t} ORDER BY rowid`).all();
  }
  // hex() too: text with a NUL reads back cut short, so compare the bytes.
  out.texts = db.prepare("SELECT hex(title), hex(body) FROM pulls ORDER BY id").all();
  return JSON.stringify(out, (_k, v) => typeof v === "bigint" ? String(v) : v);
}

/** The rules of a consistent store that it breaks (empty when none). */
function inconsistencies(db: DatabaseSync): string[] {
  const bad: string[] = [];
  for (const r of db.prepare("SELECT number FROM pulls WHERE head_ref = base_ref").all()) {
    bad.push(`pull request #${r.number} has its head as its base`);
  }
  for (
    const r of db.prepare(
      "SELECT head_ref, base_ref FROM pulls WHERE state = 'open' GROUP BY repo_id, head_ref, base_ref HAVING count(*) > 1",
    ).all()
  ) bad.push(`two open pull requests from ${r.head_ref} into ${r.base_ref}`);
  for (const s of db.prepare("SELECT id, number, base_ref FROM stacks").all()) {
    const pulls = db.prepare(
      "SELECT head_ref, stack_position FROM pulls WHERE stack_id = ? ORDER BY stack_position",
    ).all(s.id);
    const refs = [String(s.base_ref), ...pulls.map((p) => String(p.head_ref))];
    if (new Set(refs).size !== refs.length) bad.push(`stack ${s.number} is a cycle: ${refs}`);
    if (pulls.some((p, i) => p.stack_position !== i + 1)) bad.push(`stack ${s.number} has gaps`);
  }
  return bad;
}

const IDS = ["0", "-1", "1.5", "1e3", "abc", "99999999999999999999", "%00", "%FF"];
const OWNERS = ["ALICE", "bob", "alice%00x", "%E0%A4%A", "%2e%2e", "%FF", "x".repeat(300)];
const REPOS = ["app", "plain", "APP", "app%00x", "nope", "%FF", "%2F", ".."];
const BRANCHES = ["b1", "b3", "main", "nope", "%E6%97%A5%E6%9C%AC", "caf%C3%A9", "main%00x", "%FF"];
const QUERY = ["", "0", "-1", "1", "1.5", "abc", "101", "99999999999999999999", "%00"];
/** Values of the wrong type or shape for any field. */
const VALUES: unknown[] = [
  null,
  true,
  0,
  -1,
  1.5,
  1e308,
  2 ** 53 + 2,
  "",
  "1",
  "x".repeat(70_000),
  [],
  {},
  [null],
];
/** Text that cannot be stored as sent, or only just can. */
const NASTY_TEXT = ["", " ", "a\u0000b", "\u0000", "\ud800x", "\u202e\u0007", "x".repeat(70_000)];
const SHA_C = SHA("c");

/** A field's good values and its field-specific bad ones; optional fields are often left out. */
interface Field {
  good: unknown[];
  bad?: unknown[];
  optional?: boolean;
}

const STACK_GOOD = [[3, 4], [3, 4, 5], [5, 6], [3, 7], [8], [2, 8], [1, 2, 3, 7], [2, 3], [4, 3]];
const STACK_BAD = [
  [3, 3],
  [9, 10],
  [0, 1],
  [-1, 2],
  [1.5, 2],
  ["3", "4"],
  [1e300, 1e301],
  [
    [3],
  ],
  Array(101).fill(3),
  Array.from({ length: 101 }, (_, i) => i + 1),
  "3,4",
];

/** The routes: method, path, body fields. */
function routes(
  pick: <T>(list: readonly T[]) => T,
  maybe: (p: number) => boolean,
): [string, string, Record<string, Field>?][] {
  const repo = maybe(0.8) ? "/repos/alice/app" : `/repos/${pick(OWNERS)}/${pick(REPOS)}`;
  const pull = maybe(0.8) ? pick(["1", "2", "3", "4", "5", "6", "7", "8"]) : pick(IDS);
  const small = maybe(0.8) ? pick(["1", "1", "2", "3"]) : pick(IDS);
  const branch = pick(BRANCHES);
  const query = (names: string[]) => {
    const parts = names.filter(() => maybe(0.6)).map((n) => `${n}=${pick(QUERY)}`);
    return parts.length ? `?${parts.join("&")}` : "";
  };
  const text = { good: ["t", "日本"], bad: NASTY_TEXT, optional: true };
  return [
    ["GET", "/user"],
    ["POST", "/user/repos", {
      name: { good: ["r1", "r2"], bad: [".", "a b", "x".repeat(101), "a\u0000b", "app"] },
      private: { good: [true, false], optional: true },
      allow_stacked_pull_requests: { good: [true, false], optional: true },
    }],
    ["PATCH", repo, {
      private: { good: [false], optional: true },
      allow_stacked_pull_requests: { good: [true], optional: true },
    }],
    ["PUT", `${repo}/collaborators/${pick(["carol", "nobody", "carol%00x", "%FF"])}`],
    ["POST", `${repo}/git/refs`, {
      ref: {
        good: ["refs/heads/new", "refs/heads/日本", "refs/heads/café"],
        bad: [
          "refs/heads/\ud800",
          "refs/heads/a\u0000b",
          "refs/heads/",
          "refs/heads/a..b",
          "refs/tags/v1",
          "b1",
          "refs/heads/b1",
        ],
      },
      sha: { good: [SHA_C], bad: ["abc", SHA("C")] },
    }],
    ["GET", `${repo}/git/ref/heads/${branch}`],
    ["PATCH", `${repo}/git/refs/heads/${branch}`, {
      sha: { good: [SHA("d")], bad: ["abc"] },
      force: { good: [true, false], optional: true },
    }],
    ["DELETE", `${repo}/git/refs/heads/${branch}`],
    ["POST", `${repo}/pulls`, {
      title: { good: ["t", "日本"], bad: NASTY_TEXT },
      head: { good: ["new", "日本", "b6", "b1", "alice:b2"], bad: ["nope", "b1\u0000", ":"] },
      base: { good: ["main", "b6", "b1", "b3"], bad: ["nope", "b1\u0000"] },
      body: text,
      draft: { good: [true, false], optional: true },
    }],
    ["GET", `${repo}/pulls${query(["state", "page", "per_page", "direction", "head"])}`],
    ["GET", `${repo}/pulls/${pull}`],
    ["PATCH", `${repo}/pulls/${pull}`, {
      title: text,
      body: text,
      state: { good: ["open", "closed"], bad: ["merged"], optional: true },
      base: { good: ["main", "b1", "b2", "b3", "b4", "b5", "b6"], bad: ["nope"], optional: true },
    }],
    ["PUT", `${repo}/pulls/${pull}/merge`, { sha: { good: [SHA("1")], optional: true } }],
    ["GET", `${repo}/stacks${query(["pull_request", "page", "per_page"])}`],
    ["GET", `${repo}/stacks/${small}`],
    ["POST", `${repo}/stacks`, { pull_requests: { good: STACK_GOOD, bad: STACK_BAD } }],
    ["POST", `${repo}/stacks/${small}/add`, {
      pull_requests: { good: STACK_GOOD, bad: STACK_BAD },
    }],
    ["POST", `${repo}/stacks/${small}/unstack`],
    ["POST", `${repo}/hooks`, {
      config: {
        good: [{ url: "http://127.0.0.1:9/h" }, { url: "http://127.0.0.1:9/h", secret: "s" }],
        bad: [{ url: "ftp://x" }, { url: "http://x/\u0000" }, {
          url: "http://x/",
          secret: "a\u0000b",
        }],
      },
      events: { good: [["pull_request"], ["*"]], optional: true },
      active: { good: [true, false], optional: true },
    }],
    ["GET", `${repo}/hooks/${small}`],
    ["PATCH", `${repo}/hooks/${small}`, {
      config: {
        good: [{ url: "http://127.0.0.1:9/x" }, { secret: "t" }],
        bad: [{ secret: "a\u0000b" }, { url: "http://x/\ud800" }],
        optional: true,
      },
      active: { good: [true, false], optional: true },
    }],
    ["DELETE", `${repo}/hooks/${small}`],
    ["GET", `${repo}/hooks/${small}/deliveries${query(["per_page", "page"])}`],
    ["POST", `${repo}/hooks/${small}/deliveries/${small}/attempts`],
  ];
}

const RAW_BODIES: BodyInit[] = [
  "",
  "{",
  "null",
  "[]",
  "1",
  '"x"',
  '{"a":1}{}',
  "\uFEFF{}",
  new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
  "[".repeat(100_000),
  "x".repeat((1 << 20) + 1),
];

interface Case {
  method: string;
  path: string;
  body?: BodyInit;
  sent?: Record<string, unknown>;
  headers: Record<string, string>;
}

/** One request: a route with a good body, then up to two fields changed or dropped. */
function makeCase(rnd: () => number): Case {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rnd() * list.length)];
  const maybe = (p: number) => rnd() < p;
  const [routeMethod, path, fields] = pick(routes(pick, maybe));
  const method = maybe(0.04) ? pick(["PUT", "DELETE", "OPTIONS", "HEAD", "PROPFIND"]) : routeMethod;
  const headers: Record<string, string> = maybe(0.85)
    ? auth("alice")
    : maybe(0.7)
    ? auth(pick(["bob", "carol"] as const))
    : {};
  if (maybe(0.7)) headers["content-type"] = "application/json";
  else if (maybe(0.5)) headers["content-type"] = pick(["text/plain", "multipart/form-data"]);
  if (maybe(0.03)) headers["x-github-api-version"] = pick(["2022-11-28", "nope"]);
  const c: Case = { method, path, headers };
  if (!fields || method === "GET" || method === "HEAD") return c;
  if (maybe(0.1)) {
    c.body = pick(RAW_BODIES);
    return c;
  }
  const sent: Record<string, unknown> = {};
  for (const [name, f] of Object.entries(fields)) {
    if (!f.optional || maybe(0.5)) sent[name] = pick(f.good);
  }
  for (let n = pick([0, 1, 1, 2]); n > 0; n--) {
    const [name, f] = pick(Object.entries(fields));
    if (maybe(0.15)) delete sent[name];
    else sent[name] = f.bad && maybe(0.6) ? pick(f.bad) : pick(VALUES);
  }
  if (maybe(0.05)) sent[pick(["extra", "constructor", "number"])] = pick(VALUES);
  c.sent = sent;
  c.body = JSON.stringify(sent);
  return c;
}

/** What is wrong with one answer (empty when nothing is). */
function check(
  c: Case,
  r: Answer,
  { before, broken, db }: { before: string | null; broken: Set<string>; db: DatabaseSync },
): string[] {
  const what = `${c.method} ${c.path.slice(0, 120)} ${String(c.body ?? "").slice(0, 120)}`;
  const wrong: string[] = [];
  if (r.status >= 500) wrong.push(`${what}: ${r.status} ${r.text.slice(0, 120)}`);
  if (r.status >= 400 && c.method !== "HEAD") {
    let message: unknown;
    try {
      message = JSON.parse(r.text).message;
    } catch { /* not JSON */ }
    if (typeof message !== "string") wrong.push(`${what}: error body is ${r.text.slice(0, 80)}`);
  }
  if (before === null) return wrong;
  if (r.status >= 400) {
    if (dump(db) !== before) wrong.push(`${what}: rejected with ${r.status} but changed the store`);
    return wrong;
  }
  for (const rule of inconsistencies(db)) {
    if (!broken.has(rule)) wrong.push(`${what}: accepted, and now ${rule}`);
    broken.add(rule);
  }
  if (/\/pulls(\/\d+)?$/.test(c.path) && c.sent && r.status < 300) {
    const got = JSON.parse(r.text);
    for (const field of ["title", "body"]) {
      const v = c.sent[field];
      if (typeof v === "string" && v !== "" && got[field] !== v) {
        wrong.push(
          `${what}: accepted ${field} ${JSON.stringify(v)} reads back as ${
            JSON.stringify(got[field])?.slice(0, 40)
          }`,
        );
      }
    }
  }
  return wrong;
}

/** Sends raw bytes; the status line of the answer (or "" when the connection closed). */
async function rawExchange(port: number, bytes: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(bytes));
    const buf = new Uint8Array(16384);
    let got = "";
    const end = Date.now() + 5000;
    while (!/\r\n\r\n/.test(got) && Date.now() < end) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      got += new TextDecoder().decode(buf.subarray(0, n));
    }
    return got;
  } finally {
    conn.close();
  }
}

Deno.test("fuzz: 3000 mutated requests get no 5xx, JSON errors, and change nothing when rejected", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-fuzz-" });
  const logged: string[] = [];
  const consoleError = console.error;
  console.error = (...args: unknown[]) => logged.push(args.map(String).join(" ").split("\n")[0]);
  const rnd = random(20260311);
  const failures = new Set<string>();
  let f: Fixture | null = null;
  let db: DatabaseSync | null = null;
  /** Rules the current database already broke (each is reported once). */
  const broken = new Set<string>();
  try {
    for (let i = 0; i < CASES; i++) {
      if (i % PER_DB === 0) {
        db?.close();
        await f?.stop();
        f = await startServer(dir, i / PER_DB);
        await seed(f);
        db = new DatabaseSync(f.db, { readOnly: true });
        broken.clear();
      }
      const c = makeCase(rnd);
      const write = c.method !== "GET" && c.method !== "HEAD";
      const before = write ? dump(db!) : null;
      // Now and then the same write three times at once: one may win, the rest are rejected.
      const copies = write && rnd() < 0.05 ? 3 : 1;
      const answers = await Promise.all(Array.from({ length: copies }, () => send(f!, c)));
      for (const r of answers) {
        for (const w of check(c, r, { before: copies === 1 ? before : null, broken, db: db! })) {
          failures.add(w);
        }
      }
      if (copies > 1) {
        for (const rule of inconsistencies(db!)) {
          if (!broken.has(rule)) failures.add(`${copies} × ${c.method} ${c.path}: ${rule}`);
          broken.add(rule);
        }
      }
    }
    // The URL comes from the Host header, which only the client controls.
    for (const host of ["a b", "[::1", "%"]) {
      const status = await rawExchange(
        f!.port,
        `GET /user HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      );
      if (!/^HTTP\/1\.1 4\d\d /.test(status)) {
        failures.add(`Host: ${host}: ${status.split("\r\n")[0] || "no answer"}`);
      }
    }
    // A client that stops sending mid-body.
    const quitter = await Deno.connect({ hostname: "127.0.0.1", port: f!.port });
    await quitter.write(new TextEncoder().encode(
      `POST /user/repos HTTP/1.1\r\nHost: x\r\nAuthorization: token ${TOKENS.alice}\r\n` +
        `Content-Length: 100\r\n\r\n{"name":`,
    ));
    await new Promise((r) => setTimeout(r, 100));
    quitter.close();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(
      (await send(f!, { method: "GET", path: "/user", headers: auth("alice") })).status,
      200,
    );
  } finally {
    console.error = consoleError;
    db?.close();
    await f?.stop();
    await Deno.remove(dir, { recursive: true });
  }
  for (const line of new Set(logged)) failures.add(`logged: ${line}`);
  assert.deepEqual([...failures], []);
});
