import assert from "node:assert/strict";
import {
  BODY_LOG_LIMIT,
  BodyCapture,
  BodyLog,
  CaptureBudget,
  loggedBody,
  maskBodyText,
  maskHeaders,
  tapConn,
  tapResponse,
  tapStream,
} from "./body_log.ts";

const enc = new TextEncoder();

/** A connection on loopback whose peer sent `text` and closed. */
async function connSent(text: string): Promise<{ conn: Deno.Conn; close(): void }> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const sender = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  const conn = await listener.accept();
  await sender.write(enc.encode(text));
  sender.close();
  return {
    conn,
    close() {
      conn.close();
      listener.close();
    },
  };
}

Deno.test("a capture keeps the first bytes up to its limit and counts them all", () => {
  const budget = new CaptureBudget(1000);
  const c = new BodyCapture(budget, 10);
  c.add(enc.encode("abcdef"));
  c.add(enc.encode("ghijkl"));
  c.add(enc.encode("mn"));
  assert.equal(c.bytes, 14);
  const { data, truncated } = c.take();
  assert.equal(new TextDecoder().decode(data), "abcdefghij");
  assert.equal(truncated, true);
  // its budget came back whole
  assert.equal(budget.take(1000), true);
});

Deno.test("captures in flight share one budget: past it, bodies are cut", () => {
  const budget = new CaptureBudget(8);
  const a = new BodyCapture(budget, 100);
  const b = new BodyCapture(budget, 100);
  a.add(enc.encode("12345"));
  b.add(enc.encode("6789")); // 4 bytes do not fit in the 3 left
  b.add(enc.encode("x")); // nor anything after a cut
  assert.deepEqual([a.take().truncated, b.take()], [false, {
    data: new Uint8Array(0),
    truncated: true,
  }]);
  assert.equal(budget.take(8), true, "both gave back what they held");
});

Deno.test("maskHeaders masks credentials and keeps what says what they were", () => {
  assert.deepEqual(
    maskHeaders([
      ["authorization", "Bearer ghp_0123456789abcdefABCDEF"],
      ["Authorization", "token-without-scheme"],
      ["proxy-authorization", "Basic dTpw"],
      ["cookie", "sid=abc; theme=dark"],
      ["set-cookie", "sid=abc; Path=/; HttpOnly"],
      ["x-api-key", "k"],
      ["private-token", "p"],
      ["x-goog-signature", "s"],
      ["Ocp-Apim-Subscription-Key", "k2"],
      ["x-functions-key", "k3"],
      ["sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="],
      ["content-type", "application/json"],
      ["x-note", "has ghp_0123456789abcdefABCDEF inside"],
    ]),
    [
      ["authorization", "Bearer ****"],
      ["Authorization", "****"],
      ["proxy-authorization", "Basic ****"],
      ["cookie", "sid=****; theme=****"],
      ["set-cookie", "sid=****; Path=/; HttpOnly"],
      ["x-api-key", "****"],
      ["private-token", "****"],
      ["x-goog-signature", "****"],
      ["Ocp-Apim-Subscription-Key", "****"],
      ["x-functions-key", "****"],
      ["sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="],
      ["content-type", "application/json"],
      ["x-note", "has ghp_**** inside"],
    ],
  );
});

Deno.test("maskBodyText masks secret JSON and form fields and tokens, even in a body cut short", () => {
  const cases: [string, string, string][] = [
    [
      '{"user":"u","password":"p@ss\\"w","nested":{"client_secret" : "s"},"n":1}',
      "application/json",
      '{"user":"u","password":"****","nested":{"client_secret" : "****"},"n":1}',
    ],
    ['{"access_token":"abc","tok', "application/json", '{"access_token":"****","tok'],
    [
      "grant_type=refresh&refresh_token=r1&scope=repo",
      "application/x-www-form-urlencoded",
      "grant_type=refresh&refresh_token=****&scope=repo",
    ],
    ["grant_type=x&token=t", "text/plain", "grant_type=x&token=t"],
    [
      '--XyZ\r\nContent-Disposition: form-data; name="user"\r\n\r\nu\r\n' +
      '--XyZ\r\nContent-Disposition: form-data; name="password"\r\n\r\np@ss\r\n' +
      '--XyZ\r\nContent-Disposition: form-data; name="f"; filename="token.txt"\r\n\r\ndata\r\n--XyZ--\r\n',
      'multipart/form-data; boundary="XyZ"',
      '--XyZ\r\nContent-Disposition: form-data; name="user"\r\n\r\nu\r\n' +
      '--XyZ\r\nContent-Disposition: form-data; name="password"\r\n\r\n****\r\n' +
      '--XyZ\r\nContent-Disposition: form-data; name="f"; filename="token.txt"\r\n\r\ndata\r\n--XyZ--\r\n',
    ],
    [
      '--b\r\nContent-Disposition: form-data; name="client_secret"\r\n\r\nshh, cut sh',
      "multipart/form-data; boundary=b",
      '--b\r\nContent-Disposition: form-data; name="client_secret"\r\n\r\n****',
    ],
    ["key: ghp_0123456789abcdefABCDEF0\n", "text/plain", "key: ghp_****\n"],
    [
      '{"state":"open","title":"token rotation"}',
      "application/json",
      '{"state":"open","title":"token rotation"}',
    ],
  ];
  for (const [text, type, want] of cases) assert.equal(maskBodyText(text, type), want, text);
});

Deno.test("loggedBody is masked text for UTF-8, base64 for binary or content-encoded bodies", () => {
  const body = (bytes: Uint8Array, headers: [string, string][], limit = BODY_LOG_LIMIT) => {
    const c = new BodyCapture(new CaptureBudget(), limit);
    c.add(bytes);
    return loggedBody(headers, c);
  };
  assert.deepEqual(body(enc.encode('{"password":"x"}'), [["content-type", "application/json"]]), {
    headers: [["content-type", "application/json"]],
    body: '{"password":"****"}',
    body_encoding: "utf-8",
    body_bytes: 16,
    body_truncated: false,
  });
  const binary = body(new Uint8Array([0xff, 0x00, 0x80]), []);
  assert.deepEqual([binary.body, binary.body_encoding], ["/wCA", "base64"]);
  const gzip = body(enc.encode("plain"), [["Content-Encoding", "gzip"]]);
  assert.deepEqual([gzip.body, gzip.body_encoding], [btoa("plain"), "base64"]);
  // "é" is two bytes: a body cut inside it is still text
  const cut = body(enc.encode("abé"), [], 3);
  assert.deepEqual([cut.body, cut.body_encoding, cut.body_bytes, cut.body_truncated], [
    "ab",
    "utf-8",
    4,
    true,
  ]);
});

Deno.test("tapStream and tapConn pass every byte on and copy the first", async () => {
  const c = new BodyCapture(new CaptureBudget(), 4);
  const tapped = tapStream(
    new ReadableStream({
      start(ctl) {
        ctl.enqueue(enc.encode("hello "));
        ctl.enqueue(enc.encode("world"));
        ctl.close();
      },
    }),
    c,
  );
  assert.equal(await new Response(tapped).text(), "hello world");
  assert.equal(new TextDecoder().decode(c.take().data), "hell");

  const { conn, close } = await connSent("abcdef");
  const d = new BodyCapture(new CaptureBudget(), 100);
  const wrapped = tapConn(conn, d);
  const buf = new Uint8Array(100);
  let got = "";
  for (let n = await wrapped.read(buf); n !== null; n = await wrapped.read(buf)) {
    got += new TextDecoder().decode(buf.subarray(0, n));
  }
  assert.equal(got, "abcdef");
  assert.equal(new TextDecoder().decode(d.take().data), "abcdef");
  assert.equal(wrapped.remoteAddr.transport, "tcp", "the rest of the connection is its own");
  close();
});

Deno.test("tapResponse copies a whole body, and a sized one's first bytes then its reads", async () => {
  const whole = { body: enc.encode("whole") as Uint8Array | ReadableStream<Uint8Array> | null };
  const c = tapResponse(whole, new BodyCapture(new CaptureBudget()));
  assert.equal(new TextDecoder().decode(c.take().data), "whole");

  const { conn, close } = await connSent("rest");
  const sized = {
    body: null,
    sized: { conn, length: 9, buffered: enc.encode("first"), ended: () => conn.close() },
  };
  const d = tapResponse(sized, new BodyCapture(new CaptureBudget()));
  const buf = new Uint8Array(16);
  const n = await sized.sized.conn.read(buf);
  assert.equal(n, 4);
  assert.equal(new TextDecoder().decode(d.take().data), "firstrest");
  close();
});

Deno.test("the bodies log is one JSON line per exchange, its URL masked, mode 0600", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const log = new BodyLog(`${dir}/bodies.jsonl`);
    const sent = log.capture();
    sent.add(enc.encode("x=1"));
    log.write({
      time: "2026-01-01T00:00:00.000Z",
      method: "POST",
      url: "https://example.com/a?sig=SEKRIT",
      status: 201,
      request: loggedBody([["content-type", "text/plain"]], sent),
      response: null,
    });
    log.close();
    assert.equal((await Deno.stat(`${dir}/bodies.jsonl`)).mode! & 0o777, 0o600);
    const lines = (await Deno.readTextFile(`${dir}/bodies.jsonl`)).trim().split("\n");
    assert.equal(lines.length, 1);
    const r = JSON.parse(lines[0]);
    assert.equal(r.url, "https://example.com/a?sig=****");
    assert.deepEqual([r.method, r.status, r.request.body, r.response], ["POST", 201, "x=1", null]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("bytes passing after a capture was taken are counted, never held", () => {
  const budget = new CaptureBudget(4);
  const c = new BodyCapture(budget, 100);
  c.add(enc.encode("ab"));
  c.take();
  c.add(enc.encode("cd"));
  assert.equal(c.bytes, 4);
  assert.equal(budget.take(4), true, "the budget is whole");
});

Deno.test("maskHeaders masks a URL's credentials in any field (a presigned Location, a Referer)", () => {
  assert.deepEqual(
    maskHeaders([
      [
        "location",
        "https://objects.test/f?X-Amz-Credential=AK&X-Amz-Signature=ff&X-Amz-Expires=300",
      ],
      ["referer", "https://app.test/callback?code=c0de&state=s"],
      ["link", '<https://api.test/r?page=2>; rel="next"'],
    ]),
    [
      [
        "location",
        "https://objects.test/f?X-Amz-Credential=****&X-Amz-Signature=****&X-Amz-Expires=300",
      ],
      ["referer", "https://app.test/callback?code=****&state=s"],
      ["link", '<https://api.test/r?page=2>; rel="next"'],
    ],
  );
});

Deno.test("maskBodyText takes linear time on escaped quotes (JSON inside JSON, a hostile origin)", () => {
  // A regular expression restarted at each escaped quote of a string that
  // is no field's value (an array of JSON texts) and read on to its end: a
  // 64 KiB body held the event loop for about a second.
  const bodies = [
    `["${'{\\"a\\":\\"b\\",'.repeat(4 * 1024)}"]`,
    `"${'\\"'.repeat(32 * 1024)}`,
  ];
  for (const body of bodies) {
    const started = performance.now();
    maskBodyText(body, "application/json");
    const ms = performance.now() - started;
    assert.ok(ms < 100, `${body.slice(0, 20)}…: ${ms.toFixed(0)} ms`);
  }
  // what it masks is unchanged, and a secret value cut short is masked too
  assert.equal(
    maskBodyText('{"payload":"{\\"password\\":\\"x\\"}","token" :"t","n":"v","secret":"cut', ""),
    '{"payload":"{\\"password\\":\\"x\\"}","token" :"****","n":"v","secret":"****',
  );
});

Deno.test("tapStream reads its source only as it is read (a request body is not asked for early)", async () => {
  // The first pull of a client's body sends its 100 Continue: it must wait
  // for the origin client to want the body.
  let pulls = 0;
  const source = new ReadableStream<Uint8Array>({
    pull(ctl) {
      pulls++;
      ctl.enqueue(enc.encode("x"));
    },
  }, { highWaterMark: 0 });
  const tapped = tapStream(source, new BodyCapture(new CaptureBudget()));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(pulls, 0);
  const reader = tapped.getReader();
  await reader.read();
  assert.equal(pulls, 1);
  await reader.cancel();
});
