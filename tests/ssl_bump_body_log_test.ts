/**
 * `--log-bodies` on the request paths that matter: bodies are copied as
 * they stream (an upload and a download far beyond the kept 64 KiB arrive
 * whole and intact), a body that breaks its framing is still the client's
 * 400, and responses whole, sized and streamed are all captured.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { type BumpFront, curl, startBumpFixture } from "./support/bump.ts";
import { hasH2Python, request, runH2, stream } from "./support/h2_client.ts";
import { startH2Origin } from "./support/h2_origin.ts";
import { RawH1 as Raw } from "./support/raw_h1.ts";
import { until } from "./support/until.ts";
import type { BodyLogRecord } from "../lib/bump/body_log.ts";

const ALLOW = ["https://api.github.com/allowed/*"];
const dec = new TextDecoder();

async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as BufferSource);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The bodies log's records, once there are `n` of them. */
async function records(f: BumpFront, n: number): Promise<BodyLogRecord[]> {
  const path = join(f.sessionDir, "bodies.jsonl");
  const read = () => {
    try {
      return Deno.readTextFileSync(path).trim().split("\n").filter(Boolean);
    } catch {
      return [];
    }
  };
  await until(`${n} bodies-log lines`, () => read().length >= n);
  return read().map((l) => JSON.parse(l));
}

Deno.test("a 3 MiB upload and download pass whole through --log-bodies, their first 64 KiB logged", async () => {
  const big = new Uint8Array(3 * 1024 * 1024);
  for (let at = 0; at < big.byteLength; at += 65536) {
    crypto.getRandomValues(big.subarray(at, at + 65536));
  }
  const f = await startBumpFixture(ALLOW, async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/allowed/up") {
      return new Response(await sha256(new Uint8Array(await req.arrayBuffer())));
    }
    if (path === "/allowed/down") return new Response(big);
    // a body of unknown length, in pieces
    return new Response(
      new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode("part one, "));
          c.enqueue(new TextEncoder().encode("part two"));
          c.close();
        },
      }),
    );
  }, { logBodies: true });
  const file = await Deno.makeTempFile();
  try {
    await Deno.writeFile(file, big);
    for (const http of ["--http1.1", "--http2"]) {
      const up = await curl(f, [
        http,
        "--data-binary",
        `@${file}`,
        "https://api.github.com/allowed/up",
      ]);
      assert.equal(up.out, await sha256(big), `${http} upload arrives intact`);
      const down = await curl(f, [http, "-o", "-", "https://api.github.com/allowed/down"]);
      assert.equal(down.code, 0);
      const got = await curl(f, [
        http,
        "-o",
        file + ".down",
        "-w",
        "%{size_download}",
        "https://api.github.com/allowed/down",
      ]);
      assert.equal(got.out, String(big.byteLength));
      assert.equal(await sha256(await Deno.readFile(file + ".down")), await sha256(big));
      const streamed = await curl(f, [http, "https://api.github.com/allowed/stream"]);
      assert.equal(streamed.out, "part one, part two");
    }
    const rs = await records(f, 8);
    const up = rs.filter((r) => r.url === "https://api.github.com/allowed/up");
    assert.equal(up.length, 2);
    for (const r of up) {
      assert.deepEqual(
        [
          r.method,
          r.status,
          r.request.body_bytes,
          r.request.body_truncated,
          r.request.body_encoding,
        ],
        ["POST", 200, big.byteLength, true, "base64"],
      );
      assert.deepEqual(
        Uint8Array.from(atob(r.request.body), (c) => c.charCodeAt(0)),
        big.subarray(0, 64 * 1024),
        "the first 64 KiB, as sent",
      );
    }
    const down = rs.filter((r) => r.url === "https://api.github.com/allowed/down");
    assert.equal(down.length, 4);
    for (const r of down) {
      assert.deepEqual([r.response!.body_bytes, r.response!.body_truncated], [
        big.byteLength,
        true,
      ]);
      assert.deepEqual(
        Uint8Array.from(atob(r.response!.body), (c) => c.charCodeAt(0)),
        big.subarray(0, 64 * 1024),
      );
    }
    const streamed = rs.filter((r) => r.url === "https://api.github.com/allowed/stream");
    assert.deepEqual(streamed.map((r) => r.response!.body), [
      "part one, part two",
      "part one, part two",
    ]);
  } finally {
    await Deno.remove(file);
    await Deno.remove(file + ".down").catch(() => {});
    await f.close();
  }
});

Deno.test("with --log-bodies a chunked body that breaks its framing is still a 400, logged without a response", async () => {
  const f = await startBumpFixture(ALLOW, (req) => req.text().then((t) => new Response(t)), {
    logBodies: true,
  });
  const c = await Raw.open(f);
  try {
    await c.write(
      "POST /allowed/up HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n" +
        "5\r\nhelloX\r\n0\r\n\r\n",
    );
    const r = await c.response();
    assert.equal(r.status, 400);
    assert.equal(dec.decode(r.body), "Bad request: a chunk not followed by CRLF\n");
    const [rec] = await records(f, 1);
    assert.deepEqual([rec.method, rec.status, rec.response], ["POST", 400, null]);
    assert.equal(
      rec.reason,
      "bad request body: a chunk not followed by CRLF",
      "as in the access log",
    );
  } finally {
    c.close();
    await f.close();
  }
});

Deno.test("a streamed response is logged once it has passed whole: all its bytes counted, the cut said", async () => {
  // 400 KB in four pieces of unknown total length (chunked over HTTP/1.1),
  // read by a slow client: the origin's side ends while the last pieces are
  // still on their way to the client, and the line must wait for them.
  const piece = new TextEncoder().encode("y".repeat(100_000));
  const f = await startBumpFixture(ALLOW, () => {
    let sent = 0;
    return new Response(
      new ReadableStream({
        pull(c) {
          if (sent++ < 4) c.enqueue(piece);
          else c.close();
        },
      }),
    );
  }, { logBodies: true });
  try {
    for (const http of ["--http1.1", "--http2"]) {
      const got = await curl(f, [
        http,
        "--limit-rate",
        "1M",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        "https://api.github.com/allowed/stream",
      ]);
      assert.equal(got.out, "400000", http);
    }
    const rs = await records(f, 2);
    for (const r of rs) {
      assert.deepEqual(
        [r.response!.body_bytes, r.response!.body_truncated, r.response!.body.length],
        [400_000, true, 64 * 1024],
      );
    }
  } finally {
    await f.close();
  }
});

Deno.test({
  name: "trailers are logged with their message, masked like headers (gRPC's status is in them)",
  ignore: !hasH2Python(),
  fn: async () => {
    const f = await startH2Origin({ logBodies: true });
    try {
      const r = await runH2(f, {
        steps: [
          {
            op: "headers",
            stream: 1,
            headers: request("/allowed/echo", "POST", [["te", "trailers"]]),
            end: false,
          },
          { op: "data", stream: 1, text: "abc" },
          {
            op: "headers",
            stream: 1,
            headers: [["x-req-checksum", "9001"], ["x-api-key", "SEKRIT1"]],
            end: true,
          },
          { op: "wait", streams: [1] },
        ],
      });
      assert.deepEqual(stream(r, 1).trailers, [["x-echo", "done"]]);
      const [rec] = await records(f, 1);
      assert.deepEqual(rec.request.trailers, [["x-req-checksum", "9001"], ["x-api-key", "****"]]);
      assert.deepEqual(rec.response!.trailers, [["x-echo", "done"]]);
      // Messages without trailers have no such field.
      const plain = await curl(f, [
        "--http2",
        "-o",
        "/dev/null",
        "https://api.github.com/allowed/x",
      ]);
      assert.equal(plain.code, 0);
      const [, rec2] = await records(f, 2);
      assert.deepEqual([rec2.request.trailers, rec2.response!.trailers], [undefined, undefined]);
    } finally {
      await f.close();
    }
  },
});
