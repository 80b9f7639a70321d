#!/usr/bin/python3
"""An HTTP/2-only TLS origin for forgekit's --ssl-bump tests, on hyper's h2.

Run with an interpreter that has the h2 library (Debian: python3-h2). Its
only argument is a JSON object:

  {"cert": "/path/leaf.pem", "key": "/path/leaf.key",
   "alpn": ["h2"],          # what it offers in ALPN; a connection that did
                            # not pick h2 is closed at once
   "max_streams": 100,      # its SETTINGS_MAX_CONCURRENT_STREAMS
   "window": 65535,         # its SETTINGS_INITIAL_WINDOW_SIZE
   "silent": false,         # true: after the handshake it sends nothing
                            # (no SETTINGS) and reads nothing
   "stall_tls": false}      # true: connections are accepted (event
                            # "accepted") but their TLS handshake never
                            # answered

It listens on 127.0.0.1 (an ephemeral port) and prints one JSON line per
event on stdout:

  {"ev": "ready", "port": N}
  {"ev": "conn", "conn": C, "alpn": "h2"}
  {"ev": "request", "conn": C, "stream": S, "headers": [[name, value], ...],
   "open": K}                       # K: streams open on C now
  {"ev": "end", "conn": C, "stream": S, "length": N, "sha256": "...",
   "trailers": [[name, value], ...] | null}
  {"ev": "reset", "conn": C, "stream": S, "code": N}   # the client reset it
  {"ev": "blocked", "conn": C, "stream": S, "sent": N} # no window left
  {"ev": "sent", "conn": C, "stream": S, "sent": N}    # a response ended
  {"ev": "error", "conn": C, "error": "..."}           # h2 refused a frame
  {"ev": "closed", "conn": C}

Responses, by path (query ignored):

  /allowed/trailers        200, a body, then trailers (grpc-status 0,
                           grpc-message, x-checksum)
  /allowed/trailers-only   200 with grpc-status in the head, END_STREAM on it
  /allowed/echo            200, JSON of what came (length, sha256, te,
                           trailers), then trailers x-echo: done
  /allowed/big?size=N      200 with content-length N, sent within the windows
  /allowed/slow            200 after 300 ms
  /allowed/drip            200 without content-length, "drip\n" three times
                           100 ms apart
  /allowed/hang            never answered
  /allowed/badlength       content-length 10 but 5 bytes
  /allowed/connheader      a connection-specific field (connection: close)
  /allowed/upper           an upper-case field name
  /allowed/reset           RST_STREAM INTERNAL_ERROR
  /allowed/refuse-once     RST_STREAM REFUSED_STREAM the first time, then 200
  /allowed/goaway          the first time: GOAWAY naming the stream before it
                           as the last processed, and no answer; then 200
  /allowed/die             the connection is closed at once, no GOAWAY
  /allowed/flood           5,000 frames that carry nothing (PING, PRIORITY,
                           WINDOW_UPDATE of 1, an unknown type) written at
                           once, then 200 as for anything else
  anything else            200 "origin <path>\\n"
"""
import hashlib
import json
import select
import socket
import ssl
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

LOCK = threading.Lock()
STATE = {"refused": False, "goaway": False}


class Die(Exception):
    """Ends the connection at once."""


def raw_frame(kind, flags, sid, payload=b""):
    """A frame written by hand (h2 keeps no state for these)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def flood_frames(sid, count):
    """`count` frames that carry no response: PING, PRIORITY, WINDOW_UPDATE of 1, type 0x20."""
    kinds = [
        raw_frame(0x6, 0, 0, b"flooding"),
        raw_frame(0x2, 0, sid, struct.pack(">IB", 0, 15)),
        raw_frame(0x8, 0, 0, struct.pack(">I", 1)),
        raw_frame(0x20, 0, 0),
    ]
    return b"".join(kinds[i % len(kinds)] for i in range(count))


def emit(obj):
    with LOCK:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def pairs(headers):
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers]


class Origin:
    def __init__(self, sock, n, cfg):
        self.sock = sock
        self.n = n
        self.cfg = cfg
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        ))
        self.streams = {}
        self.sends = {}
        self.timers = []

    def run(self):
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: int(self.cfg.get("max_streams", 100)),
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: int(self.cfg.get("window", 65535)),
        })
        self.conn.initiate_connection()
        self.flush()
        while True:
            now = time.monotonic()
            due = [t for t in self.timers if t[0] <= now]
            self.timers = [t for t in self.timers if t[0] > now]
            for _, fn in due:
                fn()
            self.flush()
            wait = min([t[0] for t in self.timers], default=now + 0.2) - now
            if not self.sock.pending():
                ready, _, _ = select.select([self.sock], [], [], max(0.0, wait))
                if not ready:
                    continue
            try:
                data = self.sock.recv(65536)
            except (ssl.SSLWantReadError, socket.timeout):
                continue
            except OSError:
                break
            if not data:
                break
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                emit({"ev": "error", "conn": self.n, "error": f"{type(e).__name__}: {e}"})
                self.flush()
                break
            try:
                for ev in events:
                    self.on_event(ev)
            except Die:
                break
            self.flush()

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            try:
                self.sock.sendall(out)
            except OSError:
                pass

    def on_event(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            headers = pairs(ev.headers)
            path = dict(headers).get(":path", "")
            self.streams[ev.stream_id] = {
                "headers": headers, "path": path.split("?")[0], "query": path,
                "length": 0, "hash": hashlib.sha256(), "trailers": None,
            }
            emit({"ev": "request", "conn": self.n, "stream": ev.stream_id, "headers": headers,
                  "open": self.conn.open_inbound_streams})
            base = path.split("?")[0]
            if base == "/allowed/reset":
                self.conn.reset_stream(ev.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
            elif base == "/allowed/refuse-once" and not STATE["refused"]:
                STATE["refused"] = True
                self.conn.reset_stream(ev.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        elif isinstance(ev, h2.events.DataReceived):
            s = self.streams.get(ev.stream_id)
            if s is not None:
                s["length"] += len(ev.data)
                s["hash"].update(ev.data)
            if ev.flow_controlled_length:
                try:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                except h2.exceptions.StreamClosedError:
                    pass
        elif isinstance(ev, h2.events.TrailersReceived):
            s = self.streams.get(ev.stream_id)
            if s is not None:
                s["trailers"] = pairs(ev.headers)
        elif isinstance(ev, h2.events.StreamEnded):
            s = self.streams.get(ev.stream_id)
            if s is None:
                return
            emit({"ev": "end", "conn": self.n, "stream": ev.stream_id, "length": s["length"],
                  "sha256": s["hash"].hexdigest(), "trailers": s["trailers"]})
            self.respond(ev.stream_id, s)
        elif isinstance(ev, h2.events.StreamReset):
            if ev.remote_reset:
                emit({"ev": "reset", "conn": self.n, "stream": ev.stream_id,
                      "code": int(ev.error_code)})
            self.sends.pop(ev.stream_id, None)
        elif isinstance(ev, h2.events.WindowUpdated):
            for sid in list(self.sends):
                self.pump(sid)

    def respond(self, sid, s):
        path = s["path"]
        c = self.conn
        try:
            if path == "/allowed/trailers":
                c.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
                c.send_data(sid, b"\x00\x00\x00\x00\x05hello")
                c.send_headers(sid, [("grpc-status", "0"), ("grpc-message", "all%20good"),
                                     ("x-checksum", "c0ffee")], end_stream=True)
            elif path == "/allowed/trailers-only":
                c.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc"),
                                     ("grpc-status", "5"), ("grpc-message", "not%20found")],
                               end_stream=True)
            elif path == "/allowed/echo":
                te = [v for k, v in s["headers"] if k == "te"]
                body = json.dumps({"length": s["length"], "sha256": s["hash"].hexdigest(),
                                   "te": te, "trailers": s["trailers"]}).encode()
                c.send_headers(sid, [(":status", "200"), ("content-type", "application/json")])
                c.send_data(sid, body)
                c.send_headers(sid, [("x-echo", "done")], end_stream=True)
            elif path == "/allowed/big":
                size = int(s["query"].split("size=")[1]) if "size=" in s["query"] else 4 << 20
                c.send_headers(sid, [(":status", "200"), ("content-length", str(size))])
                self.sends[sid] = {"left": size, "sent": 0, "blocked": False}
                self.pump(sid)
            elif path == "/allowed/slow":
                self.timers.append((time.monotonic() + 0.3, lambda: self.plain(sid, "slow\n")))
            elif path == "/allowed/hang":
                pass
            elif path == "/allowed/drip":
                c.send_headers(sid, [(":status", "200"), ("content-type", "text/plain")])
                for i in range(3):
                    self.timers.append((time.monotonic() + 0.1 * (i + 1),
                                        lambda i=i: self.drip(sid, i == 2)))
            elif path == "/allowed/die":
                raise Die()
            elif path == "/allowed/flood":
                self.flush()
                try:
                    self.sock.sendall(flood_frames(sid, 5000))
                except OSError:
                    pass
                self.plain(sid, f"origin {path}\n")
            elif path == "/allowed/goaway" and not STATE["goaway"]:
                STATE["goaway"] = True
                self.flush()
                # Written by hand: h2 refuses to send anything after its own GOAWAY.
                payload = struct.pack(">II", sid - 2, 0)
                self.sock.sendall(len(payload).to_bytes(3, "big") + b"\x07\x00" +
                                  struct.pack(">I", 0) + payload)
            elif path == "/allowed/badlength":
                c.send_headers(sid, [(":status", "200"), ("content-length", "10")])
                c.send_data(sid, b"short", end_stream=True)
            elif path == "/allowed/connheader":
                c.send_headers(sid, [(":status", "200"), ("connection", "close")],
                               end_stream=True)
            elif path == "/allowed/upper":
                c.send_headers(sid, [(":status", "200"), ("X-Upper", "1")], end_stream=True)
            else:
                self.plain(sid, f"origin {path}\n")
        except h2.exceptions.StreamClosedError:
            pass

    def drip(self, sid, last):
        try:
            self.conn.send_data(sid, b"drip\n", end_stream=last)
        except h2.exceptions.StreamClosedError:
            pass

    def plain(self, sid, text):
        body = text.encode()
        try:
            self.conn.send_headers(sid, [(":status", "200"), ("content-type", "text/plain"),
                                         ("content-length", str(len(body)))])
            self.conn.send_data(sid, body, end_stream=True)
        except h2.exceptions.StreamClosedError:
            pass

    def pump(self, sid):
        st = self.sends.get(sid)
        if st is None:
            return
        try:
            while st["left"] > 0:
                room = min(self.conn.local_flow_control_window(sid),
                           self.conn.max_outbound_frame_size, st["left"])
                if room <= 0:
                    if not st["blocked"]:
                        st["blocked"] = True
                        emit({"ev": "blocked", "conn": self.n, "stream": sid, "sent": st["sent"]})
                    return
                st["blocked"] = False
                self.conn.send_data(sid, b"b" * room, end_stream=room == st["left"])
                st["left"] -= room
                st["sent"] += room
        except h2.exceptions.StreamClosedError:
            pass
        emit({"ev": "sent", "conn": self.n, "stream": sid, "sent": st["sent"]})
        self.sends.pop(sid, None)


def serve(raw, n, cfg, ctx):
    try:
        sock = ctx.wrap_socket(raw, server_side=True)
    except (OSError, ssl.SSLError) as e:
        emit({"ev": "tls_error", "conn": n, "error": str(e)})
        raw.close()
        return
    alpn = sock.selected_alpn_protocol()
    emit({"ev": "conn", "conn": n, "alpn": alpn})
    try:
        if alpn == "h2" and cfg.get("silent"):
            while True:  # the connection is left as it is until the process ends
                time.sleep(3600)
        if alpn == "h2":
            Origin(sock, n, cfg).run()
    except Exception as e:  # reported, the origin goes on
        emit({"ev": "error", "conn": n, "error": f"{type(e).__name__}: {e}"})
    finally:
        try:
            sock.close()
        except OSError:
            pass
        emit({"ev": "closed", "conn": n})


def main():
    cfg = json.loads(sys.argv[1])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cfg["cert"], cfg["key"])
    ctx.set_alpn_protocols(cfg.get("alpn", ["h2"]))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    emit({"ev": "ready", "port": listener.getsockname()[1]})
    n = 0
    held = []
    while True:
        raw, _ = listener.accept()
        n += 1
        if cfg.get("stall_tls"):
            held.append(raw)
            emit({"ev": "accepted", "conn": n})
            continue
        threading.Thread(target=serve, args=(raw, n, cfg, ctx), daemon=True).start()


if __name__ == "__main__":
    main()
