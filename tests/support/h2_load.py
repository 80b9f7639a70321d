#!/usr/bin/python3
"""A busy, well-behaved HTTP/2 client for forgekit's --ssl-bump tests.

Reads one JSON scenario on stdin:

  {"proxy": "127.0.0.1:8080", "ca": "/path/ca.pem", "host": "api.github.com",
   "path": "/allowed/big", "total": 1000, "inflight": 100, "ping_every": 5}

On one connection (CONNECT, then TLS with ALPN h2) it keeps up to
"inflight" GET streams open (never more than the server's
MAX_CONCURRENT_STREAMS, and only once the server's SETTINGS came), reads
everything at once and returns every DATA byte's window, and sends a PING
after every "ping_every" finished responses (as gRPC clients and browsers
do), until "total" responses have ended. Prints one JSON line:
{"done", "statuses", "resets", "goaway", "error"}.
"""
import json
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events

sc = json.load(sys.stdin)
host = sc.get("host", "api.github.com")
total, inflight, ping_every = sc["total"], sc["inflight"], sc.get("ping_every", 0)
result = {"done": 0, "statuses": {}, "resets": {}, "goaway": None, "error": None}
try:
    ph, pp = sc["proxy"].rsplit(":", 1)
    raw = socket.create_connection((ph, int(pp)), timeout=30)
    raw.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = raw.recv(4096)
        if not got:
            raise RuntimeError("the proxy closed the connection after CONNECT")
        head += got
    ctx = ssl.create_default_context(cafile=sc["ca"])
    ctx.set_alpn_protocols(["h2"])
    t = ctx.wrap_socket(raw, server_hostname=host)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.increment_flow_control_window(2**30)
    t.sendall(c.data_to_send())
    settled, open_streams, started = False, set(), 0
    while result["done"] < total and result["goaway"] is None:
        if settled:
            limit = min(inflight, c.remote_settings.max_concurrent_streams)
            while len(open_streams) < limit and started < total:
                sid = c.get_next_available_stream_id()
                c.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                     (":authority", host), (":path", sc["path"])],
                               end_stream=True)
                open_streams.add(sid)
                started += 1
        out = c.data_to_send()
        if out:
            t.sendall(out)
        data = t.recv(65536)
        if not data:
            result["error"] = "the server closed the connection"
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                settled = True
            elif isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[b":status"].decode()
                result["statuses"][status] = result["statuses"].get(status, 0) + 1
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                open_streams.discard(ev.stream_id)
                result["done"] += 1
                if ping_every and result["done"] % ping_every == 0:
                    c.ping(b"%08d" % (result["done"] % 10**8))
            elif isinstance(ev, h2.events.StreamReset):
                open_streams.discard(ev.stream_id)
                code = str(int(ev.error_code))
                result["resets"][code] = result["resets"].get(code, 0) + 1
            elif isinstance(ev, h2.events.ConnectionTerminated):
                result["goaway"] = {"code": int(ev.error_code),
                                    "debug": (ev.additional_data or b"").decode("latin-1")}
except Exception as e:  # reported, not raised: the test reads the JSON
    result["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(result))
