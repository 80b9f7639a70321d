import assert from "node:assert/strict";
import { parseClientHello, serverAlpn } from "./client_hello.ts";

/** Captures the first bytes a real client sends to a TLS server. */
async function captureHello(args: string[]): Promise<Uint8Array> {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  const client = new Deno.Command(args[0], {
    args: args.slice(1).map((a) => a.replace("PORT", String(port))),
    stdout: "null",
    stderr: "null",
  }).spawn();
  const conn = await l.accept();
  const buf = new Uint8Array(65536);
  let got = new Uint8Array(0);
  while (parseClientHello(got).status === "more") {
    const n = await conn.read(buf);
    if (n === null) break;
    const next = new Uint8Array(got.length + n);
    next.set(got);
    next.set(buf.subarray(0, n), got.length);
    got = next;
  }
  conn.close();
  l.close();
  try {
    client.kill();
  } catch { /* exited */ }
  await client.status;
  return got;
}

Deno.test("parseClientHello() reads the SNI of real clients' ClientHellos, also in pieces", async () => {
  const cases: [string[], string | null][] = [
    [[
      "curl",
      "-sk",
      "-m",
      "3",
      "--resolve",
      "sni.example:PORT:127.0.0.1",
      "https://sni.example:PORT/",
    ], "sni.example"],
    [["curl", "-sk", "-m", "3", "https://127.0.0.1:PORT/"], null],
    [
      ["openssl", "s_client", "-connect", "127.0.0.1:PORT", "-servername", "Other.Example"],
      "Other.Example",
    ],
  ];
  for (const [cmd, sni] of cases) {
    const hello = await captureHello(cmd);
    const r = parseClientHello(hello);
    assert.equal(r.status, "ok", cmd.join(" "));
    if (r.status === "ok") {
      assert.equal(r.sni, sni);
      assert.equal(r.length, hello.length);
    }
    for (const cut of [1, 5, 20, hello.length - 1]) {
      assert.equal(parseClientHello(hello.subarray(0, cut)).status, "more", `cut at ${cut}`);
    }
  }
});

Deno.test("parseClientHello() refuses what is not a TLS ClientHello", () => {
  const enc = new TextEncoder();
  assert.deepEqual(parseClientHello(enc.encode("GET / HTTP/1.1\r\n\r\n")), {
    status: "invalid",
    why: "not a TLS handshake",
  });
  assert.deepEqual(
    parseClientHello(new Uint8Array([0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0, 0, 0])),
    {
      status: "invalid",
      why: "not a ClientHello",
    },
  );
});

/** A ClientHello handshake message with the given server_name entries (each its own extension when `separate`). */
function helloMessage(names: string[], separate = false): Uint8Array {
  const enc = new TextEncoder();
  const u16 = (n: number) => [n >> 8, n & 0xff];
  const sniExt = (list: string[]) => {
    const entries = list.flatMap((n) => [0, ...u16(n.length), ...enc.encode(n)]);
    const body = [...u16(entries.length), ...entries];
    return [0, 0, ...u16(body.length), ...body];
  };
  const exts = separate ? names.flatMap((n) => sniExt([n])) : names.length ? sniExt(names) : [];
  const body = [
    3,
    3,
    ...new Array(32).fill(7), // random
    0, // session id
    ...u16(2),
    0x13,
    0x01, // one cipher suite
    1,
    0, // null compression
    ...u16(exts.length),
    ...exts,
  ];
  return new Uint8Array([1, 0, ...u16(body.length), ...body]);
}

/** `message` as TLS handshake records, cut at `cuts` (offsets into the message). */
function records(message: Uint8Array, cuts: number[] = []): Uint8Array {
  const out: number[] = [];
  let from = 0;
  for (const to of [...cuts, message.length]) {
    const part = message.subarray(from, to);
    out.push(0x16, 0x03, 0x01, part.length >> 8, part.length & 0xff, ...part);
    from = to;
  }
  return new Uint8Array(out);
}

Deno.test("parseClientHello() reads an SNI split across records, even inside the name", () => {
  const msg = helloMessage(["Allowed.Example."]);
  for (const cuts of [[2], [50], [msg.length - 5], [1, 2, 3, 60, 61]]) {
    const r = parseClientHello(records(msg, cuts));
    assert.deepEqual(r.status === "ok" && r.sni, "Allowed.Example.", `cut at ${cuts}`);
  }
});

Deno.test("parseClientHello() refuses a ClientHello naming two servers, in one extension or two", () => {
  for (const separate of [false, true]) {
    assert.deepEqual(
      parseClientHello(records(helloMessage(["allowed.example", "evil.example"], separate))),
      { status: "invalid", why: "ClientHello names more than one server" },
    );
  }
  const none = parseClientHello(records(helloMessage([])));
  assert.equal(none.status === "ok" && none.sni, null);
});

Deno.test("parseClientHello() refuses a ClientHello spread over more than 64 records, at once", () => {
  const msg = helloMessage(["allowed.example"]);
  const cuts = Array.from({ length: 64 }, (_, i) => i + 1);
  assert.deepEqual(parseClientHello(records(msg, cuts)), {
    status: "invalid",
    why: "ClientHello spread over more than 64 records",
  });
  assert.equal(parseClientHello(records(msg, cuts.slice(0, 63))).status, "ok");
  // Before: each call reassembled every record, so 60 KB of one-byte records fed as they came
  // took the proxy most of a second per connection.
  const flood = records(new Uint8Array([1, 0, 0xea, 0x60, ...new Array(60_000).fill(0)]), [
    ...Array.from({ length: 60_000 }, (_, i) => i + 1),
  ]);
  const started = performance.now();
  for (let n = 6; n <= flood.length; n += 6) {
    if (parseClientHello(flood.subarray(0, n)).status !== "more") break;
  }
  assert.ok(performance.now() - started < 200, `${performance.now() - started} ms`);
});

Deno.test("parseClientHello() reads the ALPN offer of real clients' ClientHellos", async () => {
  const cases: [string[], string[]][] = [
    [["curl", "-sk", "-m", "3", "--http2", "https://127.0.0.1:PORT/"], ["h2", "http/1.1"]],
    [["curl", "-sk", "-m", "3", "--http1.1", "https://127.0.0.1:PORT/"], ["http/1.1"]],
    [["openssl", "s_client", "-connect", "127.0.0.1:PORT", "-alpn", "h2"], ["h2"]],
    [["openssl", "s_client", "-connect", "127.0.0.1:PORT"], []],
  ];
  for (const [cmd, alpn] of cases) {
    const r = parseClientHello(await captureHello(cmd));
    assert.equal(r.status, "ok", cmd.join(" "));
    if (r.status === "ok") assert.deepEqual(r.alpn, alpn, cmd.join(" "));
  }
});

Deno.test("parseClientHello() reads a malformed ALPN list as far as it goes, never refusing the hello", async () => {
  const hello = await captureHello([
    "curl",
    "-sk",
    "-m",
    "3",
    "--http2",
    "--resolve",
    "alpn.example:PORT:127.0.0.1",
    "https://alpn.example:PORT/",
  ]);
  // The first name ("\x02h2") now claims more bytes than the list holds.
  const at = hello.findIndex((b, i) => b === 2 && hello[i + 1] === 0x68 && hello[i + 2] === 0x32);
  assert.ok(at > 0);
  const broken = hello.slice();
  broken[at] = 0x7f;
  const r = parseClientHello(broken);
  assert.equal(r.status, "ok");
  if (r.status === "ok") {
    assert.equal(r.sni, "alpn.example");
    assert.deepEqual(r.alpn, []);
  }
});

Deno.test("serverAlpn() offers back what the client named of h2, http/1.1 and http/1.0", () => {
  const cases: [string[], string[]][] = [
    [["h2", "http/1.1"], ["h2", "http/1.1"]],
    [["http/1.1", "h2"], ["h2", "http/1.1"]],
    [["http/1.1"], ["http/1.1"]],
    [["h2"], ["h2"]],
    // curl --http1.0: refused the handshake before.
    [["http/1.0"], ["http/1.0"]],
    [["http/1.1", "http/1.0"], ["http/1.1"]],
    [["h2", "http/1.0"], ["h2"]],
    // Nothing forgekit speaks: refused (RFC 7301); no ALPN at all: HTTP/1.1.
    [["acme-tls/1"], ["h2", "http/1.1"]],
    [[], ["h2", "http/1.1"]],
  ];
  for (const [offered, back] of cases) assert.deepEqual(serverAlpn(offered), back, offered.join());
});
