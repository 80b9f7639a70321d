/**
 * The stacks server as a real process on loopback, driven over HTTP:
 * persistence across restarts, the concurrent-create race, webhook delivery
 * to a real receiver (also after it comes back and after a restart), and the
 * `forgekit stack` client.
 */
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { join } from "node:path";
import { runForgekit } from "./support/cli.ts";
import {
  apiCaller,
  clientEnv,
  createToken,
  seedStacks,
  startStacksServer,
} from "./support/stacks_server.ts";
import { until } from "./support/until.ts";

const SHA = (c: string) => c.repeat(40);

async function seed(call: ReturnType<typeof apiCaller>, n: number, name = "app") {
  assert.equal(
    (await call("POST", "/user/repos", { name, allow_stacked_pull_requests: true })).status,
    201,
  );
  let base = "main";
  for (let i = 1; i <= n; i++) {
    await call("POST", `/repos/alice/${name}/git/refs`, {
      ref: `refs/heads/b${i}`,
      sha: SHA(String(i % 10)),
    });
    assert.equal(
      (await call("POST", `/repos/alice/${name}/pulls`, { title: `PR ${i}`, head: `b${i}`, base }))
        .status,
      201,
    );
    base = `b${i}`;
  }
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

interface Received {
  event: string;
  action: string;
  delivery: string;
  body: Record<string, unknown>;
}

function startReceiver(port: number, secret: string, got: Received[]) {
  return Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
    const raw = await req.text();
    const want = `sha256=${createHmac("sha256", secret).update(raw).digest("hex")}`;
    if (req.headers.get("x-hub-signature-256") !== want) {
      return new Response("bad signature", { status: 401 });
    }
    assert.match(req.headers.get("user-agent") ?? "", /^GitHub-Hookshot\/forgekit-\d+\.\d+\.\d+/);
    const body = JSON.parse(raw);
    got.push({
      event: req.headers.get("x-github-event")!,
      action: body.action,
      delivery: req.headers.get("x-github-delivery")!,
      body,
    });
    return new Response("ok");
  });
}

Deno.test("the server keeps everything across a restart and answers under /api/v3 too", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-srv-" });
  const db = join(dir, "data", "stacks.db");
  const tok = await createToken(db, "alice");
  let s = await startStacksServer(db);
  try {
    await seed(apiCaller(s.url, tok), 2);
    const created = await apiCaller(s.url, tok)("POST", "/repos/alice/app/stacks", {
      pull_requests: [1, 2],
    });
    assert.equal(created.status, 201);
    await s.stop();
    s = await startStacksServer(db);
    const call = apiCaller(s.url, tok);
    const stack = await call("GET", "/api/v3/repos/alice/app/stacks/1");
    assert.equal(stack.status, 200);
    assert.deepEqual(stack.json.pull_requests.map((p: { number: number }) => p.number), [1, 2]);
    assert.match(stack.json.url, /\/api\/v3\/repos\/alice\/app\/stacks\/1$/);
    assert.equal((await call("GET", "/repos/alice/app/pulls/2")).json.stack.position, 2);
    // curl, a real client, with the `token` scheme.
    const curl = await new Deno.Command("curl", {
      args: [
        "-s",
        "-H",
        `Authorization: token ${tok}`,
        `${s.url}/repos/alice/app/pulls?per_page=1`,
        "-D",
        "-",
      ],
      stdout: "piped",
    }).output();
    const out = new TextDecoder().decode(curl.stdout);
    assert.match(out, /^link: .*rel="next"/im);
    assert.match(out, /"number":2/);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("two servers on one database racing to stack overlapping pull requests: exactly one wins", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-race-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const a = await startStacksServer(db);
  const b = await startStacksServer(db);
  try {
    await seed(apiCaller(a.url, tok), 4);
    const bodies = [[1, 2], [1, 2, 3], [2, 3], [2, 3, 4], [3, 4], [1, 2, 3, 4]];
    const results = await Promise.all(
      Array.from(
        { length: 24 },
        (_, i) =>
          apiCaller(i % 2 ? a.url : b.url, tok)("POST", "/repos/alice/app/stacks", {
            pull_requests: bodies[i % bodies.length],
          }),
      ),
    );
    const statuses = results.map((r) => r.status);
    assert.ok(statuses.every((s) => s === 201 || s === 422), statuses.join(","));
    const winners = results.filter((r) => r.status === 201);
    // Every body overlaps every other (each contains #2 or #3, and each pair shares one), so one stack at most… at least one.
    assert.equal(winners.length, 1, statuses.join(","));
    const list = await apiCaller(b.url, tok)("GET", "/repos/alice/app/stacks");
    assert.equal(list.json.length, 1);
    assert.ok(
      results.some((r) => r.status === 422 && /already stacked/.test(JSON.stringify(r.json))),
    );
  } finally {
    await a.stop();
    await b.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("webhooks reach a receiver that checks the signature, after it comes back and after a server restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-hook-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const port = freePort();
  const got: Received[] = [];
  let s = await startStacksServer(db, ["--hook-backoff-ms", "100"]);
  let receiver: Deno.HttpServer | null = null;
  try {
    const call = apiCaller(s.url, tok);
    await call("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true });
    const hook = await call("POST", "/repos/alice/app/hooks", {
      config: { url: `http://127.0.0.1:${port}/hook`, secret: "hook-secret", content_type: "json" },
      events: ["pull_request"],
    });
    assert.equal(hook.status, 201);
    await seed(call, 0, "unused");
    await call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/b1", sha: SHA("1") });
    await call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/b2", sha: SHA("2") });
    // The receiver is down: opened events wait and are retried.
    await call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    await call("POST", "/repos/alice/app/pulls", { title: "two", head: "b2", base: "b1" });
    await until(
      "a failed attempt",
      async () =>
        (await call("GET", `/repos/alice/app/hooks/${hook.json.id}/deliveries`)).json.some((
          d: { attempts: number },
        ) => d.attempts > 0),
    );
    receiver = startReceiver(port, "hook-secret", got);
    await until("opened deliveries", () => got.filter((g) => g.action === "opened").length === 2);
    await call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] });
    await until("stacked deliveries", () => got.filter((g) => g.action === "stacked").length === 2);
    const stacked = got.find((g) => g.action === "stacked")!;
    assert.equal(stacked.event, "pull_request");
    assert.equal((stacked.body.stack as { number: number }).number, 1);
    assert.equal((stacked.body.pull_request as { stack: { size: number } }).stack.size, 2);
    await call("PATCH", "/repos/alice/app/git/refs/heads/b2", { sha: SHA("7") });
    await call("PATCH", "/repos/alice/app/pulls/2", { title: "two!" });
    await call("PATCH", "/repos/alice/app/pulls/2", { state: "closed" });
    await call("PATCH", "/repos/alice/app/pulls/2", { state: "open" });
    await until(
      "the other actions",
      () =>
        ["synchronize", "edited", "closed", "reopened"].every((a) =>
          got.some((g) => g.action === a)
        ),
    );
    assert.equal(
      new Set(got.map((g) => g.delivery)).size,
      got.length,
      "each delivery has its own id",
    );

    // Down again; a change is committed; the server is stopped before it can deliver; both come back.
    await receiver.shutdown();
    receiver = null;
    const before = got.length;
    await call("PATCH", "/repos/alice/app/pulls/1", { title: "renamed while down" });
    await s.stop();
    receiver = startReceiver(port, "hook-secret", got);
    s = await startStacksServer(db, ["--hook-backoff-ms", "100"]);
    await until(
      "the event from before the restart",
      () =>
        got.slice(before).some((g) =>
          g.action === "edited" &&
          (g.body.pull_request as { title: string }).title === "renamed while down"
        ),
    );
  } finally {
    await receiver?.shutdown();
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("two servers on one database send each delivery once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-hook2-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const port = freePort();
  const a = await startStacksServer(db, ["--hook-backoff-ms", "20"]);
  const b = await startStacksServer(db, ["--hook-backoff-ms", "20"]);
  const got: string[] = [];
  let receiver: Deno.HttpServer | null = null;
  try {
    const call = apiCaller(a.url, tok);
    await call("POST", "/user/repos", { name: "app" });
    const hook = await call("POST", "/repos/alice/app/hooks", {
      config: { url: `http://127.0.0.1:${port}/hook`, content_type: "json" },
      events: ["pull_request"],
    });
    for (let i = 1; i <= 8; i++) {
      const c = apiCaller(i % 2 ? a.url : b.url, tok);
      await c("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/b${i}`, sha: SHA("1") });
      await c("POST", "/repos/alice/app/pulls", { title: `${i}`, head: `b${i}`, base: "main" });
    }
    // Both servers retry the deliveries while the receiver is down.
    await until(
      "retries",
      async () =>
        (await call("GET", `/repos/alice/app/hooks/${hook.json.id}/deliveries`)).json.every((
          d: { attempts: number },
        ) => d.attempts >= 3),
    );
    receiver = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
      await req.text();
      if (req.headers.get("x-github-event") === "ping") return new Response("pong");
      got.push(req.headers.get("x-github-delivery")!);
      await new Promise((r) => setTimeout(r, 100));
      return new Response("ok");
    });
    await until("every delivery", () => new Set(got).size === 8);
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(got.length, 8, "no delivery was sent twice");
  } finally {
    await receiver?.shutdown();
    await a.stop();
    await b.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a delivery in flight when the server is killed is sent after it starts again", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-hookkill-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const port = freePort();
  let s = await startStacksServer(db, ["--hook-backoff-ms", "50"]);
  const got: string[] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  const receiver = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
    await req.text();
    if (req.headers.get("x-github-event") === "ping") return new Response("pong");
    got.push(req.headers.get("x-github-delivery")!);
    if (got.length === 1) await released; // the first attempt never gets an answer
    return new Response("ok");
  });
  try {
    const call = apiCaller(s.url, tok);
    await call("POST", "/user/repos", { name: "app" });
    const hook = await call("POST", "/repos/alice/app/hooks", {
      config: { url: `http://127.0.0.1:${port}/hook`, content_type: "json" },
      events: ["pull_request"],
    });
    await call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/b1", sha: SHA("1") });
    await call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    await until("the first attempt", () => got.length === 1);
    s.child.kill("SIGKILL");
    await s.child.status;
    await s.child.stdout.cancel().catch(() => {});
    await s.child.stderr.cancel().catch(() => {});
    s = await startStacksServer(db, ["--hook-backoff-ms", "50"]);
    await until("the delivery again", () => got.length === 2, 30_000);
    assert.equal(got[1], got[0], "the same delivery");
    const listing = () =>
      apiCaller(s.url, tok)("GET", `/repos/alice/app/hooks/${hook.json.id}/deliveries`);
    await until("it to be recorded", async () => (await listing()).json[0].status === "OK");
    assert.equal((await listing()).json.length, 2, "the hook's ping, and the event");
  } finally {
    release();
    await receiver.shutdown();
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("forgekit stack list/view/create/add/unstack against the running server, through auth.json", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-client-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const s = await startStacksServer(db);
  try {
    await seed(apiCaller(s.url, tok), 4);
    const env = await clientEnv(dir, s.url, tok);
    const fk = (args: string[]) => runForgekit(["stack", ...args, "--repo", "alice/app"], { env });

    const created = await fk(["create", "1", "2"]);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /^created stack #1 {2}open {4}on main {2}2 PRs: #1 #2$/m);
    const one = await fk(["create", "3"]);
    assert.equal(one.code, 2, "said before any request");
    assert.match(one.stderr, /^error: A stack needs at least two pull requests \(got one: #3\)/);
    // The server's own validation errors come through as they are.
    const bad = await fk(["create", "3", "3"]);
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      new RegExp(
        `^error: Validation Failed: .+ \\(POST ${s.url}/repos/alice/app/stacks returned 422\\)\n$`,
      ),
    );
    const added = await fk(["add", "1", "3", "4", "--json"]);
    assert.deepEqual(
      JSON.parse(added.stdout).pull_requests.map((p: { number: number }) => p.number),
      [1, 2, 3, 4],
    );
    const view = await fk(["view", "1"]);
    assert.equal(view.code, 0, view.stderr);
    assert.equal(
      view.stdout,
      "stack #1 open, 4 pull requests\nmain\n└─ #1 [open] PR 1 (b1)\n   └─ #2 [open] PR 2 (b2)\n      └─ #3 [open] PR 3 (b3)\n         └─ #4 [open] PR 4 (b4)\n",
    );
    const list = await fk(["list", "--json"]);
    assert.deepEqual(JSON.parse(list.stdout).map((x: { number: number }) => x.number), [1]);
    const filtered = await fk(["list", "--pull-request", "3"]);
    assert.match(filtered.stdout, /^#1 /);
    const un = await fk(["unstack", "1"]);
    assert.equal(un.stdout, "stack #1 dissolved\n");
    assert.equal((await fk(["list"])).stdout, "no stacks\n");
    const noauth = await runForgekit([
      "stack",
      "create",
      "1",
      "2",
      "--repo",
      "alice/app",
      "--api-url",
      s.url,
    ]);
    assert.equal(noauth.code, 1);
    assert.match(noauth.stderr, /^error: Requires authentication/);
    const usage = await runForgekit(["stack", "view", "--repo", "nope"]);
    assert.equal(usage.code, 2);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("forgekit stack list shows every stack, past the API's 100 per page", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-client-pages-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  // 101 two-pull stacks, written straight to the database: the point is the
  // listing, and 500 API calls would only make the test slow.
  await seedStacks(db, 101);
  const s = await startStacksServer(db);
  try {
    const env = await clientEnv(dir, s.url, tok);
    const list = await runForgekit(["stack", "list", "--json", "--repo", "alice/app"], { env });
    assert.equal(list.code, 0, list.stderr);
    const numbers = JSON.parse(list.stdout).map((x: { number: number }) => x.number);
    assert.deepEqual(numbers, Array.from({ length: 101 }, (_, i) => 101 - i), "newest first, all");
    const text = await runForgekit(["stack", "list", "--repo", "alice/app"], { env });
    assert.equal(text.stdout.trim().split("\n").length, 101);
    assert.match(text.stdout.trim().split("\n").at(-1)!, /^#1 /);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
