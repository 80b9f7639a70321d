/**
 * gRPC through `--ssl-bump`: a real gRPC client (python grpcio, whose C core
 * honours `https_proxy` with CONNECT) calls a real gRPC server (TLS, ALPN h2
 * only) through the firewall's proxy, trusting the session CA. gRPC needs
 * HTTP/2 end to end and its status in trailers.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { startBumpFront } from "./support/bump.ts";
import { makeTestCa } from "./support/tls.ts";
import { startTestProxy } from "./support/proxy.ts";
import { H2_PYTHON } from "./support/h2_client.ts";

const SCRIPT = fileURLToPath(new URL("./support/grpc_peer.py", import.meta.url));
const SERVICE = "forgekit.test.Echo";
const dec = new TextDecoder();

/** Whether the system python has grpcio (Debian: python3-grpcio; `.ci/run` installs it). */
function hasGrpcPython(): boolean {
  try {
    return new Deno.Command(H2_PYTHON, {
      args: ["-c", "import grpc"],
      stdout: "null",
      stderr: "null",
    })
      .outputSync().success;
  } catch {
    return false;
  }
}

interface Call {
  code: string;
  response?: string;
  parts?: string[];
  details?: string;
  trailing?: [string, string][];
}

Deno.test({
  name:
    "gRPC unary and server-streaming calls pass with their status and trailing metadata; a disallowed method is refused",
  ignore: !hasGrpcPython(),
  fn: async () => {
    const ca = await makeTestCa("grpc test CA");
    const leaf = await ca.issue(["api.github.com"]);
    const dir = await Deno.makeTempDir({ prefix: "forgekit-grpc-" });
    await Deno.writeTextFile(join(dir, "leaf.pem"), leaf.cert);
    await Deno.writeTextFile(join(dir, "leaf.key"), leaf.key);
    const server = new Deno.Command(H2_PYTHON, {
      args: [
        SCRIPT,
        "server",
        JSON.stringify({ cert: join(dir, "leaf.pem"), key: join(dir, "leaf.key") }),
      ],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const calls: { method: string; metadata: [string, string][] }[] = [];
    const lines = server.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const { promise: port, resolve: ready } = Promise.withResolvers<number>();
    const reading = (async () => {
      let pending = "";
      for (let r = await lines.read(); !r.done; r = await lines.read()) {
        pending += r.value;
        for (let nl = pending.indexOf("\n"); nl !== -1; nl = pending.indexOf("\n")) {
          const ev = JSON.parse(pending.slice(0, nl));
          pending = pending.slice(nl + 1);
          if (ev.ev === "ready") ready(ev.port);
          else calls.push(ev);
        }
      }
    })();
    const proxy = startTestProxy();
    proxy.route("api.github.com:443", await port);
    const front = await startBumpFront({
      allowUrls: ["Unary", "ServerStream", "Fail"].map((m) =>
        `https://api.github.com/${SERVICE}/${m}`
      ),
      upstreamCaCerts: [ca.cert],
      upstreamProxy: proxy.url,
    });
    try {
      const out = await new Deno.Command(H2_PYTHON, {
        args: [
          SCRIPT,
          "client",
          JSON.stringify({ target: "api.github.com:443", ca: front.caCertPath }),
        ],
        clearEnv: true,
        env: { https_proxy: front.proxyUrl, PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = dec.decode(out.stdout);
      assert.ok(out.success && text.trim(), `${dec.decode(out.stderr)}${text}`);
      const got: Record<string, Call> = JSON.parse(text);

      assert.deepEqual(got.unary, {
        code: "OK",
        response: "echo:hi",
        trailing: [["x-served-by", "origin"], ["x-echo-len", "2"]],
      });
      assert.deepEqual(got.stream, {
        code: "OK",
        parts: ["part 0", "part 1", "part 2"],
        trailing: [["x-parts", "3"]],
      });
      // The status and its message come in trailers, and arrive as the server set them.
      assert.equal(got.fail.code, "NOT_FOUND");
      assert.equal(got.fail.details, "no such thing");
      // Refused by the URL policy: the client sees an error, the server never sees the call.
      assert.notEqual(got.secret.code, "OK");
      assert.equal(got.secret.code, "PERMISSION_DENIED", JSON.stringify(got.secret));

      assert.deepEqual(calls.map((c) => c.method), ["Unary", "ServerStream", "Fail"]);
      assert.ok(
        calls[0].metadata.some(([k, v]) => k === "x-client" && v === "forgekit-test"),
        JSON.stringify(calls[0].metadata),
      );
      const entries = front.logs.map((e) => [new URL(e.url!).pathname, e.decision, e.status]);
      assert.deepEqual(entries.sort(), [
        [`/${SERVICE}/Fail`, "allowed", 200],
        [`/${SERVICE}/Secret`, "blocked", 403],
        [`/${SERVICE}/ServerStream`, "allowed", 200],
        [`/${SERVICE}/Unary`, "allowed", 200],
      ]);
    } finally {
      await front.close();
      await proxy.close();
      server.kill("SIGKILL");
      await server.status;
      await reading.catch(() => {});
      await Deno.remove(dir, { recursive: true });
    }
  },
});
