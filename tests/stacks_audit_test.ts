/**
 * Conformance audit of the Pull Request Stacks REST API against the real
 * server (`forgekit stacks serve` on loopback, a real SQLite file): rules
 * the other tests left open, and the defects the audit found.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { apiCaller, createToken, seedStacks, startStacksServer } from "./support/stacks_server.ts";

const SHA = (c: string) => c.repeat(40);

/** A server on a new database, alice's token, and her stacked repository `app` with a chain of `n` pull requests (#i: head bi, base b(i-1), #1 on main). */
async function setup(n: number) {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-audit-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  let server = await startStacksServer(db);
  const call = (method: string, path: string, body?: unknown) =>
    apiCaller(server.url, tok)(method, path, body);
  assert.equal(
    (await call("POST", "/user/repos", { name: "app", allow_stacked_pull_requests: true })).status,
    201,
  );
  let base = "main";
  for (let i = 1; i <= n; i++) {
    await call("POST", "/repos/alice/app/git/refs", { ref: `refs/heads/b${i}`, sha: SHA("1") });
    const p = await call("POST", "/repos/alice/app/pulls", { title: `P${i}`, head: `b${i}`, base });
    assert.equal(p.status, 201, JSON.stringify(p.json));
    base = `b${i}`;
  }
  return {
    dir,
    db,
    tok,
    call,
    get url() {
      return server.url;
    },
    async restart() {
      await server.stop();
      server = await startStacksServer(db);
    },
    async close() {
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const S = "/repos/alice/app/stacks";

Deno.test("a dissolved stack's id is never given to another stack, nor a deleted hook's to another hook, across restarts", async () => {
  const t = await setup(2);
  try {
    const first = await t.call("POST", S, { pull_requests: [1, 2] });
    assert.equal(first.status, 201);
    const res = await fetch(`${t.url}${S}/1/unstack`, {
      method: "POST",
      headers: { authorization: `token ${t.tok}` },
    });
    assert.equal(res.status, 204);
    assert.equal(await res.text(), "", "204: no body");
    await t.restart();
    const second = await t.call("POST", S, { pull_requests: [1, 2] });
    assert.equal(second.status, 201);
    assert.equal(second.json.number, 2, "numbers are never reused");
    assert.notEqual(second.json.id, first.json.id, "a global identifier names one stack");
    assert.notEqual(second.json.node_id, first.json.node_id);
    assert.equal((await t.call("GET", "/repos/alice/app/pulls/1")).json.stack.id, second.json.id);

    const hook = { config: { url: "http://127.0.0.1:9/hook" }, events: ["pull_request"] };
    const h1 = await t.call("POST", "/repos/alice/app/hooks", hook);
    assert.equal((await t.call("DELETE", `/repos/alice/app/hooks/${h1.json.id}`)).status, 204);
    await t.restart();
    const h2 = await t.call("POST", "/repos/alice/app/hooks", hook);
    assert.notEqual(h2.json.id, h1.json.id);
    assert.equal((await t.call("GET", `/repos/alice/app/hooks/${h1.json.id}`)).status, 404);
  } finally {
    await t.close();
  }
});

Deno.test("a version 3 database is migrated: new stack ids continue after the largest one there", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-audit-" });
  const db = join(dir, "stacks.db");
  await seedStacks(db, 3, { spare: 2 });
  const v3 = new DatabaseSync(db);
  v3.exec("DROP TABLE serials; PRAGMA user_version = 3;");
  v3.close();
  const tok = await createToken(db, "alice");
  const s = await startStacksServer(db);
  try {
    const call = apiCaller(s.url, tok);
    const created = await call("POST", S, { pull_requests: [7, 8] });
    assert.equal(created.status, 201, JSON.stringify(created.json));
    assert.deepEqual([created.json.id, created.json.number], [4, 4]);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("pull_requests holds safe integers only: a number JSON cannot carry exactly is 422, never read as another", async () => {
  const t = await setup(2);
  try {
    for (
      const [path, body] of [
        [S, '{"pull_requests":[1, 9007199254740993]}'],
        [S, '{"pull_requests":[1, 1e300]}'],
        [`${S}/1/add`, '{"pull_requests":[9007199254740993]}'],
      ]
    ) {
      if (path.endsWith("/add")) await t.call("POST", S, { pull_requests: [1, 2] });
      const res = await fetch(`${t.url}${path}`, {
        method: "POST",
        headers: { authorization: `token ${t.tok}` },
        body,
      });
      assert.equal(res.status, 422, body);
      assert.deepEqual((await res.json()).errors, [{
        resource: "Stack",
        field: "pull_requests",
        code: "invalid",
        message: "pull_requests must be an array of pull request numbers",
      }], body);
    }
  } finally {
    await t.close();
  }
});

Deno.test("HEAD answers with the GET's ETag and Content-Length, and 304 to If-None-Match, like GET", async () => {
  const t = await setup(2);
  try {
    await t.call("POST", S, { pull_requests: [1, 2] });
    for (const path of [S, `${S}/1`, "/repos/alice/app/pulls/2"]) {
      const get = await fetch(`${t.url}${path}`);
      const etag = get.headers.get("etag");
      const length = (await get.bytes()).byteLength;
      assert.ok(etag, path);
      const head = await fetch(`${t.url}${path}`, { method: "HEAD" });
      assert.equal(head.status, 200, path);
      assert.equal(head.headers.get("etag"), etag, path);
      assert.equal(head.headers.get("content-length"), String(length), `${path}: the GET's length`);
      assert.equal(await head.text(), "");
      const again = await fetch(`${t.url}${path}`, {
        method: "HEAD",
        headers: { "if-none-match": etag },
      });
      assert.equal(again.status, 304, path);
      await again.body?.cancel();
    }
  } finally {
    await t.close();
  }
});

Deno.test("answers vary by Authorization: a user's are private to caches, anonymous ones public", async () => {
  const t = await setup(1);
  try {
    const path = "/repos/alice/app/pulls";
    for (let round = 0; round < 2; round++) { // the second round comes from the response cache
      const mine = await fetch(`${t.url}${path}`, {
        headers: { authorization: `Bearer ${t.tok}` },
      });
      const anyone = await fetch(`${t.url}${path}`);
      await mine.body?.cancel();
      await anyone.body?.cancel();
      for (const r of [mine, anyone]) {
        assert.equal(r.status, 200);
        assert.match(r.headers.get("vary") ?? "", /\bAuthorization\b/, `round ${round}`);
      }
      assert.equal(mine.headers.get("cache-control"), "private, max-age=60, s-maxage=60");
      assert.equal(anyone.headers.get("cache-control"), "public, max-age=60, s-maxage=60");
    }
    const missing = await fetch(`${t.url}/repos/alice/nothing/pulls`);
    await missing.body?.cancel();
    assert.equal(missing.status, 404);
    assert.equal(missing.headers.get("cache-control"), null, "errors are not for caches");
  } finally {
    await t.close();
  }
});

Deno.test("every pull request, listed, read or in a webhook, carries the same stack object, or null when standalone", async () => {
  const t = await setup(4);
  const got: { action: string; body: Record<string, unknown> }[] = [];
  const receiver = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const body = await req.json();
    got.push({ action: body.action, body });
    return new Response("ok");
  });
  try {
    const hook = await t.call("POST", "/repos/alice/app/hooks", {
      config: { url: `http://127.0.0.1:${receiver.addr.port}/hook`, content_type: "json" },
      events: ["pull_request"],
    });
    assert.equal(hook.status, 201);
    const created = await t.call("POST", S, { pull_requests: [1, 2, 3] });
    assert.equal(created.status, 201);
    const mainSha = (await t.call("GET", "/repos/alice/app/git/ref/heads/main")).json.object.sha;
    const list = (await t.call("GET", "/repos/alice/app/pulls?state=all&direction=asc")).json;
    assert.deepEqual(list.map((p: { number: number }) => p.number), [1, 2, 3, 4]);
    for (const p of list) {
      assert.ok(Object.hasOwn(p, "stack"), `#${p.number} has a stack field`);
      const one = (await t.call("GET", `/repos/alice/app/pulls/${p.number}`)).json;
      assert.deepEqual(one.stack, p.stack, `#${p.number}: listing and read agree`);
      if (p.number === 4) {
        assert.equal(p.stack, null, "standalone: null");
        continue;
      }
      assert.deepEqual(p.stack, {
        id: created.json.id,
        number: created.json.number,
        size: 3,
        position: p.number,
        base: { ref: "main", sha: mainSha },
      });
      // Its own base is the pull request below; only the bottom one targets the stack's base.
      assert.equal(p.base.ref === p.stack.base.ref, p.stack.position === 1, `#${p.number}`);
    }
    const deadline = Date.now() + 20_000;
    while (got.filter((g) => g.action === "stacked").length < 3 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const stacked = got.filter((g) => g.action === "stacked");
    assert.equal(stacked.length, 3);
    for (const g of stacked) {
      const pull = g.body.pull_request as { number: number; stack: unknown };
      assert.deepEqual(pull.stack, list[pull.number - 1].stack, `webhook of #${pull.number}`);
    }
  } finally {
    await receiver.shutdown();
    await t.close();
  }
});

Deno.test("stack listing: newest first across pages, per_page at most 100, Link keeps per_page and the filter", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-audit-" });
  const db = join(dir, "stacks.db");
  await seedStacks(db, 150);
  const s = await startStacksServer(db);
  try {
    const get = (q: string) => fetch(`${s.url}${S}${q}`);
    const numbers = async (res: Response) =>
      (await res.json()).map((x: { number: number }) => x.number);
    const first = await get("?per_page=1000");
    assert.equal(first.status, 200);
    const page1 = await numbers(first);
    assert.equal(page1.length, 100, "per_page is at most 100");
    assert.deepEqual(page1, Array.from({ length: 100 }, (_, i) => 150 - i), "newest first");
    const link = first.headers.get("link")!;
    const rels = Object.fromEntries(
      link.split(", ").map((part) => {
        const m = /^<([^>]+)>; rel="(\w+)"$/.exec(part)!;
        return [m[2], new URL(m[1]).search];
      }),
    );
    assert.deepEqual(rels, { next: "?per_page=100&page=2", last: "?per_page=100&page=2" });
    const second = await get("?per_page=100&page=2");
    assert.deepEqual(await numbers(second), Array.from({ length: 50 }, (_, i) => 50 - i));
    assert.equal(
      second.headers.get("link"),
      `<${s.url}${S}?per_page=100&page=1>; rel="prev", <${s.url}${S}?per_page=100&page=1>; rel="first"`,
    );
    // The filter: the one stack holding that pull request (stack #7 holds #13 and #14).
    const filtered = await get("?pull_request=14&per_page=5");
    assert.deepEqual(await numbers(filtered), [7]);
    assert.equal(filtered.headers.get("link"), null, "one page: no Link");
    assert.deepEqual(await numbers(await get("?pull_request=9999")), []);
  } finally {
    await s.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("without stacked pull requests every Stacks endpoint is 404, under /api/v3 too and once switched off", async () => {
  const t = await setup(2);
  try {
    assert.equal((await t.call("POST", S, { pull_requests: [1, 2] })).status, 201);
    assert.equal(
      (await t.call("PATCH", "/repos/alice/app", { allow_stacked_pull_requests: false })).status,
      200,
    );
    for (const prefix of ["", "/api/v3"]) {
      for (
        const [m, p, b] of [
          ["GET", S],
          ["GET", `${S}/1`],
          ["POST", S, { pull_requests: [1, 2] }],
          ["POST", `${S}/1/add`, { pull_requests: [2] }],
          ["POST", `${S}/1/unstack`],
        ] as [string, string, unknown?][]
      ) {
        const r = await t.call(m, `${prefix}${p}`, b);
        assert.equal(r.status, 404, `${m} ${prefix}${p}`);
        assert.deepEqual(r.json, {
          message: "Not Found",
          documentation_url: "https://docs.github.com/rest",
          status: "404",
        });
      }
    }
    // The stack is still there, and back with the setting.
    await t.call("PATCH", "/repos/alice/app", { allow_stacked_pull_requests: true });
    assert.equal((await t.call("GET", `/api/v3${S}/1`)).status, 200);
  } finally {
    await t.close();
  }
});

Deno.test("concurrent writes to one stack: of racing additions exactly one lands, and racing creations make one stack", async () => {
  const t = await setup(6);
  try {
    // #7 also sits on b2, as #3 does: either may go on top of [1, 2], not both.
    await t.call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/x", sha: SHA("2") });
    assert.equal(
      (await t.call("POST", "/repos/alice/app/pulls", { title: "X", head: "x", base: "b2" }))
        .status,
      201,
    );
    assert.equal((await t.call("POST", S, { pull_requests: [1, 2] })).status, 201);
    const adds = await Promise.all(
      Array.from(
        { length: 12 },
        (_, i) => t.call("POST", `${S}/1/add`, { pull_requests: [i % 2 ? 3 : 7] }),
      ),
    );
    assert.deepEqual(adds.map((r) => r.status).sort(), [200, ...Array(11).fill(422)]);
    assert.ok(adds.every((r) => r.status !== 500));
    const stack = (await t.call("GET", `${S}/1`)).json;
    assert.equal(stack.pull_requests.length, 3);
    const top = stack.pull_requests[2].number;
    assert.equal((await t.call("GET", `/repos/alice/app/pulls/${top}`)).json.stack.position, 3);

    const creates = await Promise.all(
      Array.from({ length: 8 }, () => t.call("POST", S, { pull_requests: [4, 5, 6] })),
    );
    assert.deepEqual(creates.map((r) => r.status).sort(), [201, ...Array(7).fill(422)]);
    const all = (await t.call("GET", S)).json;
    assert.equal(all.length, 2);
  } finally {
    await t.close();
  }
});

Deno.test("bad input to the Stacks API gets 400, 404, 413 or 422 in GitHub's error shape, never a 500", async () => {
  const t = await setup(3);
  try {
    await t.call("POST", S, { pull_requests: [1, 2] });
    const cases: [string, string, string | undefined, number, string][] = [
      ["POST", S, "{", 400, "Problems parsing JSON"],
      ["POST", S, "", 400, "Problems parsing JSON"],
      ["POST", S, "[1,2]", 400, "Body should be a JSON object"],
      ["POST", S, '"\\ud800"', 400, "Body should be a JSON object"],
      ["POST", S, "null", 400, "Body should be a JSON object"],
      ["POST", S, '{"pull_requests":"1,2"}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":[1,"2"]}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":[1,2.5]}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":[1,-2]}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":{"0":1,"1":2}}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":[3,99]}', 422, "Validation Failed"],
      ["POST", S, '{"pull_requests":[3,3]}', 422, "Validation Failed"],
      ["POST", S, `{"pull_requests":[${"3,".repeat(200)}3]}`, 422, "Validation Failed"],
      ["POST", S, `{"x":"${"a".repeat(1 << 20)}"}`, 413, "Payload too large"],
      ["POST", `${S}/1/add`, '{"pull_requests":[]}', 422, "Validation Failed"],
      ["POST", `${S}/1/add`, '{"pull_requests":[1]}', 422, "Validation Failed"],
      ["POST", `${S}/1/add`, "{]", 400, "Problems parsing JSON"],
      ["POST", `${S}/99/add`, '{"pull_requests":[3]}', 404, "Not Found"],
      ["POST", `${S}/0/unstack`, undefined, 404, "Not Found"],
      ["POST", `${S}/1e0/unstack`, undefined, 404, "Not Found"],
      ["GET", `${S}/9007199254740993`, undefined, 404, "Not Found"],
      ["GET", `${S}/%F0%9F%A7%B1`, undefined, 404, "Not Found"],
      ["GET", `${S}?pull_request=x`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?per_page=-1`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?page=1.0`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?page=1e3`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?per_page=0x10`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?per_page=%207`, undefined, 422, "Validation Failed"],
      ["GET", `${S}?pull_request=99999999999999999999`, undefined, 422, "Validation Failed"],
      ["GET", "/repos/alice/%E2%9C%93/stacks", undefined, 404, "Not Found"],
    ];
    for (const [method, path, body, status, message] of cases) {
      const res = await fetch(`${t.url}${path}`, {
        method,
        headers: { authorization: `token ${t.tok}` },
        body,
      });
      const json = await res.json();
      const what = `${method} ${path} ${body?.slice(0, 40) ?? ""}`;
      assert.equal(res.status, status, `${what}: ${JSON.stringify(json)}`);
      assert.equal(json.message, message, what);
      assert.equal(json.status, String(status), what);
      assert.equal(json.documentation_url, "https://docs.github.com/rest", what);
    }
    // Nothing was changed by any of them.
    const stacks = (await t.call("GET", S)).json;
    assert.deepEqual(
      stacks.map((s: { pull_requests: { number: number }[] }) =>
        s.pull_requests.map((p) => p.number)
      ),
      [[1, 2]],
    );
  } finally {
    await t.close();
  }
});
