import assert from "node:assert/strict";
import { parseClientHello } from "./client_hello.ts";

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
