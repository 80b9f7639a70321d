/**
 * A raw HTTP/1.1 client on a bumped connection: CONNECT through a bump
 * fixture, then TLS offering only http/1.1, writing exact bytes and
 * reading exact answers (pipelined requests, odd framing, smuggling
 * attempts) that no ordinary client would send.
 */
import assert from "node:assert/strict";
import type { BumpFront } from "./bump.ts";
import { concat } from "../../lib/bump/conn_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
/** How long a raw client waits for bytes before the test fails. */
const READ_MS = 10_000;

/** One response as read off the wire; `text` is its body decoded as UTF-8. */
export interface RawResponse {
  status: number;
  headers: Headers;
  body: Uint8Array;
  text: string;
}

/** A raw client: CONNECT through the fixture, then TLS offering only http/1.1. */
export class RawH1 {
  #buf = new Uint8Array(0);
  private constructor(readonly conn: Deno.TlsConn) {}

  /** `target`: the CONNECT target; `sni`: the name TLS asks for. */
  static async open(
    f: BumpFront,
    { target = "api.github.com:443", sni = "api.github.com" } = {},
  ): Promise<RawH1> {
    const tcp = await Deno.connect({
      hostname: "127.0.0.1",
      port: Number(new URL(f.proxyUrl).port),
    });
    try {
      await tcp.write(enc.encode(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
      let answer = "";
      const b = new Uint8Array(1);
      while (!answer.endsWith("\r\n\r\n")) {
        if ((await tcp.read(b)) === null) throw new Error(`CONNECT answer cut short: ${answer}`);
        answer += String.fromCharCode(b[0]);
      }
      assert.match(answer, /^HTTP\/1\.1 200 /);
    } catch (e) {
      tcp.close();
      throw e;
    }
    const tls = await Deno.startTls(tcp, {
      hostname: sni,
      caCerts: [await Deno.readTextFile(f.caCertPath)],
      alpnProtocols: ["http/1.1"],
    });
    try {
      await tls.handshake();
    } catch (e) {
      tls.close();
      throw e;
    }
    return new RawH1(tls);
  }

  async write(data: string | Uint8Array): Promise<void> {
    let bytes = typeof data === "string" ? enc.encode(data) : data;
    while (bytes.byteLength) bytes = bytes.subarray(await this.conn.write(bytes));
  }

  /** Reads more bytes into the buffer; false at the end of the connection. */
  async #fill(): Promise<boolean> {
    const chunk = new Uint8Array(64 * 1024);
    // A missing answer fails the test instead of hanging it.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`nothing read within ${READ_MS} ms`)), READ_MS);
    });
    const reading = this.conn.read(chunk);
    let n: number | null;
    try {
      n = await Promise.race([reading, late]);
    } catch (e) {
      reading.catch(() => {}); // settles when the connection is closed
      throw e;
    } finally {
      clearTimeout(timer);
    }
    if (n === null) return false;
    const next = new Uint8Array(this.#buf.byteLength + n);
    next.set(this.#buf);
    next.set(chunk.subarray(0, n), this.#buf.byteLength);
    this.#buf = next;
    return true;
  }

  /** Up to and without the next `sep`, which is consumed. */
  async #until(sep: string): Promise<string> {
    for (;;) {
      const at = latin1(this.#buf).indexOf(sep);
      if (at !== -1) {
        const text = latin1(this.#buf.subarray(0, at));
        this.#buf = this.#buf.subarray(at + sep.length);
        return text;
      }
      if (!await this.#fill()) throw new Error(`connection ended before ${JSON.stringify(sep)}`);
    }
  }

  async take(n: number): Promise<Uint8Array> {
    while (this.#buf.byteLength < n) {
      if (!await this.#fill()) throw new Error(`connection ended inside a body of ${n} bytes`);
    }
    const out = this.#buf.slice(0, n);
    this.#buf = this.#buf.subarray(n);
    return out;
  }

  /** Reads a response head only. */
  async head(): Promise<{ status: number; headers: Headers }> {
    const [line, ...fields] = (await this.#until("\r\n\r\n")).split("\r\n");
    return {
      status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(line)?.[1]),
      headers: new Headers(
        fields.map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1).trim()]),
      ),
    };
  }

  /** Reads one whole response (a 1xx too): head, then a sized, chunked or close-delimited body. */
  async response(method = "GET"): Promise<RawResponse> {
    const r = await this.#response(method);
    return { ...r, text: dec.decode(r.body) };
  }

  async #response(method: string): Promise<Omit<RawResponse, "text">> {
    const [line, ...fields] = (await this.#until("\r\n\r\n")).split("\r\n");
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(line)?.[1]);
    assert.ok(status, `status line ${JSON.stringify(line)}`);
    const headers = new Headers(
      fields.map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1).trim()]),
    );
    if (method === "HEAD" || status < 200 || status === 204 || status === 304) {
      return { status, headers, body: new Uint8Array(0) };
    }
    if (headers.get("transfer-encoding") === "chunked") {
      const parts: Uint8Array[] = [];
      for (;;) {
        const size = parseInt(await this.#until("\r\n"), 16);
        if (size === 0) break;
        parts.push(await this.take(size));
        assert.equal(await this.#until("\r\n"), "", "CRLF after a chunk");
      }
      assert.equal(await this.#until("\r\n"), "", "no trailers");
      return { status, headers, body: concat(parts) };
    }
    const length = headers.get("content-length");
    if (length !== null) return { status, headers, body: await this.take(Number(length)) };
    while (await this.#fill());
    return { status, headers, body: await this.take(this.#buf.byteLength) };
  }

  /** Whether the server closed the connection with nothing more sent. */
  async closedByServer(): Promise<boolean> {
    try {
      return this.#buf.byteLength === 0 && !await this.#fill();
    } catch (e) {
      if (e instanceof Deno.errors.ConnectionReset) return true;
      throw e;
    }
  }

  close(): void {
    try {
      this.conn.close();
    } catch {
      // already closed
    }
  }
}

/** True latin1 (each byte one code unit), not WHATWG's "latin1" (windows-1252). */
function latin1(b: Uint8Array): string {
  let text = "";
  for (let i = 0; i < b.byteLength; i += 4096) {
    text += String.fromCharCode.apply(null, b.subarray(i, i + 4096) as unknown as number[]);
  }
  return text;
}
