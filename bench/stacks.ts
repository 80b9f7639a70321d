/**
 * `deno task bench:stacks`: request rates of the stacks server against a bare
 * Deno.serve returning a JSON body of the same size, in one run; stack
 * creations per second; and the stack-list rate with 100 and 10,000 stacks.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createApp, hashToken, openSqliteStore } from "../lib/stacks/mod.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 3);
const CONCURRENCY = 16;
const LOAD = fileURLToPath(new URL("./load.ts", import.meta.url));
const TOKEN = "bench-token";
const auth = { authorization: `Bearer ${TOKEN}` };

async function load(url: string): Promise<number> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LOAD, url, String(SECONDS), String(CONCURRENCY), JSON.stringify(auth)],
    stdout: "piped",
  }).output();
  const r = JSON.parse(new TextDecoder().decode(out.stdout));
  if (r.errors) throw new Error(`${r.errors} errors loading ${url}`);
  return r.rps;
}

const dir = await Deno.makeTempDir({ prefix: "forgekit-bench-stacks-" });
const store = openSqliteStore(join(dir, "stacks.db"));
const app = createApp({ store });
const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, app.fetch);
const base = `http://127.0.0.1:${server.addr.port}`;
// The same store without the response cache: what a read costs when the data just changed.
const uncachedServer = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  createApp({ store, cache: false }).fetch,
);
const uncached = `http://127.0.0.1:${uncachedServer.addr.port}`;
const call = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: auth,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json().catch(() => null);
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
};

await store.transaction(async () => {
  const u = await store.ensureUser("o");
  await store.addToken(u.id, hashToken(TOKEN));
});

/** Makes `count` stacks of two pull requests each in a new repository. */
async function seedRepo(name: string, stacks: number, viaApi = false): Promise<number> {
  await call("POST", "/user/repos", { name, allow_stacked_pull_requests: true });
  const repo = (await store.getRepo("o", name))!;
  const t0 = performance.now();
  for (let i = 0; i < stacks; i++) {
    if (viaApi) {
      await call("POST", `/repos/o/${name}/git/refs`, {
        ref: `refs/heads/a${i}`,
        sha: "a".repeat(40),
      });
      await call("POST", `/repos/o/${name}/git/refs`, {
        ref: `refs/heads/b${i}`,
        sha: "b".repeat(40),
      });
      const p1 = await call("POST", `/repos/o/${name}/pulls`, {
        title: `a${i}`,
        head: `a${i}`,
        base: "main",
      });
      const p2 = await call("POST", `/repos/o/${name}/pulls`, {
        title: `b${i}`,
        head: `b${i}`,
        base: `a${i}`,
      });
      await call("POST", `/repos/o/${name}/stacks`, { pull_requests: [p1.number, p2.number] });
    } else {
      await store.transaction(async () => {
        await store.putBranch(repo.id, `a${i}`, "a".repeat(40));
        await store.putBranch(repo.id, `b${i}`, "b".repeat(40));
        const p1 = await store.insertPull({
          repo_id: repo.id,
          user_id: 1,
          title: `a${i}`,
          body: null,
          draft: false,
          head_ref: `a${i}`,
          head_sha: "a".repeat(40),
          base_ref: "main",
        });
        const p2 = await store.insertPull({
          repo_id: repo.id,
          user_id: 1,
          title: `b${i}`,
          body: null,
          draft: false,
          head_ref: `b${i}`,
          head_sha: "b".repeat(40),
          base_ref: `a${i}`,
        });
        const s = await store.insertStack(repo.id, "main");
        await store.updatePull(p1.id, { stack_id: s.id, stack_position: 1 });
        await store.updatePull(p2.id, { stack_id: s.id, stack_position: 2 });
      });
    }
  }
  return stacks / ((performance.now() - t0) / 1000);
}

const createRate = await seedRepo("r", 100, true);
await seedRepo("big", 10_000);

const pullsBody = await (await fetch(`${base}/repos/o/r/pulls?per_page=100`, { headers: auth }))
  .text();
const stackBody = await (await fetch(`${base}/repos/o/r/stacks/50`, { headers: auth })).text();
const bare = (body: string) =>
  Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(body, { headers: { "content-type": "application/json" } }),
  );
const barePulls = bare(pullsBody);
const bareStack = bare(stackBody);

const lines: string[] = [];
const ratio = async (label: string, path: string, bareUrl: string) => {
  const ours = await load(`${base}${path}`);
  const cold = await load(`${uncached}${path}`);
  const theirs = await load(bareUrl);
  lines.push(
    `${label}: ${ours.toFixed(0)} req/s vs bare Deno.serve ${theirs.toFixed(0)} req/s = ` +
      `${(ours / theirs).toFixed(2)} (uncached: ${cold.toFixed(0)} req/s = ${
        (cold / theirs).toFixed(2)
      })`,
  );
};
await ratio(
  `GET /repos/o/r/pulls?per_page=100 (${(pullsBody.length / 1024).toFixed(0)} KiB)`,
  "/repos/o/r/pulls?per_page=100",
  `http://127.0.0.1:${barePulls.addr.port}/`,
);
await ratio(
  "GET /repos/o/r/stacks/50",
  "/repos/o/r/stacks/50",
  `http://127.0.0.1:${bareStack.addr.port}/`,
);
const small = await load(`${uncached}/repos/o/r/stacks?per_page=30`);
const big = await load(`${uncached}/repos/o/big/stacks?per_page=30`);
lines.push(
  `GET …/stacks?per_page=30 (uncached): ${small.toFixed(0)} req/s with 100 stacks, ${
    big.toFixed(0)
  } req/s with 10,000 stacks = ${(big / small).toFixed(2)}`,
);
lines.push(
  `stack creations (refs + 2 PRs + stack over HTTP, sequential): ${createRate.toFixed(0)} stacks/s`,
);
lines.push(
  `(${SECONDS} s per figure, ${CONCURRENCY} concurrent keep-alive clients in a separate process, loopback, SQLite WAL)`,
);
console.log(lines.join("\n"));

await barePulls.shutdown();
await bareStack.shutdown();
await server.shutdown();
await uncachedServer.shutdown();
await store.close();
await Deno.remove(dir, { recursive: true });
