/**
 * The `forgekit stack` client as a real process against real servers: one
 * that lists while another client writes, one that never answers, and one
 * that answers with GitHub's less common error shapes.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit } from "./support/cli.ts";
import {
  apiCaller,
  clientEnv,
  createToken,
  seedStacks,
  startStacksServer,
} from "./support/stacks_server.ts";

Deno.test("forgekit stack list shows every stack when another one is created between its pages", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-list-race-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  // 201 stacks: pages of 100, 100 and 1. Page 2 is read after #202 is made,
  // so it starts with #102, the last of page 1, again.
  const spare = await seedStacks(db, 201, { spare: 2 });
  const s = await startStacksServer(db);
  // A pass-through proxy in front of the server; right after it has relayed
  // page 1 of the listing, another client stacks the two spare pull requests.
  let created = 0;
  const proxy = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const u = new URL(req.url);
    const res = await fetch(`${s.url}${u.pathname}${u.search}`, { headers: req.headers });
    const body = await res.arrayBuffer();
    if (u.pathname.endsWith("/stacks") && u.searchParams.get("page") === "1" && created === 0) {
      const made = await apiCaller(s.url, tok)("POST", "/repos/alice/app/stacks", {
        pull_requests: spare,
      });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      created = made.json.number;
    }
    return new Response(body, { status: res.status, headers: res.headers });
  });
  try {
    const env = await clientEnv(dir, `http://127.0.0.1:${proxy.addr.port}`, tok);
    const list = await runForgekit(["stack", "list", "--json", "--repo", "alice/app"], { env });
    assert.equal(list.code, 0, list.stderr);
    assert.equal(created, 202, "the other client made its stack while the list was read");
    const numbers = JSON.parse(list.stdout).map((x: { number: number }) => x.number);
    assert.deepEqual(
      numbers,
      Array.from({ length: 201 }, (_, i) => 201 - i),
      "every stack that existed when the list began, once each, newest first",
    );
  } finally {
    await proxy.shutdown();
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("forgekit stack gives up on a server that accepts but never answers, after --timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn); // read nothing, answer nothing
  })().catch(() => {});
  try {
    const api = `http://127.0.0.1:${listener.addr.port}`;
    const started = Date.now();
    const r = await runForgekit(
      ["stack", "list", "--repo", "alice/app", "--api-url", api, "--timeout", "1.5"],
      { timeoutMs: 30_000 },
    );
    const took = Date.now() - started;
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, "");
    assert.match(
      r.stderr,
      new RegExp(
        `^error: ${api} did not answer GET /repos/alice/app/stacks\\?per_page=100&page=1 within 1\\.5 s: .*raise --timeout\\)\\n$`,
      ),
    );
    assert.ok(took < 15_000, `gave up after ${took} ms`);
    const bad = await runForgekit(["stack", "list", "--repo", "a/b", "--timeout", "soon"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^error: --timeout must be a number of seconds/);
  } finally {
    listener.close();
    await accepting;
    for (const conn of held) conn.close();
  }
});

Deno.test("API errors whose entries are strings are shown as they are, on one line", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () =>
    Response.json({
      message: "Validation Failed",
      errors: ["Pull request #3 is locked", null, { field: "head", code: "invalid" }, {
        message: "Base moved",
      }],
    }, { status: 422 }));
  try {
    const api = `http://127.0.0.1:${server.addr.port}`;
    const r = await runForgekit([
      "stack",
      "create",
      "1",
      "2",
      "--repo",
      "alice/app",
      "--api-url",
      api,
    ]);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: Validation Failed: Pull request #3 is locked; head invalid; Base moved (POST ${api}/repos/alice/app/stacks returned 422)\n`,
    );
  } finally {
    await server.shutdown();
  }
});
