/**
 * An audit of the `forgekit stack` client as a person at a terminal and a CI
 * job use it: the real program against a real `forgekit stacks serve` on
 * loopback (real SQLite), and, for answers no forgekit server gives (rate
 * limits, HTML, endless bodies), a small server of the test's own.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runForgekit } from "./support/cli.ts";
import {
  apiCaller,
  clientEnv,
  createToken,
  type StacksServer,
  startStacksServer,
} from "./support/stacks_server.ts";

const SHA = "1".repeat(40);

/** What a terminal could take as a command: C0/C1 controls, DEL, line separators, bidi overrides. */
// deno-lint-ignore no-control-regex
const UNSAFE = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

interface Forge {
  dir: string;
  server: StacksServer;
  token: string;
  call: ReturnType<typeof apiCaller>;
  env: Record<string, string>;
}

/** A real server on a fresh database, alice's token, and an environment whose auth.json sends it. */
async function withForge(name: string, fn: (f: Forge) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: `forgekit-${name}-` });
  const db = join(dir, "stacks.db");
  const token = await createToken(db, "alice");
  const server = await startStacksServer(db);
  try {
    const env = await clientEnv(dir, server.url, token);
    await fn({ dir, server, token, call: apiCaller(server.url, token), env });
  } finally {
    await server.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Creates alice's repository `name` with branches and a chain of pull requests `[title, head]`, the first on `base`. */
async function chain(
  call: Forge["call"],
  name: string,
  pulls: [string, string][],
  options: { base?: string; private?: boolean } = {},
): Promise<void> {
  const repo = await call("POST", "/user/repos", {
    name,
    private: options.private ?? false,
    allow_stacked_pull_requests: true,
  });
  assert.equal(repo.status, 201, JSON.stringify(repo.json));
  let base = options.base ?? "main";
  const branches = base === "main" ? [] : [base];
  for (const [, head] of pulls) branches.push(head);
  for (const b of branches) {
    const r = await call("POST", `/repos/alice/${name}/git/refs`, {
      ref: `refs/heads/${b}`,
      sha: SHA,
    });
    assert.equal(r.status, 201, JSON.stringify(r.json));
  }
  for (const [title, head] of pulls) {
    const r = await call("POST", `/repos/alice/${name}/pulls`, { title, head, base });
    assert.equal(r.status, 201, JSON.stringify(r.json));
    base = head;
  }
}

/** A loopback server of the test's own, answering every request with `answer`. */
function fakeApi(answer: (req: Request) => Response | Promise<Response>) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, answer);
  return { url: `http://127.0.0.1:${server.addr.port}`, stop: () => server.shutdown() };
}

Deno.test("stack view and list write control characters of titles and branch names escaped, and --json keeps them exact", async () => {
  await withForge("audit-controls", async ({ call, env }) => {
    const evil = "F\x1b[2J\x1b[31mEVIL\rover\nnext\u009b1m\u202eRTL";
    const kind = "G ✓ ünïcode 日本";
    const head = "fix/ünï\u202etxt";
    const base = "rel\u202eX";
    await chain(call, "app", [[evil, head], [kind, "g"]], { base });
    const fk = (args: string[]) => runForgekit(["stack", ...args, "--repo", "alice/app"], { env });

    const created = await fk(["create", "1", "2"]);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, "created stack #1  open    on rel\\u202eX  2 PRs: #1 #2\n");

    const view = await fk(["view", "1"]);
    assert.equal(view.code, 0, view.stderr);
    assert.equal(
      view.stdout,
      "stack #1 open, 2 pull requests\nrel\\u202eX\n" +
        "└─ #1 [open] F\\x1b[2J\\x1b[31mEVIL\\x0dover\\x0anext\\x9b1m\\u202eRTL (fix/ünï\\u202etxt)\n" +
        "   └─ #2 [open] G ✓ ünïcode 日本 (g)\n",
    );

    const list = await fk(["list"]);
    assert.equal(list.code, 0, list.stderr);
    assert.equal(list.stdout, "#1  open    on rel\\u202eX  2 PRs: #1 #2\n");

    // --json: the server's values, exactly, in JSON that a terminal can show safely too.
    const json = await fk(["view", "1", "--json"]);
    assert.equal(json.code, 0, json.stderr);
    assert.ok(!UNSAFE.test(json.stdout.replaceAll("\n", "")), JSON.stringify(json.stdout));
    const got = JSON.parse(json.stdout);
    assert.deepEqual(got.pull_requests.map((p: { title: string }) => p.title), [evil, kind]);
    assert.equal(got.pull_requests[0].head.ref, head);
    assert.equal(got.base.ref, base);
    const listed = await fk(["list", "--json"]);
    assert.ok(!UNSAFE.test(listed.stdout.replaceAll("\n", "")), JSON.stringify(listed.stdout));
    assert.equal(JSON.parse(listed.stdout)[0].base.ref, base);
  });
});

Deno.test("API error messages holding control characters are printed escaped, on one line", async () => {
  const api = fakeApi(() =>
    Response.json({
      message: "Bad\x1b[2J\rthing\u009b31m",
      errors: ["x\x1b]0;title\x07", { message: "y\u202ez" }],
    }, { status: 422 })
  );
  try {
    const r = await runForgekit([
      "stack",
      "create",
      "1",
      "2",
      "--repo",
      "o/r",
      "--api-url",
      api.url,
    ]);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: Bad\\x1b[2J\\x0dthing\\x9b31m: x\\x1b]0;title\\x07; y\\u202ez (POST ${api.url}/repos/o/r/stacks returned 422)\n`,
    );
  } finally {
    await api.stop();
  }
});

Deno.test("a response body past 64 MiB is refused as not the API's, without reading the rest", async () => {
  const MiB = 1 << 20;
  let sent = 0;
  const chunk = new TextEncoder().encode(" ".repeat(MiB));
  const api = fakeApi(() =>
    new Response(
      new ReadableStream({
        pull(c) {
          if (sent >= 200 * MiB) return c.close();
          sent += chunk.length;
          c.enqueue(chunk);
        },
      }),
      { headers: { "content-type": "application/json" } },
    )
  );
  try {
    const r = await runForgekit(["stack", "list", "--repo", "o/r", "--api-url", api.url]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, "");
    assert.match(
      r.stderr,
      new RegExp(
        `^error: GET ${api.url}/repos/o/r/stacks\\?per_page=100&page=1 returned more than 64 MiB \\(check --api-url: .*\\)\\n$`,
      ),
    );
    assert.ok(sent < 150 * MiB, `the client read ${sent / MiB} MiB`);
  } finally {
    await api.stop();
  }
});

Deno.test("stack view asks for its pull requests' titles at most 8 at a time", async () => {
  await withForge("audit-view-many", async ({ call, server, dir, token }) => {
    const n = 40;
    await chain(call, "app", Array.from({ length: n }, (_, i) => [`T${i + 1}`, `b${i + 1}`]));
    const made = await call("POST", "/repos/alice/app/stacks", {
      pull_requests: Array.from({ length: n }, (_, i) => i + 1),
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    // A pass-through proxy that holds each pull request a moment and counts those in flight.
    let inFlight = 0;
    let most = 0;
    const proxy = fakeApi(async (req) => {
      const u = new URL(req.url);
      const pull = /\/pulls\/\d+$/.test(u.pathname);
      if (pull) most = Math.max(most, ++inFlight);
      try {
        if (pull) await new Promise((r) => setTimeout(r, 30));
        const res = await fetch(`${server.url}${u.pathname}${u.search}`, { headers: req.headers });
        return new Response(await res.arrayBuffer(), { status: res.status, headers: res.headers });
      } finally {
        if (pull) inFlight--;
      }
    });
    try {
      const env = await clientEnv(dir, proxy.url, token);
      const r = await runForgekit(["stack", "view", "1", "--repo", "alice/app"], { env });
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stdout.trimEnd().split("\n");
      assert.equal(lines.length, n + 2);
      assert.match(lines.at(-1)!, /└─ #40 \[open\] T40 \(b40\)$/);
      assert.ok(most <= 8, `${most} pull requests were asked for at once`);
      assert.ok(most > 1, "still more than one at a time");
    } finally {
      await proxy.stop();
    }
  });
});

Deno.test("--api-url or FORGEKIT_API_URL with a query or fragment is a usage error, before any request", async () => {
  let requests = 0;
  const api = fakeApi(() => {
    requests++;
    return Response.json([]);
  });
  try {
    const cases: [string[], Record<string, string>, RegExp][] = [
      [["--api-url", `${api.url}/?x=1`], {}, /^error: --api-url must not have a query or fragment/],
      [["--api-url", `${api.url}/api/v3#top`], {}, /^error: --api-url must not have a query/],
      [["--api-url", `${api.url}/api/v3?`], {}, /^error: --api-url must not have a query/],
      [[], { FORGEKIT_API_URL: `${api.url}?` }, /^error: FORGEKIT_API_URL must not have a query/],
    ];
    for (const [extra, env, want] of cases) {
      const r = await runForgekit(["stack", "list", "--repo", "o/r", ...extra], { env });
      assert.equal(r.code, 2, `${extra} ${JSON.stringify(env)}: ${r.stderr}`);
      assert.match(r.stderr, want);
      assert.equal(r.stderr.split("\n").length, 2, r.stderr);
    }
    assert.equal(requests, 0);
  } finally {
    await api.stop();
  }
});

Deno.test("a client error whose body is not the API's JSON (a web page) says to check --api-url", async () => {
  const api = fakeApi(() =>
    new Response("<!DOCTYPE html><html><body>Page not found</body></html>", {
      status: 404,
      headers: { "content-type": "text/html" },
    })
  );
  try {
    const r = await runForgekit(["stack", "view", "3", "--repo", "o/r", "--api-url", api.url]);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `error: GET ${api.url}/repos/o/r/stacks/3 returned 404 Not Found with a body that is not the API's JSON (check --api-url: it must be the API base, e.g. https://api.github.com or https://HOST/api/v3)\n`,
    );
  } finally {
    await api.stop();
  }
});

Deno.test("a token the server refuses is named in the error, not hidden behind the unauthenticated retry", async () => {
  await withForge("audit-refused", async ({ call, dir, env, server }) => {
    await chain(call, "app", [["A", "a"], ["B", "b"]]);
    await chain(call, "secret", [["A", "a"], ["B", "b"]], { private: true });
    for (const repo of ["app", "secret"]) {
      const s = await call("POST", `/repos/alice/${repo}/stacks`, { pull_requests: [1, 2] });
      assert.equal(s.status, 201);
    }
    const bob = await createToken(join(dir, "stacks.db"), "bob");
    const revoked = `fks_${"0".repeat(60)}`;
    const fk = (args: string[], extra: Record<string, string> = {}) =>
      runForgekit(["stack", ...args], { env: { ...env, ...extra } });

    // A token the server does not know, on a private repository: 401, then 404 without it.
    const gone = await fk(["view", "1", "--repo", "alice/secret"], { STACKS_TOKEN: revoked });
    assert.equal(gone.code, 1);
    assert.equal(
      gone.stderr,
      `error: auth.json's token for 127.0.0.1 was refused: providers[0] (codehost bearer) got 401 Unauthorized; without it: Not Found (GET ${server.url}/repos/alice/secret/stacks/1 returned 404 without a token; check the token: it may have expired, or lack access to alice/secret; run: forgekit auth explain ${server.url}/repos/alice/secret/stacks/1)\n`,
    );
    // A valid token without the right to write: 403, then 401 without it.
    const denied = await fk(["unstack", "1", "--repo", "alice/app"], { STACKS_TOKEN: bob });
    assert.equal(denied.code, 1);
    assert.match(
      denied.stderr,
      /^error: auth\.json's token for 127\.0\.0\.1 was refused: providers\[0\] \(codehost bearer\) got 403 Forbidden; without it: Requires authentication \(POST .*\/stacks\/1\/unstack returned 401 without a token; check the token: it may have expired, or lack access to alice\/app; run: forgekit auth explain /,
    );
    // No token at all (its variable unset): say so, beside the 404 of a private repository.
    const unset = await fk(["list", "--repo", "alice/secret"], { STACKS_TOKEN: "" });
    assert.equal(unset.code, 1);
    assert.equal(
      unset.stderr,
      `error: Not Found (GET ${server.url}/repos/alice/secret/stacks?per_page=100&page=1 returned 404; check --repo, and that the repository allows stacked pull requests; a private repository is 404 without a token, and none was sent: providers[0] (codehost bearer) has no token: $STACKS_TOKEN is not set)\n`,
    );
    // No auth.json entry for the host: a write says a token is needed and where it goes.
    const none = await fk(["unstack", "1", "--repo", "alice/app"], {
      FORGEKIT_AUTH_FILE: join(dir, "missing.json"),
    });
    assert.equal(none.code, 1);
    assert.equal(
      none.stderr,
      `error: Requires authentication (POST ${server.url}/repos/alice/app/stacks/1/unstack returned 401; check the token: none was sent, as auth.json has no entry for 127.0.0.1; run: forgekit auth explain ${server.url}/repos/alice/app/stacks/1/unstack)\n`,
    );
    // A public repository answers without the token: the answer is shown, with a warning, once.
    const pub = await fk(["view", "1", "--repo", "alice/app"], { STACKS_TOKEN: revoked });
    assert.equal(pub.code, 0, pub.stderr);
    assert.match(pub.stdout, /^stack #1 open/);
    assert.equal(
      pub.stderr,
      // The host as auth.json names it (and as the error above does): without the port.
      `warning: auth.json's token for 127.0.0.1 was refused (providers[0] (codehost bearer) got 401 Unauthorized); answered without it (check the token; run: forgekit auth explain ${server.url}/repos/alice/app/stacks/1)\n`,
    );
    for (const r of [gone, denied, unset, none, pub]) {
      if (r !== pub) assert.equal(r.stdout, "");
      assert.ok(!r.stderr.includes(revoked) && !r.stderr.includes(bob), r.stderr);
    }
    // The stack is untouched by all of the above.
    assert.equal((await call("GET", "/repos/alice/app/stacks/1")).json.pull_requests.length, 2);
  });
});

Deno.test("a rate-limited answer says when to try again, not to check the token", async () => {
  const api = fakeApi((req) => {
    if (new URL(req.url).pathname.endsWith("/stacks/1")) {
      return Response.json({ message: "API rate limit exceeded for 127.0.0.1." }, {
        status: 403,
        headers: { "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1900000000" },
      });
    }
    return Response.json({ message: "You have exceeded a secondary rate limit." }, {
      status: 429,
      headers: { "retry-after": "30" },
    });
  });
  try {
    const primary = await runForgekit([
      "stack",
      "view",
      "1",
      "--repo",
      "o/r",
      "--api-url",
      api.url,
    ]);
    assert.equal(primary.code, 1);
    assert.equal(
      primary.stderr,
      `error: API rate limit exceeded for 127.0.0.1. (GET ${api.url}/repos/o/r/stacks/1 returned 403; rate limited: try again after 2030-03-17T17:46:40Z)\n`,
    );
    const secondary = await runForgekit(["stack", "list", "--repo", "o/r", "--api-url", api.url]);
    assert.equal(secondary.code, 1);
    assert.equal(
      secondary.stderr,
      `error: You have exceeded a secondary rate limit. (GET ${api.url}/repos/o/r/stacks?per_page=100&page=1 returned 429; rate limited: try again in 30 s)\n`,
    );
  } finally {
    await api.stop();
  }
});

Deno.test("a stack left with one pull request is listed as 1 PR", async () => {
  await withForge("audit-one", async ({ call, env }) => {
    await chain(call, "app", [["A", "a"], ["B", "b"]]);
    assert.equal(
      (await call("POST", "/repos/alice/app/stacks", { pull_requests: [1, 2] })).status,
      201,
    );
    assert.equal((await call("PUT", "/repos/alice/app/pulls/1/merge")).status, 200);
    const fk = (args: string[]) => runForgekit(["stack", ...args, "--repo", "alice/app"], { env });
    const un = await fk(["unstack", "1"]);
    assert.equal(un.code, 0, un.stderr);
    assert.equal(
      un.stdout,
      "stack #1 keeps its merged pull requests: #1  closed  on main  1 PR: #1\n",
    );
    assert.equal((await fk(["list"])).stdout, "#1  closed  on main  1 PR: #1\n");
  });
});

Deno.test("stack create with one pull request is a usage error, before any request", async () => {
  let requests = 0;
  const api = fakeApi(() => {
    requests++;
    return Response.json({}, { status: 422 });
  });
  try {
    const r = await runForgekit(["stack", "create", "#5", "--repo", "o/r", "--api-url", api.url]);
    assert.equal(r.code, 2, r.stderr);
    assert.equal(
      r.stderr,
      "error: A stack needs at least two pull requests (got one: #5) " +
        "(e.g. forgekit stack create 12 13 14 --repo o/r (bottom to top))\n",
    );
    assert.equal(requests, 0);
  } finally {
    await api.stop();
  }
});

Deno.test("--timeout below a millisecond is a usage error, not a timeout of every request", async () => {
  await withForge("audit-timeout", async ({ env }) => {
    const r = await runForgekit(["stack", "list", "--repo", "alice/app", "--timeout", "0.0001"], {
      env,
    });
    assert.equal(r.code, 2, r.stderr);
    assert.equal(
      r.stderr,
      "error: --timeout must be a number of seconds from 0.001 to 86400 (got: 0.0001) (e.g. --timeout 60)\n",
    );
    // A fraction is taken; not so small that a slow machine's first request misses it.
    const ok = await runForgekit(["stack", "list", "--repo", "alice/app", "--timeout", "2.5"], {
      env,
    });
    assert.equal(ok.code, 1, ok.stderr); // alice has no repository "app" here: the server answered
    assert.match(ok.stderr, /^error: Not Found \(GET .* returned 404; check --repo, and that/);
  });
});
