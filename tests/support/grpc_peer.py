#!/usr/bin/python3
"""A gRPC server and client for forgekit's --ssl-bump tests (Debian:
python3-grpcio). Messages are raw bytes (no protobuf), on the service
forgekit.test.Echo:

  Unary         "echo:" + the request; trailing metadata x-served-by, x-echo-len
  ServerStream  the request names N: N messages "part i"; trailing x-parts
  Fail          aborts with NOT_FOUND "no such thing"
  Secret        "secret" (the tests' firewall must never let it through)

  grpc_peer.py server '{"cert": PATH, "key": PATH}'
      listens on 127.0.0.1 with TLS (ALPN h2 only, as gRPC does) and prints
      JSON lines: {"ev": "ready", "port": N}, then one
      {"ev": "call", "method": M, "metadata": [[k, v], ...]} per call.

  grpc_peer.py client '{"target": "api.github.com:443", "ca": PATH}'
      calls Unary, ServerStream, Fail and Secret through the proxy named by
      https_proxy (or grpc_proxy), trusting the CA at PATH, and prints one
      JSON object with what each call got.
"""
import json
import sys
from concurrent import futures

import grpc

SERVICE = "forgekit.test.Echo"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(cfg):
    def record(method, context):
        emit({"ev": "call", "method": method,
              "metadata": [[k, v if isinstance(v, str) else v.hex()]
                           for k, v in context.invocation_metadata()]})

    def unary(request, context):
        record("Unary", context)
        context.set_trailing_metadata((("x-served-by", "origin"),
                                       ("x-echo-len", str(len(request)))))
        return b"echo:" + request

    def server_stream(request, context):
        record("ServerStream", context)
        n = int(request.decode() or "3")
        for i in range(n):
            yield f"part {i}".encode()
        context.set_trailing_metadata((("x-parts", str(n)),))

    def fail(request, context):
        record("Fail", context)
        context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

    def secret(request, context):
        record("Secret", context)
        return b"secret"

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Secret": grpc.unary_unary_rpc_method_handler(secret),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
    with open(cfg["key"], "rb") as k, open(cfg["cert"], "rb") as c:
        creds = grpc.ssl_server_credentials([(k.read(), c.read())])
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    emit({"ev": "ready", "port": port})
    server.wait_for_termination()


def pairs(metadata):
    return [[k, v if isinstance(v, str) else v.hex()] for k, v in (metadata or ())]


def failure(e):
    return {"code": e.code().name, "details": e.details(),
            "trailing": pairs(e.trailing_metadata())}


def client(cfg):
    with open(cfg["ca"], "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    out = {}
    with grpc.secure_channel(cfg["target"], creds) as channel:
        unary = channel.unary_unary(f"/{SERVICE}/Unary")
        try:
            response, call = unary.with_call(b"hi", metadata=(("x-client", "forgekit-test"),),
                                             timeout=15)
            out["unary"] = {"code": call.code().name, "response": response.decode(),
                            "trailing": pairs(call.trailing_metadata())}
        except grpc.RpcError as e:
            out["unary"] = failure(e)
        stream = channel.unary_stream(f"/{SERVICE}/ServerStream")
        try:
            call = stream(b"3", timeout=15)
            parts = [p.decode() for p in call]
            out["stream"] = {"code": call.code().name, "parts": parts,
                             "trailing": pairs(call.trailing_metadata())}
        except grpc.RpcError as e:
            out["stream"] = failure(e)
        for name in ("Fail", "Secret"):
            try:
                channel.unary_unary(f"/{SERVICE}/{name}")(b"x", timeout=15)
                out[name.lower()] = {"code": "OK"}
            except grpc.RpcError as e:
                out[name.lower()] = failure(e)
    emit(out)


if __name__ == "__main__":
    mode, cfg = sys.argv[1], json.loads(sys.argv[2])
    serve(cfg) if mode == "server" else client(cfg)
