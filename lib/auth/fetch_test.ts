/**
 * authFetch against a real loopback server, in process: the reused request
 * templates never mix credentials, token variables are re-read, and the
 * caller's AbortSignal reaches fetch.
 */
import assert from "node:assert/strict";
import { authFetch } from "./fetch.ts";
import { parseAuthConfig } from "./config.ts";

function startServer() {
  const seen: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const auth = req.headers.get("authorization") ?? "none";
    seen.push(`${new URL(req.url).pathname} ${auth} ${req.headers.get("x-extra") ?? ""}`.trim());
    if (new URL(req.url).pathname === "/slow") {
      await new Promise((r) => setTimeout(r, 3000));
      return new Response("late");
    }
    if (auth === "Bearer refused") return new Response("no", { status: 401 });
    return new Response(auth);
  });
  return { server, seen, base: `http://127.0.0.1:${server.addr.port}` };
}

/** A fresh config: its entries carry their own token cache. */
const makeConfig = () =>
  parseAuthConfig(
    JSON.stringify({
      providers: [
        { hosts: ["127.0.0.1"], provider: "codehost", auth: "bearer", token: "refused" },
        {
          hosts: ["127.0.0.1"],
          provider: "codehost",
          auth: "bearer",
          token_env: "FETCH_TEST_TOKEN",
        },
      ],
    }),
    "auth.json",
  );

Deno.test("repeated requests keep the fallback order and never mix credentials", async () => {
  const { server, seen, base } = startServer();
  const config = makeConfig();
  Deno.env.set("FETCH_TEST_TOKEN", "good");
  try {
    for (let i = 0; i < 3; i++) {
      const res = await authFetch(`${base}/a`, {}, { config });
      assert.equal(await res.text(), "Bearer good");
    }
    const extra = await authFetch(`${base}/a`, { headers: { "X-Extra": "1" } }, { config });
    assert.equal(await extra.text(), "Bearer good");
    const own = await authFetch(`${base}/a`, { headers: { authorization: "Bearer mine" } }, {
      config,
    });
    assert.equal(await own.text(), "Bearer mine");
    const none = await authFetch(`${base}/a`, {}, { config: null });
    assert.equal(await none.text(), "none");
    assert.deepEqual(seen, [
      "/a Bearer refused",
      "/a Bearer good",
      "/a Bearer refused",
      "/a Bearer good",
      "/a Bearer refused",
      "/a Bearer good",
      "/a Bearer refused 1",
      "/a Bearer good 1",
      "/a Bearer mine",
      "/a none",
    ]);
  } finally {
    Deno.env.delete("FETCH_TEST_TOKEN");
    await server.shutdown();
  }
});

Deno.test("a changed token variable is used within half a second", async () => {
  const { server, base } = startServer();
  const config = makeConfig();
  Deno.env.set("FETCH_TEST_TOKEN", "first");
  try {
    assert.equal(await (await authFetch(`${base}/b`, {}, { config })).text(), "Bearer first");
    Deno.env.set("FETCH_TEST_TOKEN", "second");
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(await (await authFetch(`${base}/b`, {}, { config })).text(), "Bearer second");
    Deno.env.delete("FETCH_TEST_TOKEN");
    await new Promise((r) => setTimeout(r, 600));
    // Only the refused entry is left, then the unauthenticated request.
    assert.equal(await (await authFetch(`${base}/b`, {}, { config })).text(), "none");
  } finally {
    Deno.env.delete("FETCH_TEST_TOKEN");
    await server.shutdown();
  }
});

Deno.test("the caller's AbortSignal reaches fetch", async () => {
  const { server, base } = startServer();
  try {
    const t0 = performance.now();
    await assert.rejects(
      authFetch(`${base}/slow`, { signal: AbortSignal.timeout(150) }, { config: null }),
      (err: Error) => err.name === "TimeoutError",
    );
    assert.ok(performance.now() - t0 < 2000, "the request was not aborted");
  } finally {
    await server.shutdown();
  }
});
