/**
 * Webhooks as a receiver sees them, against GitHub's documented behaviour:
 * the real server process on loopback, a real SQLite file, and a Python
 * receiver (`http.server`) that checks `X-Hub-Signature-256` with
 * `hmac.compare_digest`, as a Flask handler would.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  apiCaller,
  type ApiReply,
  createToken,
  type StacksServer,
  startStacksServer,
} from "./support/stacks_server.ts";

const SHA = (c: string) => c.repeat(40);

/**
 * The receiver: answers `/status/NNN` with NNN and anything else with 200,
 * and prints one JSON line per request: its path, headers, whether each
 * signature verified, and the payload (the JSON itself, or a form's
 * `payload` field).
 */
const RECEIVER_PY = String.raw`
import hashlib, hmac, json, sys, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = sys.argv[1].encode()
PRINTING = threading.Lock()  # lines longer than a pipe's buffer would interleave

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        def verified(name, algo):
            sent = self.headers.get(name)
            want = algo + "=" + hmac.new(SECRET, body, getattr(hashlib, algo)).hexdigest()
            return sent is not None and hmac.compare_digest(sent, want)
        if self.headers.get("Content-Type") == "application/x-www-form-urlencoded":
            text = urllib.parse.parse_qs(body.decode())["payload"][0]
        else:
            text = body.decode()
        line = json.dumps({
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "sha256_ok": verified("X-Hub-Signature-256", "sha256"),
            "sha1_ok": verified("X-Hub-Signature", "sha1"),
            "payload": json.loads(text),
        })
        with PRINTING:
            print(line, flush=True)
        status = int(self.path.split("/")[2]) if self.path.startswith("/status/") else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
print(server.server_address[1], flush=True)
server.serve_forever()
`;
import { until } from "./support/until.ts";

interface Hit {
  path: string;
  headers: Record<string, string>;
  sha256_ok: boolean;
  sha1_ok: boolean;
  // deno-lint-ignore no-explicit-any -- payloads are read freely
  payload: any;
}

/** Starts the Python receiver, which verifies signatures with `secret`. */
async function pythonReceiver(secret: string) {
  const child = new Deno.Command("python3", {
    args: ["-c", RECEIVER_PY, secret],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const hits: Hit[] = [];
  let buf = "";
  let port = 0;
  const ready = Promise.withResolvers<void>();
  const reading = (async () => {
    for (;;) {
      const { value, done } = await lines.read();
      if (done) break;
      buf += value;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (port === 0) {
          port = Number(line);
          ready.resolve();
        } else hits.push(JSON.parse(line));
      }
    }
    ready.reject(new Error("the Python receiver exited before listening"));
  })();
  await ready.promise;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    async close() {
      child.kill("SIGTERM");
      await child.status;
      await reading;
    },
  };
}

/** A server (retries after 100 ms) with alice's repository `app` and a branch `b1`. */
async function setup() {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-webhooks-audit-" });
  const db = join(dir, "stacks.db");
  const tok = await createToken(db, "alice");
  const server: StacksServer = await startStacksServer(db, ["--hook-backoff-ms", "100"]);
  const call = apiCaller(server.url, tok);
  assert.equal((await call("POST", "/user/repos", { name: "app" })).status, 201);
  await call("POST", "/repos/alice/app/git/refs", { ref: "refs/heads/b1", sha: SHA("1") });
  return {
    call,
    async hook(config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
      const h = await call("POST", "/repos/alice/app/hooks", {
        config,
        events: ["pull_request"],
        ...extra,
      });
      assert.equal(h.status, 201, JSON.stringify(h.json));
      return h;
    },
    async deliveries(id: number, query = ""): Promise<ApiReply> {
      return await call("GET", `/repos/alice/app/hooks/${id}/deliveries${query}`);
    },
    async close() {
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("POST …/hooks/{id}/pings is 204 and sends a signed ping with zen, hook_id and the hook, secret masked", async () => {
  const t = await setup();
  const r = await pythonReceiver("s3cret");
  try {
    const h = await t.hook({ url: `${r.url}/hook`, secret: "s3cret", content_type: "json" });
    const ping = await t.call("POST", `/repos/alice/app/hooks/${h.json.id}/pings`);
    assert.equal(ping.status, 204, JSON.stringify(ping.json));
    await until("the ping", () => r.hits.some((x) => x.headers["x-github-event"] === "ping"));
    const hit = r.hits.find((x) => x.headers["x-github-event"] === "ping")!;
    assert.ok(hit.sha256_ok && hit.sha1_ok, "both signatures verify");
    assert.equal(hit.headers["x-github-hook-id"], String(h.json.id));
    assert.equal(typeof hit.payload.zen, "string");
    assert.equal(hit.payload.hook_id, h.json.id);
    assert.equal(hit.payload.hook.id, h.json.id);
    assert.equal(hit.payload.hook.type, "Repository");
    assert.equal(hit.payload.hook.config.secret, "********");
    assert.equal(hit.payload.hook.config.url, `${r.url}/hook`);
    assert.deepEqual(hit.payload.hook.events, ["pull_request"]);
    assert.equal(hit.payload.repository.full_name, "alice/app");
    assert.equal(hit.payload.sender.login, "alice");
    assert.ok(!JSON.stringify(hit.payload).includes("s3cret"), "the secret is not in the payload");
    // Listed like any delivery, as event "ping" without an action.
    const [d] = (await t.deliveries(h.json.id)).json;
    assert.deepEqual([d.event, d.action], ["ping", null]);
    // An unknown hook, or another repository's, is 404.
    assert.equal((await t.call("POST", "/repos/alice/app/hooks/999999/pings")).status, 404);
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("POST …/hooks/{id}/tests is 204 and sends nothing: the server has no push to test with", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    const h = await t.hook({ url: `${r.url}/hook` }, { events: ["push", "pull_request"] });
    assert.equal(h.json.test_url.endsWith(`/hooks/${h.json.id}/test`), true);
    const before = (await t.deliveries(h.json.id)).json.length;
    const test = await t.call("POST", `/repos/alice/app/hooks/${h.json.id}/tests`);
    assert.equal(test.status, 204, JSON.stringify(test.json));
    // The hook's own test_url (GitHub's older path, /test) answers the same.
    assert.equal((await t.call("POST", new URL(h.json.test_url).pathname)).status, 204);
    assert.equal((await t.deliveries(h.json.id)).json.length, before, "nothing was queued");
    assert.equal((await t.call("POST", "/repos/alice/app/hooks/999999/tests")).status, 404);
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("a hook shows last_response: unused until an attempt, then the receiver's latest answer", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    const ok = await t.hook({ url: `${r.url}/hook`, content_type: "json" });
    const failing = await t.hook({ url: `${r.url}/status/500`, content_type: "json" });
    for (const h of [ok, failing]) {
      assert.deepEqual(h.json.last_response, { code: null, status: "unused", message: null });
    }
    await t.call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    const hook = async (id: number) => (await t.call("GET", `/repos/alice/app/hooks/${id}`)).json;
    await until("both attempts", async () => (await hook(failing.json.id)).last_response.code);
    await until("the good one", async () => (await hook(ok.json.id)).last_response.code);
    assert.deepEqual((await hook(ok.json.id)).last_response, {
      code: 200,
      status: "active",
      message: "OK",
    });
    assert.deepEqual((await hook(failing.json.id)).last_response, {
      code: 500,
      status: "failed",
      message: "Invalid HTTP Response: 500",
    });
    const listed = (await t.call("GET", "/repos/alice/app/hooks")).json;
    assert.deepEqual(listed.map((h: { last_response: { code: number } }) => h.last_response.code), [
      200,
      500,
    ]);
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test('config.insecure_ssl is kept as "0"; "1", which the server cannot honour, is 422 rather than dropped', async () => {
  const t = await setup();
  try {
    for (const value of ["0", 0]) {
      const h = await t.hook({ url: `http://127.0.0.1:9/${typeof value}`, insecure_ssl: value });
      assert.equal(h.json.config.insecure_ssl, "0");
    }
    const made = await t.hook({ url: "http://127.0.0.1:9/hook" });
    for (const value of ["1", 1, "yes", true, null]) {
      const create = await t.call("POST", "/repos/alice/app/hooks", {
        config: { url: "http://127.0.0.1:9/hook", insecure_ssl: value },
      });
      assert.equal(create.status, 422, `create with ${JSON.stringify(value)}`);
      assert.equal(create.json.errors[0].field, "insecure_ssl");
      const update = await t.call("PATCH", `/repos/alice/app/hooks/${made.json.id}`, {
        config: { insecure_ssl: value },
      });
      assert.equal(update.status, 422, `update with ${JSON.stringify(value)}`);
    }
    assert.equal((await t.call("GET", "/repos/alice/app/hooks")).json.length, 3);
  } finally {
    await t.close();
  }
});

Deno.test("a synchronize event says which commits the head moved from and to (before, after)", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    await t.hook({ url: `${r.url}/hook`, content_type: "json" });
    await t.call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    await t.call("PATCH", "/repos/alice/app/git/refs/heads/b1", { sha: SHA("2") });
    await until("synchronize", () => r.hits.some((x) => x.payload.action === "synchronize"));
    const sync = r.hits.find((x) => x.payload.action === "synchronize")!.payload;
    assert.equal(sync.before, SHA("1"));
    assert.equal(sync.after, SHA("2"));
    assert.equal(sync.pull_request.head.sha, SHA("2"));
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("the deliveries listing pages with page and sends Link, as every listing does", async () => {
  const t = await setup();
  try {
    const h = await t.hook({ url: "http://127.0.0.1:9/hook" });
    await t.call("POST", "/repos/alice/app/pulls", { title: "t0", head: "b1", base: "main" });
    for (let i = 1; i <= 4; i++) {
      await t.call("PATCH", "/repos/alice/app/pulls/1", { title: `t${i}` });
    }
    const all = (await t.deliveries(h.json.id)).json.map((d: { id: number }) => d.id);
    assert.equal(all.length, 6, "the ping and five events");
    const seen: number[] = [];
    let query = "?per_page=2";
    for (let i = 0; i < 5 && query; i++) {
      const page = await t.deliveries(h.json.id, query);
      assert.equal(page.status, 200);
      seen.push(...page.json.map((d: { id: number }) => d.id));
      const next = /<([^>]*)>; rel="next"/.exec(page.headers.get("link") ?? "");
      query = next ? new URL(next[1]).search : "";
    }
    assert.deepEqual(seen, all, "three pages, newest first, each delivery once");
    const second = await t.deliveries(h.json.id, "?per_page=2&page=2");
    assert.deepEqual(second.json.map((d: { id: number }) => d.id), all.slice(2, 4));
    const far = await t.deliveries(h.json.id, `?page=${Number.MAX_SAFE_INTEGER}`);
    assert.deepEqual([far.status, far.json], [200, []]);
  } finally {
    await t.close();
  }
});

Deno.test("both signatures verify in Python over the exact bytes, json or form, for a large multi-byte payload", async () => {
  const t = await setup();
  const r = await pythonReceiver("s3cret ü");
  try {
    for (const content_type of ["json", "form"]) {
      await t.hook({ url: `${r.url}/${content_type}`, secret: "s3cret ü", content_type });
    }
    await t.hook({ url: `${r.url}/unsigned`, content_type: "json" });
    const body = "€ & = + % ü\n".repeat(5000); // 60,000 characters, 35 % of them multi-byte
    const p = await t.call("POST", "/repos/alice/app/pulls", {
      title: "big",
      head: "b1",
      base: "main",
      body,
    });
    assert.equal(p.status, 201);
    const events = () => r.hits.filter((x) => x.headers["x-github-event"] === "pull_request");
    await until("three deliveries", () => events().length === 3);
    for (const path of ["/json", "/form"]) {
      const hit = events().find((x) => x.path === path)!;
      assert.ok(hit.sha256_ok && hit.sha1_ok, path);
      assert.equal(hit.payload.pull_request.body, body, path);
      assert.equal(
        hit.headers["content-type"],
        path === "/json" ? "application/json" : "application/x-www-form-urlencoded",
      );
      assert.match(hit.headers["x-github-delivery"], /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/);
      assert.equal(hit.headers["x-github-hook-installation-target-type"], "repository");
    }
    const unsigned = events().find((x) => x.path === "/unsigned")!;
    assert.equal(unsigned.headers["x-hub-signature-256"], undefined);
    assert.equal(unsigned.headers["x-hub-signature"], undefined);
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("PATCH add_events and remove_events change a hook's events instead of being ignored", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    const h = await t.hook({ url: `${r.url}/hook`, content_type: "json" }, { events: ["push"] });
    const patch = (body: Record<string, unknown>) =>
      t.call("PATCH", `/repos/alice/app/hooks/${h.json.id}`, body);
    const added = await patch({ add_events: ["pull_request", "push"] });
    assert.equal(added.status, 200);
    assert.deepEqual(added.json.events, ["push", "pull_request"]);
    await t.call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    await until("the opened event", () => r.hits.some((x) => x.payload.action === "opened"));
    const removed = await patch({ remove_events: ["push"] });
    assert.deepEqual(removed.json.events, ["pull_request"]);
    const both = await patch({ events: ["push"], add_events: ["issues"], remove_events: ["push"] });
    assert.deepEqual(both.json.events, ["issues"]);
    for (const bad of [{ add_events: "push" }, { remove_events: [1] }]) {
      assert.equal((await patch(bad)).status, 422, JSON.stringify(bad));
    }
    const letter = (n: number) => String.fromCharCode(97 + n);
    const many = Array.from({ length: 99 }, (_, i) => `x${letter(i / 26 | 0)}${letter(i % 26)}`);
    assert.equal((await patch({ events: many })).status, 200);
    assert.equal((await patch({ add_events: ["x_one", "x_two"] })).status, 422, "over 100 events");
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("X-GitHub-Delivery names the event: every hook gets the same GUID for one event, a new one for the next", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    for (const path of ["a", "b"]) await t.hook({ url: `${r.url}/${path}`, content_type: "json" });
    await t.call("POST", "/repos/alice/app/pulls", { title: "one", head: "b1", base: "main" });
    await t.call("PATCH", "/repos/alice/app/pulls/1", { title: "two" });
    const events = () => r.hits.filter((x) => x.headers["x-github-event"] === "pull_request");
    await until("four deliveries", () => events().length === 4);
    const guid = (path: string, action: string) =>
      events().find((x) => x.path === path && x.payload.action === action)!
        .headers["x-github-delivery"];
    assert.equal(guid("/a", "opened"), guid("/b", "opened"));
    assert.equal(guid("/a", "edited"), guid("/b", "edited"));
    assert.notEqual(guid("/a", "opened"), guid("/a", "edited"));
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test('a second hook with the same URL is 422 "Hook already exists on this repository", on create and on update', async () => {
  const t = await setup();
  try {
    const first = await t.hook({ url: "http://127.0.0.1:9/ci" });
    const again = await t.call("POST", "/repos/alice/app/hooks", {
      config: { url: "http://127.0.0.1:9/ci", content_type: "json" },
      events: ["push"],
    });
    assert.equal(again.status, 422, "a setup script run twice does not double every delivery");
    const [{ resource, code, message }] = again.json.errors;
    assert.deepEqual([resource, code, message], [
      "Hook",
      "custom",
      "Hook already exists on this repository",
    ]);
    const other = await t.hook({ url: "http://127.0.0.1:9/other" });
    const moved = await t.call("PATCH", `/repos/alice/app/hooks/${other.json.id}`, {
      config: { url: "http://127.0.0.1:9/ci" },
    });
    assert.equal(moved.status, 422);
    const same = await t.call("PATCH", `/repos/alice/app/hooks/${first.json.id}`, {
      config: { url: "http://127.0.0.1:9/ci" },
      active: false,
    });
    assert.equal(same.status, 200, "a hook may keep its own URL");
    assert.equal((await t.call("GET", "/repos/alice/app/hooks")).json.length, 2);
  } finally {
    await t.close();
  }
});

Deno.test("a new active hook is pinged at once, whatever its events; an inactive one is not", async () => {
  const t = await setup();
  const r = await pythonReceiver("s3cret");
  try {
    const h = await t.hook(
      { url: `${r.url}/new`, secret: "s3cret", content_type: "form" },
      { events: ["push"] },
    );
    assert.deepEqual(h.json.last_response, { code: null, status: "unused", message: null });
    const off = await t.hook({ url: `${r.url}/off` }, { active: false });
    await until("the ping", () => r.hits.length === 1);
    const [ping] = r.hits;
    assert.equal(ping.path, "/new");
    assert.equal(ping.headers["x-github-event"], "ping");
    assert.ok(ping.sha256_ok && ping.sha1_ok);
    assert.equal(ping.payload.hook_id, h.json.id);
    assert.deepEqual(ping.payload.hook.last_response, h.json.last_response);
    assert.deepEqual(ping.payload.hook.config, h.json.config);
    assert.deepEqual((await t.deliveries(off.json.id)).json, [], "nothing for the inactive hook");
    await until(
      "the ping's record",
      async () => (await t.deliveries(h.json.id)).json[0].status === "OK",
    );
    const shown = (await t.call("GET", `/repos/alice/app/hooks/${h.json.id}`)).json;
    assert.deepEqual(shown.last_response, { code: 200, status: "active", message: "OK" });
  } finally {
    await t.close();
    await r.close();
  }
});

Deno.test("deliveries carry GitHub's User-Agent prefix, GitHub-Hookshot/", async () => {
  const t = await setup();
  const r = await pythonReceiver("");
  try {
    await t.hook({ url: `${r.url}/hook`, content_type: "json" });
    await until("the ping", () => r.hits.length === 1);
    assert.match(r.hits[0].headers["user-agent"], /^GitHub-Hookshot\/forgekit-\d+\.\d+\.\d+/);
  } finally {
    await t.close();
    await r.close();
  }
});
