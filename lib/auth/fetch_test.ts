/**
 * authFetch against a real loopback server, in process: the reused request
 * templates never mix credentials, token variables are re-read, and the
 * caller's AbortSignal reaches fetch.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { type AuthEvent, authFetch } from "./fetch.ts";
import { parseAuthConfig } from "./config.ts";
import { fileBody } from "./file_body.ts";

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

Deno.test("onEvent reports each refused token, each entry without one and the last answer, as data", async () => {
  const { server, base } = startServer();
  Deno.env.delete("FETCH_TEST_TOKEN");
  try {
    const events: AuthEvent[] = [];
    const res = await authFetch(`${base}/e`, {}, {
      config: makeConfig(),
      onEvent: (e) => events.push(e),
    });
    assert.equal(await res.text(), "none");
    assert.deepEqual(events, [
      {
        kind: "answered",
        attempt: 1,
        entry: "providers[0] (codehost bearer)",
        status: 401,
        statusText: "Unauthorized",
      },
      {
        kind: "skipped",
        entry: "providers[1] (codehost bearer)",
        reason: "$FETCH_TEST_TOKEN is not set",
      },
      { kind: "answered", attempt: 2, entry: null, status: 200, statusText: "OK" },
    ]);
    assert.ok(!JSON.stringify(events).includes("refused"), "no token in the events");
  } finally {
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

Deno.test("a file body is read from disk again for each attempt and 307 hop, with its Content-Length", async () => {
  const seen: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    const body = new Uint8Array(await req.arrayBuffer());
    const sum = body.reduce((a, b) => a + b, 0);
    seen.push(
      `${path} ${req.headers.get("authorization") ?? "none"} length=${
        req.headers.get("content-length")
      } chunked=${req.headers.has("transfer-encoding")} got=${body.length} sum=${sum}`,
    );
    if (req.headers.get("authorization") === "Bearer refused") {
      return new Response("no", { status: 401 });
    }
    if (path === "/up") return new Response(null, { status: 307, headers: { location: "/moved" } });
    return new Response("stored");
  });
  const dir = await Deno.makeTempDir();
  try {
    const file = join(dir, "payload.bin");
    const bytes = new Uint8Array(700_000).map((_, i) => i % 251);
    await Deno.writeFile(file, bytes);
    const sum = bytes.reduce((a, b) => a + b, 0);
    let reads = 0;
    const body = await fileBody(file, { onRead: () => reads++ });
    Deno.env.set("FETCH_TEST_TOKEN", "good");
    const res = await authFetch(`http://127.0.0.1:${server.addr.port}/up`, {
      method: "PUT",
      body,
    }, { config: makeConfig() });
    assert.equal(await res.text(), "stored");
    const sent = `length=700000 chunked=false got=700000 sum=${sum}`;
    assert.deepEqual(seen, [
      `/up Bearer refused ${sent}`,
      `/up Bearer good ${sent}`,
      `/moved Bearer good ${sent}`,
    ]);
    assert.ok(reads >= 3, `the file was read for each request (${reads} reads)`);
  } finally {
    Deno.env.delete("FETCH_TEST_TOKEN");
    await server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});
