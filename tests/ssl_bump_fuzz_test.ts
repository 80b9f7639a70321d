/**
 * Mutated requests against `--ssl-bump`'s two servers, from a fixed seed
 * (the same cases every run): seed requests that smuggle a disallowed path
 * behind an allowed one (pipelined, in a body, in chunks, after an
 * upgrade; HTTP/2 streams with bad pseudo-fields, split header blocks,
 * bodies and resets), with bytes inserted, deleted and changed. Whatever
 * the bytes, no disallowed path may reach the origin, no answer may be a
 * 5xx (a client's bad input is never the proxy's or the origin's fault),
 * and the proxy must serve a good request afterwards.
 */
import assert from "node:assert/strict";
import { type BumpFixture, startBumpFixture } from "./support/bump.ts";
import { concat } from "../lib/bump/conn_io.ts";
import {
  Flag,
  frame,
  FrameType,
  PREFACE,
  rstStreamFrame,
  settingsFrame,
} from "../lib/bump/h2_frames.ts";
import { HpackEncoder } from "../lib/bump/hpack.ts";

const ALLOW = ["https://api.github.com/allowed/*"];
/** The paths the patterns allow (what the origin may see). */
const ALLOWED_PATH = /^\/allowed\/[^/?]*(\?.*)?$/;
/** How long a case waits for more bytes before it is over. */
const IDLE_MS = 150;

/** A small deterministic generator (the cases must be the same every run). */
function random(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
}

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));

/** Sends `data` on a bumped connection (ALPN `alpn`); the answer as a byte string. */
async function exchange(f: BumpFixture, alpn: string, data: Uint8Array): Promise<string> {
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port: Number(new URL(f.proxyUrl).port) });
  const established = "HTTP/1.1 200 Connection established\r\n\r\n";
  await tcp.write(bytes("CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"));
  const head = new Uint8Array(established.length);
  for (let got = 0; got < head.length;) {
    const n = await tcp.read(head.subarray(got));
    if (n === null) throw new Error("the CONNECT was not answered");
    got += n;
  }
  const conn = await Deno.startTls(tcp, {
    hostname: "api.github.com",
    caCerts: [await Deno.readTextFile(f.caCertPath)],
    alpnProtocols: [alpn],
  });
  let answer = "";
  try {
    await conn.write(data).catch(() => {});
    const buf = new Uint8Array(65536);
    for (;;) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const idle = new Promise<"idle">((r) => timer = setTimeout(() => r("idle"), IDLE_MS));
      const n = await Promise.race([conn.read(buf).catch(() => null), idle]);
      clearTimeout(timer);
      if (n === "idle" || n === null) break;
      answer += String.fromCharCode(...buf.subarray(0, n));
    }
  } finally {
    conn.close();
  }
  return answer;
}

/** The origin's paths that the patterns do not allow. */
function leaked(f: BumpFixture): string[] {
  return f.originPaths().filter((p) => !ALLOWED_PATH.test(p));
}

Deno.test("fuzz: 150 mutated HTTP/1.1 requests smuggle nothing, get no 5xx, and leave the proxy serving", async () => {
  const rnd = random(7);
  const pick = <T>(a: T[]): T => a[Math.floor(rnd() * a.length)];
  const host = "Host: api.github.com\r\n";
  const secret = `GET /secret HTTP/1.1\r\n${host}\r\n`;
  const seeds = [
    `GET /allowed/a HTTP/1.1\r\n${host}\r\n${secret}`,
    `POST /allowed/a HTTP/1.1\r\n${host}Content-Length: ${secret.length}\r\n\r\n${secret}`,
    `POST /allowed/a HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${secret}`,
    `POST /allowed/a HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n` +
    `${secret.length.toString(16)}\r\n${secret}\r\n0\r\n\r\n`,
    `GET https://api.github.com/allowed/a HTTP/1.1\r\n${host}\r\n` +
    `GET https://api.github.com/secret HTTP/1.1\r\n${host}\r\n`,
    `GET /allowed/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /secret HTTP/1.0\r\n\r\n`,
    `GET /allowed/../secret HTTP/1.1\r\n${host}\r\n`,
  ];
  const inserts = [
    "\r",
    "\n",
    "\r\n",
    " ",
    "\t",
    "\0",
    ":",
    ",",
    "0",
    "..",
    "%2e",
    "%2F",
    "\x7f",
    "\xff",
    "chunked",
    "Transfer-Encoding: chunked\r\n",
    "Content-Length: 5\r\n",
    "Host: other.github.com\r\n",
    "\r\n\r\n",
  ];
  const mutate = (s: string) => {
    for (let k = 1 + Math.floor(rnd() * 3); k > 0; k--) {
      const at = Math.floor(rnd() * s.length);
      const op = rnd();
      if (op < 0.5) s = s.slice(0, at) + pick(inserts) + s.slice(at);
      else if (op < 0.75) s = s.slice(0, at) + s.slice(at + 1 + Math.floor(rnd() * 3));
      else s = s.slice(0, at) + String.fromCharCode(Math.floor(rnd() * 256)) + s.slice(at + 1);
    }
    return s;
  };
  const f = await startBumpFixture(ALLOW, async (req) => {
    await req.arrayBuffer().catch(() => {}); // a body cut short by the proxy
    return new Response("ok\n");
  });
  try {
    const statuses = new Set<string>();
    for (let i = 0; i < 150; i++) {
      const sent = mutate(pick(seeds));
      const answer = await exchange(f, "http/1.1", bytes(sent));
      for (const [, status] of answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)) {
        statuses.add(status);
        assert.ok(!status.startsWith("5"), `${status} for ${JSON.stringify(sent)}`);
      }
      assert.deepEqual(leaked(f), [], JSON.stringify(sent));
    }
    // The cases reached every outcome: forwarded, blocked and refused.
    for (const s of ["200", "403", "400"]) {
      assert.ok(statuses.has(s), `no ${s} among ${[...statuses]}`);
    }
    const good = await exchange(
      f,
      "http/1.1",
      bytes(`GET /allowed/after HTTP/1.1\r\n${host}Connection: close\r\n\r\n`),
    );
    assert.match(good, /^HTTP\/1\.1 200 /);
  } finally {
    await f.close();
  }
});

Deno.test("fuzz: 100 mutated HTTP/2 connections smuggle nothing, log no 5xx, and leave the proxy serving", async () => {
  const rnd = random(5);
  const pick = <T>(a: T[]): T => a[Math.floor(rnd() * a.length)];
  const paths = [
    "/secret",
    "/allowed/../secret",
    "/allowed/%2e%2e/secret",
    "/allowed%2Fsecret",
    "*",
    "secret",
    "//secret",
    "/allowed/a#x",
    "/allowed/a\0",
    "/allowed/a\r\nx: y",
  ];
  const authorities = [
    "other.github.com",
    "api.github.com:8443",
    "",
    "api.github.com.",
    "evil.com",
  ];
  const extras: [string, string][] = [
    ["host", "other.github.com"],
    ["content-length", "5"],
    ["content-length", "abc"],
    ["transfer-encoding", "chunked"],
    ["connection", "close"],
    ["te", "gzip"],
    ["X-Upper", "1"],
    ["x-a", "a\r\nb"],
    [":path", "/secret"],
    [":authority", "other.github.com"],
  ];
  const fields = (): [string, string][] => {
    const h: [string, string][] = [
      [":method", rnd() < 0.7 ? "GET" : pick(["POST", "HEAD", "CONNECT", "get"])],
      [":scheme", rnd() < 0.8 ? "https" : "http"],
      [":authority", rnd() < 0.6 ? "api.github.com" : pick(authorities)],
      [":path", rnd() < 0.4 ? "/allowed/a" : pick(paths)],
    ];
    for (let i = rnd() < 0.5 ? 0 : Math.floor(rnd() * 3); i > 0; i--) {
      h.splice(Math.floor(rnd() * (h.length + 1)), 0, pick(extras));
    }
    return h;
  };
  const session = (): Uint8Array[] => {
    const encoder = new HpackEncoder();
    const frames = [PREFACE, settingsFrame([])];
    for (let id = 1; id < 9; id += 2) {
      const block = encoder.encode(fields());
      const body = rnd() < 0.4;
      const end = body ? 0 : Flag.END_STREAM;
      if (rnd() < 0.15) {
        const cut = Math.floor(block.byteLength / 2);
        frames.push(frame(FrameType.HEADERS, end, id, block.subarray(0, cut)));
        frames.push(frame(FrameType.CONTINUATION, Flag.END_HEADERS, id, block.subarray(cut)));
      } else frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS | end, id, block));
      if (body) {
        frames.push(frame(FrameType.DATA, 0, id, bytes("hel")));
        frames.push(frame(FrameType.DATA, Flag.END_STREAM, id, bytes("lo")));
      }
      if (rnd() < 0.1) frames.push(rstStreamFrame(id, 8));
    }
    return frames;
  };
  const mutate = (frames: Uint8Array[]): Uint8Array => {
    const all = frames.map((x) => x.slice());
    for (let k = Math.floor(rnd() * 3); k > 0; k--) {
      const i = 1 + Math.floor(rnd() * (all.length - 1));
      const op = rnd();
      if (op < 0.4) all[i][Math.floor(rnd() * all[i].byteLength)] = Math.floor(rnd() * 256);
      else if (op < 0.55) all.splice(i, 0, all[i].slice());
      else if (op < 0.7) all.splice(i, 1);
      else if (op < 0.85) all[i][4] ^= 1 << Math.floor(rnd() * 8); // flags
      else all[i][3] = Math.floor(rnd() * 12); // type
    }
    return concat(all);
  };
  const f = await startBumpFixture(ALLOW, async (req) => {
    await req.arrayBuffer().catch(() => {});
    return new Response("ok\n");
  });
  try {
    for (let i = 0; i < 100; i++) {
      await exchange(f, "h2", mutate(session()));
      assert.deepEqual(leaked(f), [], `connection ${i}`);
    }
    const statuses = new Set(f.logs.map((e) => e.status));
    assert.ok(![...statuses].some((s) => s !== null && s >= 500), `logged ${[...statuses]}`);
    assert.ok(statuses.has(200) && statuses.has(403), `logged ${[...statuses]}`);
    const before = f.originPaths().length;
    await exchange(
      f,
      "h2",
      concat([
        PREFACE,
        settingsFrame([]),
        frame(
          FrameType.HEADERS,
          Flag.END_HEADERS | Flag.END_STREAM,
          1,
          new HpackEncoder().encode([
            [":method", "GET"],
            [":scheme", "https"],
            [":authority", "api.github.com"],
            [":path", "/allowed/after"],
          ]),
        ),
      ]),
    );
    assert.deepEqual(f.originPaths().slice(before), ["/allowed/after"]);
  } finally {
    await f.close();
  }
});
