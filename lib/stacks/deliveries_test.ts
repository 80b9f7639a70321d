/**
 * The delivery worker against real receivers on loopback: what it sends, and
 * how it copes with receivers that redirect, hang, fail or misbehave.
 */
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { join } from "node:path";
import { createApp, hashToken } from "./app.ts";
import { type DeliveryOptions, DeliveryWorker } from "./deliveries.ts";
import { DatabaseSync } from "node:sqlite";
import { openSqliteStore } from "./sqlite_store.ts";
import type { Store } from "./store.ts";

async function setup(options: DeliveryOptions = {}) {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-deliveries-" });
  const store = openSqliteStore(join(dir, "s.db"));
  await store.transaction(async () => {
    const u = await store.ensureUser("alice");
    await store.addToken(u.id, hashToken("tok-alice"));
  });
  // The receivers are on loopback.
  const worker = new DeliveryWorker(store, {
    backoffMs: 60_000,
    allowPrivateTargets: true,
    ...options,
  });
  // The app takes any URL: the worker's own check is what is tested here.
  const app = createApp({ store, notify: () => worker.wake(), allowPrivateHookTargets: true });
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await app.request(path, {
      method,
      headers: { authorization: "Bearer tok-alice" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
  const repo = await call("POST", "/user/repos", { name: "app" });
  let branches = 0;
  worker.start();
  return {
    call,
    worker,
    repoId: repo.json.id as number,
    async hook(config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
      const h = await call("POST", "/repos/alice/app/hooks", { config, events: ["*"], ...extra });
      assert.equal(h.status, 201, JSON.stringify(h.json));
      return h.json.id as number;
    },
    async deliveries(hookId: number) {
      return (await call("GET", `/repos/alice/app/hooks/${hookId}/deliveries`)).json as {
        status: string;
        status_code: number;
        attempts: number;
      }[];
    },
    /** Opens a pull request: one `pull_request` event. */
    async openPull() {
      const b = `b${++branches}`;
      await call("POST", "/repos/alice/app/git/refs", {
        ref: `refs/heads/${b}`,
        sha: "1".repeat(40),
      });
      const p = await call("POST", "/repos/alice/app/pulls", { title: b, head: b, base: "main" });
      assert.equal(p.status, 201);
    },
    async close() {
      await worker.stop();
      await store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

interface Hit {
  path: string;
  headers: Headers;
  body: Uint8Array;
}

/**
 * A receiver on loopback that records each request and answers with
 * `answer`; a new hook's ping is answered at once and not recorded.
 */
function receiver(
  answer: (req: Request) => Response | Promise<Response> = () => new Response("ok"),
) {
  const hits: Hit[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    if (req.headers.get("x-github-event") === "ping") return new Response("pong");
    hits.push({
      path: new URL(req.url).pathname,
      headers: req.headers,
      body: new Uint8Array(await req.arrayBuffer()),
    });
    return await answer(req);
  });
  return { url: `http://127.0.0.1:${server.addr.port}`, hits, close: () => server.shutdown() };
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const hmac = (algo: string, secret: string, bytes: Uint8Array) =>
  `${algo}=${createHmac(algo, secret).update(bytes).digest("hex")}`;

Deno.test("a worker for public targets sends nothing to a loopback address, named or literal", async () => {
  const t = await setup({
    allowPrivateTargets: false,
    lookup: (name) => Promise.resolve(name === "rebind.test" ? [{ address: "127.0.0.1" }] : []),
  });
  const r = receiver();
  try {
    const port = new URL(r.url).port;
    const hooks = [
      await t.hook({ url: `http://127.0.0.1:${port}/literal` }),
      await t.hook({ url: `http://rebind.test:${port}/named` }),
      await t.hook({ url: `http://[::ffff:127.0.0.1]:${port}/mapped` }),
    ];
    await t.openPull();
    for (const id of hooks) {
      await until(`hook ${id}'s attempt`, async () => (await t.deliveries(id))[0].attempts > 0);
      const [d] = await t.deliveries(id);
      assert.equal(d.status_code, 0, "no connection was made");
      assert.notEqual(d.status, "OK");
    }
    assert.deepEqual(r.hits.map((h) => h.path), [], "the loopback receiver got nothing");
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("a delivery never follows a redirect: the 3xx is the receiver's answer, and a failure", async () => {
  const t = await setup();
  const elsewhere = receiver();
  const redirecting = [301, 302, 303, 307, 308].map((status) =>
    receiver(() => new Response(null, { status, headers: { location: `${elsewhere.url}/stolen` } }))
  );
  try {
    const hooks: number[] = [];
    for (const r of redirecting) hooks.push(await t.hook({ url: `${r.url}/hook`, secret: "s" }));
    await t.openPull();
    for (const [i, status] of [301, 302, 303, 307, 308].entries()) {
      await until(
        `the ${status} attempt`,
        async () => (await t.deliveries(hooks[i]))[0].attempts > 0,
      );
      const [d] = await t.deliveries(hooks[i]);
      assert.equal(d.status_code, status);
      assert.notEqual(d.status, "OK");
      assert.equal(redirecting[i].hits.length, 1);
    }
    assert.equal(elsewhere.hits.length, 0, "the redirect's target got nothing");
  } finally {
    await t.close();
    await Promise.all([elsewhere, ...redirecting].map((r) => r.close()));
  }
});

Deno.test("both signatures cover the exact bytes sent, json or form; no signature without a secret", async () => {
  const t = await setup();
  const json = receiver();
  const form = receiver();
  const plain = receiver();
  try {
    const jsonHook = await t.hook({ url: json.url, secret: "s3cret", content_type: "json" });
    await t.hook({ url: form.url, secret: "f0rm", content_type: "form" });
    await t.hook({ url: plain.url, content_type: "json" });
    await t.openPull();
    await until("three deliveries", () => [json, form, plain].every((r) => r.hits.length === 1));

    const j = json.hits[0];
    assert.equal(j.headers.get("content-type"), "application/json");
    assert.equal(j.headers.get("x-hub-signature-256"), hmac("sha256", "s3cret", j.body));
    assert.equal(j.headers.get("x-hub-signature"), hmac("sha1", "s3cret", j.body));
    assert.equal(j.headers.get("x-github-event"), "pull_request");
    assert.equal(j.headers.get("x-github-hook-id"), String(jsonHook));
    assert.equal(j.headers.get("x-github-hook-installation-target-type"), "repository");
    assert.equal(j.headers.get("x-github-hook-installation-target-id"), String(t.repoId));
    assert.equal(JSON.parse(new TextDecoder().decode(j.body)).action, "opened");

    const f = form.hits[0];
    assert.equal(f.headers.get("content-type"), "application/x-www-form-urlencoded");
    assert.equal(f.headers.get("x-hub-signature-256"), hmac("sha256", "f0rm", f.body));
    assert.equal(f.headers.get("x-hub-signature"), hmac("sha1", "f0rm", f.body));
    const fields = new URLSearchParams(new TextDecoder().decode(f.body));
    assert.deepEqual([...fields.keys()], ["payload"]);
    assert.deepEqual(
      JSON.parse(fields.get("payload")!),
      JSON.parse(new TextDecoder().decode(j.body)),
      "the form's payload is the JSON body",
    );

    const p = plain.hits[0];
    assert.equal(p.headers.get("x-hub-signature-256"), null);
    assert.equal(p.headers.get("x-hub-signature"), null);
  } finally {
    await t.close();
    await Promise.all([json, form, plain].map((r) => r.close()));
  }
});

Deno.test("a receiver that never answers holds up neither other hooks' deliveries nor stop()", async () => {
  const t = await setup({ timeoutMs: 5_000 });
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  const stuck = receiver(() => released.then(() => new Response("late")));
  const fine = receiver();
  try {
    await t.hook({ url: stuck.url });
    await t.hook({ url: fine.url });
    await t.openPull();
    await until("the first event", () => fine.hits.length === 1 && stuck.hits.length === 1);
    await t.openPull(); // while the stuck receiver still holds the first
    await until("the second event to the healthy receiver", () => fine.hits.length === 2, 2_000);
    const started = Date.now();
    await t.worker.stop();
    assert.ok(Date.now() - started < 2_000, `stop() took ${Date.now() - started} ms`);
  } finally {
    release();
    await t.close();
    await Promise.all([stuck.close(), fine.close()]);
  }
});

Deno.test("a hook made inactive gets none of its pending deliveries", async () => {
  const t = await setup({ backoffMs: 50, maxBackoffMs: 50 });
  const port = freePort();
  let later: ReturnType<typeof receiver> | null = null;
  try {
    const id = await t.hook({ url: `http://127.0.0.1:${port}/hook` });
    await t.openPull();
    await until("a failed attempt", async () => (await t.deliveries(id))[0].attempts > 0);
    const p = await t.call("PATCH", `/repos/alice/app/hooks/${id}`, { active: false });
    assert.equal(p.json.active, false);
    const hits: Hit[] = [];
    const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
      hits.push({ path: "", headers: req.headers, body: new Uint8Array(await req.arrayBuffer()) });
      return new Response("ok");
    });
    later = { url: "", hits, close: () => server.shutdown() };
    await new Promise((r) => setTimeout(r, 500)); // ten retry delays
    assert.equal(hits.length, 0);
    assert.equal((await t.deliveries(id))[0].status, "failed");
  } finally {
    await t.close();
    await later?.close();
  }
});

Deno.test("the receiver's status decides the outcome; its body is never read, however long", async () => {
  const t = await setup({ timeoutMs: 3_000 });
  const endless = receiver(() =>
    new Response(
      new ReadableStream({ pull: (c) => c.enqueue(new Uint8Array(1 << 16)) }),
      { status: 200 },
    )
  );
  const gone = receiver(() => new Response("gone", { status: 410 }));
  const broken = receiver(() => new Response("oops", { status: 500 }));
  // Closes the connection after a partial status line.
  const raw = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const rawDone = (async () => {
    for await (const conn of raw) {
      await conn.read(new Uint8Array(4096)).catch(() => null);
      await conn.write(new TextEncoder().encode("HTTP/1.1 20")).catch(() => {});
      conn.close();
    }
  })();
  const plainPort = freePort();
  const plainHttp = Deno.serve(
    { hostname: "127.0.0.1", port: plainPort, onListen() {} },
    () => new Response("ok"),
  );
  try {
    const cases: [string, { code: number; status: string }][] = [
      [endless.url, { code: 200, status: "OK" }],
      [gone.url, { code: 410, status: "pending" }],
      [broken.url, { code: 500, status: "pending" }],
      [`http://127.0.0.1:${(raw.addr as Deno.NetAddr).port}`, { code: 0, status: "pending" }],
      [`https://127.0.0.1:${plainPort}`, { code: 0, status: "pending" }], // TLS to a plain port
    ];
    const ids: number[] = [];
    for (const [url] of cases) ids.push(await t.hook({ url }));
    await t.openPull();
    for (const [i, [url, want]] of cases.entries()) {
      await until(url, async () => (await t.deliveries(ids[i]))[0].attempts > 0, 5_000);
      const [d] = await t.deliveries(ids[i]);
      assert.deepEqual({ code: d.status_code, status: d.status }, want, url);
    }
  } finally {
    await t.close();
    raw.close();
    await rawDone;
    await Promise.all([endless.close(), gone.close(), broken.close(), plainHttp.shutdown()]);
  }
});

Deno.test("a database from before content_type keeps sending its hooks JSON", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-deliveries-" });
  const path = join(dir, "v1.db");
  const v1 = new DatabaseSync(path);
  v1.exec(`CREATE TABLE hooks (
    id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, url TEXT NOT NULL, secret TEXT, events TEXT NOT NULL,
    active INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
    INSERT INTO hooks VALUES (1, 1, 'http://127.0.0.1:9/', NULL, '["*"]', 1, 'x', 'x');
    CREATE TABLE pulls (
      id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, number INTEGER NOT NULL, user_id INTEGER NOT NULL,
      title TEXT NOT NULL, body TEXT, state TEXT NOT NULL, draft INTEGER NOT NULL,
      head_ref TEXT NOT NULL, head_sha TEXT NOT NULL, base_ref TEXT NOT NULL,
      created_at TEXT NOT NULL, updated_at TEXT NOT NULL, closed_at TEXT, merged_at TEXT, merge_commit_sha TEXT,
      stack_id INTEGER, stack_position INTEGER, UNIQUE (repo_id, number));
    CREATE INDEX pulls_base ON pulls (repo_id, base_ref);
    CREATE TABLE stacks (
      id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, number INTEGER NOT NULL, base_ref TEXT NOT NULL,
      created_at TEXT NOT NULL, UNIQUE (repo_id, number));
    PRAGMA user_version = 1;`);
  v1.close();
  const store = openSqliteStore(path);
  try {
    assert.equal((await store.getHook(1, 1))?.content_type, "json");
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/**
 * Several accounts, each with a repository `app`, a worker sending to
 * loopback, and a receiver that never answers (`stuckPort`). `instrument`
 * sees the store before the worker starts.
 */
async function accounts(
  users: string[],
  options: { timeoutMs: number; instrument?: (store: Store) => void },
) {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-deliveries-accounts-" });
  const store = openSqliteStore(join(dir, "s.db"));
  options.instrument?.(store);
  for (const who of users) {
    await store.transaction(async () => {
      const u = await store.ensureUser(who);
      await store.addToken(u.id, hashToken(`tok-${who}`));
    });
  }
  const worker = new DeliveryWorker(store, {
    backoffMs: 60_000,
    timeoutMs: options.timeoutMs,
    allowPrivateTargets: true,
  });
  const app = createApp({ store, notify: () => worker.wake(), allowPrivateHookTargets: true });
  const as = (who: string) => async (method: string, path: string, body?: unknown) => {
    const res = await app.request(path, {
      method,
      headers: { authorization: `Bearer tok-${who}` },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, text: await res.text() };
  };
  const hanging = new Set<() => void>();
  const stuck = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Promise<Response>((resolve) => hanging.add(() => resolve(new Response("late")))),
  );
  for (const who of users) {
    assert.equal((await as(who)("POST", "/user/repos", { name: "app" })).status, 201);
  }
  worker.start();
  return {
    stuckPort: stuck.addr.port,
    /** Adds `n` hooks on `who`'s repository, sending `pull_request` events to `port`. */
    async hooks(who: string, port: number, n: number) {
      for (let i = 0; i < n; i++) {
        const h = await as(who)("POST", `/repos/${who}/app/hooks`, {
          config: { url: `http://127.0.0.1:${port}/h${i}`, content_type: "json" },
          events: ["pull_request"],
        });
        assert.equal(h.status, 201, h.text);
      }
    },
    /** Opens a pull request on `who`'s repository: one event for each of its hooks. */
    async openPull(who: string) {
      const call = as(who);
      await call("POST", `/repos/${who}/app/git/refs`, {
        ref: "refs/heads/x",
        sha: "1".repeat(40),
      });
      assert.equal(
        (await call("POST", `/repos/${who}/app/pulls`, { title: "x", head: "x", base: "main" }))
          .status,
        201,
      );
    },
    async close() {
      for (const release of hanging) release();
      await worker.stop();
      await stuck.shutdown();
      await store.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("one account's hooks that never answer take at most its share of the senders: another account's delivery goes out at once", async () => {
  const t = await accounts(["alice", "mallory"], { timeoutMs: 4000 });
  let arrived = 0;
  const fast = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    if (req.headers.get("x-github-event") === "ping") return new Response("pong");
    arrived = performance.now();
    return new Response("ok");
  });
  try {
    await t.hooks("mallory", t.stuckPort, 18);
    await t.hooks("alice", fast.addr.port, 1);
    await t.openPull("mallory"); // 18 deliveries to a receiver that never answers
    await new Promise((r) => setTimeout(r, 200));
    const started = performance.now();
    await t.openPull("alice");
    for (let i = 0; i < 100 && arrived === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(arrived > 0, "alice's delivery went out");
    // Before: mallory's 18 took all 16 senders, and alice's waited out their 4 s timeout.
    assert.ok(
      arrived - started < 1500,
      `alice's delivery took ${Math.round(arrived - started)} ms`,
    );
  } finally {
    await t.close();
    await fast.shutdown();
  }
});

Deno.test("a worker with every sender busy and a delivery due waits for a send to end instead of spinning", async () => {
  let reads = 0;
  const users = ["u1", "u2", "u3", "u4", "u5", "u6"];
  const t = await accounts(users, {
    timeoutMs: 8000,
    instrument(store) {
      const nextDueAt = store.nextDueAt.bind(store);
      store.nextDueAt = (...a: Parameters<typeof nextDueAt>) => (reads++, nextDueAt(...a));
    },
  });
  try {
    for (const who of users) await t.hooks(who, t.stuckPort, who === "u6" ? 1 : 4);
    for (const who of users) await t.openPull(who);
    await new Promise((r) => setTimeout(r, 500));
    const before = reads;
    await new Promise((r) => setTimeout(r, 1000));
    const perSecond = reads - before;
    assert.ok(perSecond < 20, `the worker spins: ${perSecond} database reads a second`);
  } finally {
    await t.close();
  }
});
