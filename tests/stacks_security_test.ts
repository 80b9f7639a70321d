/**
 * Security review of the stacks server, as a hostile user with a token for
 * one account, or none, would attack it: the real server on loopback, a real
 * SQLite file, real webhook receivers.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { runForgekit } from "./support/cli.ts";
import {
  apiCaller,
  createToken,
  type StacksServer,
  startStacksServer,
} from "./support/stacks_server.ts";
import { until } from "./support/until.ts";

const SHA = "1".repeat(40);

/** A database with alice (public `app`, private `secret` with bob as collaborator) and bob. */
async function setup(options: { allowPrivateHookTargets?: boolean; extra?: string[] } = {}) {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-security-" });
  const db = join(dir, "stacks.db");
  const tokens = { alice: await createToken(db, "alice"), bob: await createToken(db, "bob") };
  let server: StacksServer = await startStacksServer(db, options.extra ?? [], options);
  const as = (who: "alice" | "bob" | null) => (method: string, path: string, body?: unknown) =>
    apiCaller(server.url, who ? tokens[who] : undefined)(method, path, body);
  const alice = as("alice");
  for (const [name, priv] of [["app", false], ["secret", true]] as const) {
    const r = await alice("POST", "/user/repos", {
      name,
      private: priv,
      allow_stacked_pull_requests: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    for (const b of ["a", "b"]) {
      await alice("POST", `/repos/alice/${name}/git/refs`, { ref: `refs/heads/${b}`, sha: SHA });
    }
    assert.equal(
      (await alice("POST", `/repos/alice/${name}/pulls`, { title: "A", head: "a", base: "main" }))
        .status,
      201,
    );
    assert.equal(
      (await alice("POST", `/repos/alice/${name}/pulls`, { title: "B", head: "b", base: "a" }))
        .status,
      201,
    );
    assert.equal(
      (await alice("POST", `/repos/alice/${name}/stacks`, { pull_requests: [1, 2] })).status,
      201,
    );
  }
  assert.equal((await alice("PUT", "/repos/alice/secret/collaborators/bob")).status, 204);
  return {
    dir,
    db,
    as,
    get server() {
      return server;
    },
    async restart(opts: { allowPrivateHookTargets?: boolean; extra?: string[] }) {
      await server.stop();
      server = await startStacksServer(db, opts.extra ?? [], opts);
    },
    async close() {
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("a hook URL that cannot reach the public internet is 422, on create and on update", async () => {
  const t = await setup({ allowPrivateHookTargets: false });
  try {
    const alice = t.as("alice");
    const refused = [
      "http://127.0.0.1:8080/hook",
      "http://localhost/hook",
      "http://[::1]/hook",
      "http://169.254.169.254/latest/meta-data/",
      "http://10.0.0.1/",
      "http://192.168.1.1/",
      "http://172.16.0.1/",
      "http://100.64.0.1/",
      "http://2130706433/",
      "http://0x7f.1/",
      "http://[::ffff:127.0.0.1]/",
      "http://[fd00::1]/",
      "http://0.0.0.0/",
    ];
    const wrong: string[] = [];
    for (const url of refused) {
      const r = await alice("POST", "/repos/alice/app/hooks", {
        config: { url },
        events: ["pull_request"],
      });
      const msg = r.json?.errors?.[0]?.message ?? "";
      if (r.status !== 422 || !/must reach the public internet/.test(msg)) {
        wrong.push(`${url} => ${r.status} ${JSON.stringify(r.json)}`);
      }
    }
    assert.deepEqual(wrong, []);
    const ok = await alice("POST", "/repos/alice/app/hooks", {
      config: { url: "https://ci.example/hook" },
      events: ["pull_request"],
    });
    assert.equal(ok.status, 201, JSON.stringify(ok.json));
    const patched = await alice("PATCH", `/repos/alice/app/hooks/${ok.json.id}`, {
      config: { url: "http://169.254.169.254/" },
    });
    assert.equal(patched.status, 422, JSON.stringify(patched.json));
    assert.equal(
      (await alice("GET", `/repos/alice/app/hooks/${ok.json.id}`)).json.config.url,
      "https://ci.example/hook",
    );
    // The operator may allow them, e.g. for receivers on an internal network.
    await t.restart({ allowPrivateHookTargets: true });
    const allowed = await t.as("alice")("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/hook" },
    });
    assert.equal(allowed.status, 201, JSON.stringify(allowed.json));
  } finally {
    await t.close();
  }
});

Deno.test("a hook saved with a loopback URL is sent nothing while the server refuses private targets", async () => {
  const hits: string[] = [];
  const receiver = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const text = await req.text();
    if (req.headers.get("x-github-event") !== "ping") hits.push(text);
    return new Response("ok");
  });
  const backoff = ["--hook-backoff-ms", "50"];
  const t = await setup({ extra: backoff });
  try {
    const hook = await t.as("alice")("POST", "/repos/alice/app/hooks", {
      config: { url: `http://127.0.0.1:${receiver.addr.port}/hook`, content_type: "json" },
      events: ["pull_request"],
    });
    assert.equal(hook.status, 201);
    await t.restart({ allowPrivateHookTargets: false, extra: backoff });
    const alice = t.as("alice");
    await alice("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/c", sha: SHA });
    assert.equal(
      (await alice("POST", "/repos/alice/app/pulls", { title: "C", head: "c", base: "main" }))
        .status,
      201,
    );
    const deliveries = `/repos/alice/app/hooks/${hook.json.id}/deliveries`;
    await until(
      "two attempts",
      async () => (await alice("GET", deliveries)).json[0]?.attempts >= 2,
    );
    assert.equal((await alice("GET", deliveries)).json[0].status_code, 0);
    assert.equal(hits.length, 0, "the loopback receiver got nothing");
    // Allowed again, the pending delivery goes out.
    await t.restart({ allowPrivateHookTargets: true, extra: backoff });
    await until("the delivery", () => Promise.resolve(hits.length > 0));
    assert.equal(JSON.parse(hits[0]).action, "opened");
  } finally {
    await t.close();
    await receiver.shutdown();
  }
});

Deno.test("a hook's secret is never shown in a response nor in the server's log", async () => {
  const t = await setup();
  const secret = "TOPSECRET-4f1c9e";
  try {
    const alice = t.as("alice");
    const bodies: string[] = [];
    const h = await alice("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/hook", secret },
      events: ["pull_request"],
    });
    assert.equal(h.status, 201);
    assert.equal(h.json.config.secret, "********");
    bodies.push(JSON.stringify(h.json));
    for (
      const [method, path, body] of [
        ["GET", "/repos/alice/app/hooks"],
        ["GET", `/repos/alice/app/hooks/${h.json.id}`],
        ["PATCH", `/repos/alice/app/hooks/${h.json.id}`, { config: { secret: `${secret}2` } }],
        ["GET", `/repos/alice/app/hooks/${h.json.id}/deliveries`],
        ["PATCH", `/repos/alice/app/hooks/${h.json.id}`, { config: { url: 7, secret } }],
      ] as const
    ) {
      bodies.push(JSON.stringify((await alice(method, path, body)).json));
    }
    assert.ok(bodies.every((b) => !b.includes(secret)), bodies.join("\n"));
  } finally {
    await t.close();
  }
  assert.ok(!t.server.stderr().includes(secret));
});

Deno.test("a collaborator cannot change a repository's settings: making it public is the owner's", async () => {
  const t = await setup();
  try {
    const bob = t.as("bob");
    assert.equal((await bob("GET", "/repos/alice/secret")).status, 200, "bob may read it");
    const r = await bob("PATCH", "/repos/alice/secret", { private: false });
    assert.equal(r.status, 403, JSON.stringify(r.json));
    assert.equal(r.json.message, "Must have admin rights to Repository.");
    const s = await bob("PATCH", "/repos/alice/secret", { allow_stacked_pull_requests: false });
    assert.equal(s.status, 403);
    assert.equal((await t.as(null)("GET", "/repos/alice/secret")).status, 404, "still private");
    assert.equal((await t.as("alice")("GET", "/repos/alice/secret")).json.private, true);
    const own = await t.as("alice")("PATCH", "/repos/alice/secret", { private: true });
    assert.equal(own.status, 200, "the owner still may");
  } finally {
    await t.close();
  }
});

Deno.test("another account sees none of a private repository and changes nothing of a public one", async () => {
  const t = await setup();
  const eve = await createToken(t.db, "eve");
  try {
    const asEve = apiCaller(t.server.url, eve);
    const anon = t.as(null);
    const hook = await t.as("alice")("POST", "/repos/alice/secret/hooks", {
      config: { url: "http://127.0.0.1:9/h" },
    });
    const cases: [string, string, unknown, number, number][] = [
      // method, path, body, eve's status, anonymous status
      ["GET", "/repos/alice/secret", undefined, 404, 404],
      ["GET", "/repos/alice/secret/pulls?state=all", undefined, 404, 404],
      ["GET", "/repos/alice/secret/pulls/1", undefined, 404, 404],
      ["GET", "/repos/alice/secret/stacks", undefined, 404, 404],
      ["GET", "/repos/alice/secret/stacks/1", undefined, 404, 404],
      ["GET", "/repos/alice/secret/git/ref/heads/a", undefined, 404, 404],
      ["GET", "/repos/alice/secret/hooks", undefined, 404, 404],
      ["GET", `/repos/alice/secret/hooks/${hook.json.id}`, undefined, 404, 404],
      ["PATCH", "/repos/alice/secret/pulls/1", { title: "x" }, 404, 404],
      ["PUT", "/repos/alice/secret/pulls/1/merge", undefined, 404, 404],
      ["POST", "/repos/alice/secret/stacks/1/unstack", undefined, 404, 404],
      ["PUT", "/repos/alice/secret/collaborators/eve", undefined, 404, 404],
      ["PATCH", "/repos/alice/secret", { private: false }, 404, 404],
      ["PATCH", "/repos/alice/app", { private: true }, 403, 401],
      ["PATCH", "/repos/alice/app/pulls/1", { title: "x" }, 403, 401],
      ["PUT", "/repos/alice/app/pulls/2/merge", undefined, 403, 401],
      ["POST", "/repos/alice/app/stacks/1/unstack", undefined, 403, 401],
      ["POST", "/repos/alice/app/git/refs", { ref: "refs/heads/z", sha: SHA }, 403, 401],
      ["DELETE", "/repos/alice/app/git/refs/heads/b", undefined, 403, 401],
      ["GET", "/repos/alice/app/hooks", undefined, 403, 401],
      ["POST", "/repos/alice/app/hooks", { config: { url: "https://x.example/" } }, 403, 401],
      ["PUT", "/repos/alice/app/collaborators/eve", undefined, 403, 401],
    ];
    const wrong: string[] = [];
    for (const [method, path, body, eveWants, anonWants] of cases) {
      const e = await asEve(method, path, body);
      const a = await anon(method, path, body);
      if (e.status !== eveWants || a.status !== anonWants) {
        wrong.push(`${method} ${path}: eve ${e.status}, anonymous ${a.status}`);
      }
      for (const r of [e, a]) {
        if (JSON.stringify(r.json).includes('"title"')) wrong.push(`${method} ${path} leaks data`);
      }
    }
    assert.deepEqual(wrong, []);
    const pulls = await t.as("alice")("GET", "/repos/alice/app/pulls/1");
    assert.equal(pulls.json.title, "A", "nothing was changed");
    assert.equal(pulls.json.state, "open");
  } finally {
    await t.close();
  }
});

Deno.test("the database, its WAL and its shared memory are owner-only, in an owner-only directory", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-stacks-security-" });
  const db = join(dir, "new", "data", "stacks.db");
  const mode = async (p: string) => (await Deno.stat(p)).mode! & 0o777;
  try {
    const tok = await createToken(db, "alice");
    assert.equal(await mode(join(dir, "new")), 0o700);
    assert.equal(await mode(join(dir, "new", "data")), 0o700);
    assert.equal(await mode(db), 0o600);
    const s = await startStacksServer(db);
    try {
      assert.equal(
        (await apiCaller(s.url, tok)("POST", "/user/repos", { name: "app" })).status,
        201,
      );
      for (const f of [db, `${db}-wal`, `${db}-shm`]) assert.equal(await mode(f), 0o600, f);
    } finally {
      await s.stop();
    }
    // One that others can already read is used, with a warning that says how to fix it.
    await Deno.chmod(db, 0o644);
    const r = await runForgekit(["stacks", "token", "create", "--user", "bob", "--db", db]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /^warning: .*stacks\.db is readable by other users.*\(run: chmod 600 /);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("text in a request cannot forge or colour a line of the server's log", async () => {
  const t = await setup({ extra: ["--busy-timeout-ms", "0"] });
  const holder = new DatabaseSync(t.db);
  holder.exec("PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE");
  try {
    // Up a line and erase it (ESC[1A ESC[2K), a next-line control (U+0085), then a fake line.
    const forged = "x%1B[1A%1B[2K%C2%85forgekit%20stacks:%20FORGED";
    const r = await t.as("alice")("DELETE", `/repos/alice/app/git/refs/heads/${forged}`);
    assert.equal(r.status, 503, JSON.stringify(r.json));
  } finally {
    holder.exec("ROLLBACK");
    holder.close();
    await t.close();
  }
  const log = t.server.stderr();
  assert.match(
    log,
    /DELETE \/repos\/alice\/app\/git\/refs\/heads\/x\\x1b\[1A\\x1b\[2K\\x85forgekit/,
  );
  assert.ok(
    !log.includes("\x1b") && !log.includes("\x85"),
    "no control character reaches the terminal",
  );
});

Deno.test("one account cannot make one change cost without bound: at most 20 hooks, bounded titles, bodies and branch names", async () => {
  const t = await setup();
  try {
    const alice = t.as("alice");
    const ids: number[] = [];
    for (let i = 0; i < 20; i++) {
      const h = await alice("POST", "/repos/alice/app/hooks", {
        config: { url: `http://127.0.0.1:9/${i}` },
        events: ["pull_request"],
      });
      assert.equal(h.status, 201);
      ids.push(h.json.id);
    }
    const extra = await alice("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/21" },
    });
    assert.equal(extra.status, 422, JSON.stringify(extra.json));
    assert.match(extra.json.errors[0].message, /at most 20 hooks/);
    const events = await alice("PATCH", `/repos/alice/app/hooks/${ids[0]}`, {
      events: Array(1000).fill("pull_request"),
    });
    assert.equal(events.status, 422);

    await alice("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/c", sha: SHA });
    const pull = (body: Record<string, unknown>) =>
      alice("POST", "/repos/alice/app/pulls", { head: "c", base: "main", title: "t", ...body });
    for (
      const [body, field] of [
        [{ title: "t".repeat(257) }, "title"],
        [{ body: "b".repeat(65_537) }, "body"],
      ] as const
    ) {
      const r = await pull(body);
      assert.equal(r.status, 422, JSON.stringify(r.json).slice(0, 200));
      assert.equal(r.json.errors[0].field, field);
      assert.match(r.json.errors[0].message, /too long \(maximum is \d+ characters\)/);
    }
    const p = await pull({ title: "t".repeat(256), body: "b".repeat(65_536) });
    assert.equal(p.status, 201, "the limits themselves are allowed");
    const long = await alice("PATCH", `/repos/alice/app/pulls/${p.json.number}`, {
      body: "b".repeat(65_537),
    });
    assert.equal(long.status, 422);
    const ref = await alice("POST", "/repos/alice/app/git/refs", {
      ref: `refs/heads/${"r".repeat(256)}`,
      sha: SHA,
    });
    assert.equal(ref.status, 422);
  } finally {
    await t.close();
  }
});

Deno.test("query parameters are never echoed raw into the Link header", async () => {
  const t = await setup();
  try {
    const res = await fetch(
      `${t.server.url}/repos/alice/app/pulls?state=all&per_page=1&x=%0D%0ASet-Cookie:%20a=b&y=%3E;%20rel=%22evil%22,%3Chttp://evil.example/%3E`,
    );
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const link = res.headers.get("link") ?? "";
    assert.equal(res.headers.get("set-cookie"), null);
    assert.equal(link.split(", ").length, 2, link);
    assert.ok(!link.includes("evil.example/>"), link);
    assert.ok(
      link.split(", ").every((l) => /^<http:\/\/127\.0\.0\.1:\d+\/[^<>]*>; rel="\w+"$/.test(l)),
    );
  } finally {
    await t.close();
  }
});

Deno.test("with --public-url a request's Host header cannot point the URLs of others' webhook payloads elsewhere", async () => {
  const hits: string[] = [];
  const receiver = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const text = await req.text();
    if (req.headers.get("x-github-event") !== "ping") hits.push(text);
    return new Response("ok");
  });
  const t = await setup({ extra: ["--public-url", "https://forge.example.com"] });
  try {
    const hook = await t.as("alice")("POST", "/repos/alice/secret/hooks", {
      config: { url: `http://127.0.0.1:${receiver.addr.port}/hook`, content_type: "json" },
      events: ["pull_request"],
    });
    assert.equal(hook.status, 201);
    // bob, a collaborator, opens a pull request with a Host of his choosing (curl sends it as given).
    const tokens = { bob: await createToken(t.db, "bob") };
    const bob = apiCaller(t.server.url, tokens.bob);
    await bob("POST", "/repos/alice/secret/git/refs", { ref: "refs/heads/c", sha: SHA });
    const out = await new Deno.Command("curl", {
      args: [
        "-s",
        "-H",
        "Host: evil.example",
        "-H",
        `Authorization: token ${tokens.bob}`,
        "-d",
        JSON.stringify({ title: "C", head: "c", base: "main" }),
        `${t.server.url}/repos/alice/secret/pulls`,
      ],
      stdout: "piped",
    }).output();
    const created = JSON.parse(new TextDecoder().decode(out.stdout));
    assert.equal(
      created.url,
      `https://forge.example.com/repos/alice/secret/pulls/${created.number}`,
    );
    await until("the delivery", () => Promise.resolve(hits.length > 0));
    const payload = JSON.parse(hits[0]);
    assert.equal(payload.pull_request.url, created.url);
    assert.ok(!hits[0].includes("evil.example"), "no URL in the payload follows the Host header");
  } finally {
    await t.close();
    await receiver.shutdown();
  }
});

Deno.test("a --public-url that is not http(s)://HOST[:PORT] is a usage error", async () => {
  for (
    const bad of [
      "forge.example.com",
      "ftp://x.example",
      "https://x.example/api",
      "https://u:p@x.example",
    ]
  ) {
    const r = await runForgekit(["stacks", "serve", "--port", "0", "--public-url", bad]);
    assert.equal(r.code, 2, `${bad}: ${r.stderr}`);
    assert.match(r.stderr, /^error: --public-url must be http\(s\):\/\/HOST\[:PORT\] with no path/);
  }
});
