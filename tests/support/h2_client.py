#!/usr/bin/python3
"""An HTTP/2 client for forgekit's --ssl-bump tests, built on hyper's h2.

Run with an interpreter that has the h2 library (Debian: python3-h2). It
reads one scenario (JSON) from stdin, or from the file named by its only
argument, and prints one JSON result on stdout.

It connects to the proxy, sends CONNECT host:port, wraps the socket in TLS
(the session CA trusted, SNI = host, ALPN h2 only) and plays the steps. The
h2 library decodes what the server sends; an independent frame reader beside
it checks frame sizes and flow control and records connection-level frames.

Scenario (keys other than "proxy" and "ca" are optional):

  {"proxy": "127.0.0.1:8080", "ca": "/path/ca.pem", "host": "api.github.com",
   "port": 443, "timeout": 15,
   "preface": true,            # false: no client preface (for "raw" garbage)
   "settings": {"INITIAL_WINDOW_SIZE": 16384},   # the client's SETTINGS
   "window": "auto",           # "auto": return every DATA byte at once;
                               # "lazy": a stream's window only when it is 0,
                               # the connection's when below 16384;
                               # "manual": only the "window" steps
   "connection_window": 0,     # an extra connection WINDOW_UPDATE at start
   "steps": [...]}

Steps ("stream" is a stream id; "timeout" on waits is in seconds, default 10;
a wait that times out is recorded in "timeouts", and the run goes on):

  {"op": "headers", "stream": 1, "headers": [[name, value], ...], "end": true}
  {"op": "data", "stream": 1, "text": "abc" | "size": 1048576, "end": true,
   "chunk": 1000}              # flow-controlled; "chunk" caps each frame
  {"op": "reset", "stream": 1, "code": 8}
  {"op": "ping", "data": "0102030405060708"}
  {"op": "goaway", "code": 0, "last_stream": 0}
  {"op": "window", "stream": 0, "increment": 65535}
  {"op": "frame", "type": 1, "flags": 4, "stream": 1,
   "payload_hex": "..." | "payload_size": 16385}  # written as is
  {"op": "raw", "text": "..." | "hex": "..."}     # bytes written as is
  {"op": "flood", "count": 1000, "first_stream": 1, "headers": [...],
   "code": 8}                  # HEADERS then RST_STREAM per stream, one write
  {"op": "wait", "streams": [1, 3]}  # until each ended (END_STREAM or reset)
  {"op": "wait", "ended": 5}         # until so many streams ended
  {"op": "wait", "close": true}      # until the server closes the connection
  {"op": "wait", "ping_ack": true}
  {"op": "wait", "settings": true}   # until the server's SETTINGS came
  {"op": "sleep", "ms": 100}         # reads and answers meanwhile

Result: {"alpn", "settings" (the server's, by name), "streams": {id: {"status",
"headers", "informational", "trailers", "body" (text, up to 64 KiB),
"length", "sha256", "ended", "reset" (RST_STREAM code from the server),
"local_reset", "sent": {"length", "sha256"}}}, "goaway": {"code",
"last_stream", "debug"} (the last one), "goaways", "closed", "ping_acks",
"frames" (counts by type), "max_data_frame", "flow_violations",
"client_error" (what h2 refused in the server's frames), "timeouts",
"step_errors", "write_error", "error" (setup failures, the global timeout)}.
"""
import hashlib
import json
import os
import select
import signal
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_TYPES = {
    0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS",
    5: "PUSH_PROMISE", 6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE",
    9: "CONTINUATION",
}
SETTING_NAMES = {
    1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH", 3: "MAX_CONCURRENT_STREAMS",
    4: "INITIAL_WINDOW_SIZE", 5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE",
    8: "ENABLE_CONNECT_PROTOCOL", 9: "NO_RFC7540_PRIORITIES",
}
SETTING_CODES = {name: code for code, name in SETTING_NAMES.items()}
BODY_TEXT_MAX = 64 * 1024


class GlobalTimeout(Exception):
    pass


class Frames:
    """Splits a byte stream into frames: (type, flags, stream, payload)."""

    def __init__(self, skip=b""):
        self.buf = b""
        self.skip = skip

    def feed(self, data):
        self.buf += data
        if self.skip:
            n = min(len(self.skip), len(self.buf))
            if self.buf[:n] != self.skip[:n]:
                self.skip = b""  # not the preface after all
            else:
                self.buf = self.buf[n:]
                self.skip = self.skip[n:]
                if self.skip:
                    return []
        out = []
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            out.append((ftype, flags, sid, self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
        return out


def settings_of(payload):
    return {
        struct.unpack(">H", payload[i:i + 2])[0]: struct.unpack(">I", payload[i + 2:i + 6])[0]
        for i in range(0, len(payload) - 5, 6)
    }


def data_length(flags, payload):
    return len(payload)  # flow control counts the padding too


class Client:
    def __init__(self, sc):
        self.sc = sc
        self.deadline = time.monotonic() + float(sc.get("timeout", 15))
        self.window_mode = sc.get("window", "auto")
        self.sock = None
        self.conn = None
        self.h2_broken = False
        self.raw_mode = not sc.get("preface", True)
        self.closed = False
        self.incoming = Frames()
        self.outgoing = Frames(skip=MAGIC)
        # Flow control as this client granted it (from the frames it sent).
        self.initial_window = 65535
        self.conn_window = 65535
        self.stream_windows = {}
        self.stream_granted_base = {}
        self.result = {
            "alpn": None, "settings": {}, "settings_frames": 0, "streams": {},
            "goaway": None, "goaways": [], "closed": False, "ping_acks": [],
            "frames": {}, "max_data_frame": 0, "flow_violations": [],
            "client_error": None, "timeouts": [], "step_errors": [],
            "write_error": None, "close_error": None, "error": None,
        }

    # --- bookkeeping -----------------------------------------------------

    def stream(self, sid):
        key = str(sid)
        s = self.result["streams"].get(key)
        if s is None:
            s = {
                "status": None, "headers": None, "informational": [], "trailers": None,
                "body": "", "length": 0, "sha256": None, "ended": False, "reset": None,
                "local_reset": None, "sent": {"length": 0, "sha256": None},
                "_hash": hashlib.sha256(), "_sent_hash": hashlib.sha256(), "_body": b"",
            }
            self.result["streams"][key] = s
        return s

    def stream_window(self, sid):
        if sid not in self.stream_windows:
            self.stream_windows[sid] = self.initial_window
        return self.stream_windows[sid]

    def ended(self, sid):
        s = self.result["streams"].get(str(sid))
        return s is not None and (s["ended"] or s["reset"] is not None or
                                  s["local_reset"] is not None)

    # --- output ----------------------------------------------------------

    def write(self, data, track=True):
        if not data:
            return
        if track:
            for ftype, flags, sid, payload in self.outgoing.feed(data):
                self.note_sent_frame(ftype, flags, sid, payload)
        if self.closed or self.result["write_error"]:
            return
        try:
            self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
            self.sock.sendall(data)
        except (OSError, ssl.SSLError) as e:
            self.result["write_error"] = f"{type(e).__name__}: {e}"

    def flush(self):
        if self.conn is not None:
            self.write(self.conn.data_to_send())

    def note_sent_frame(self, ftype, flags, sid, payload):
        if ftype == 4 and not flags & 1:
            values = settings_of(payload)
            if 4 in values:
                self.initial_window = values[4]
        elif ftype == 8 and len(payload) == 4:
            inc = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            if sid == 0:
                self.conn_window += inc
            else:
                self.stream_windows[sid] = self.stream_window(sid) + inc

    # --- input -----------------------------------------------------------

    def note_frame(self, ftype, flags, sid, payload):
        name = FRAME_TYPES.get(ftype, str(ftype))
        self.result["frames"][name] = self.result["frames"].get(name, 0) + 1
        if ftype == 0:
            n = data_length(flags, payload)
            self.result["max_data_frame"] = max(self.result["max_data_frame"], len(payload))
            window = self.stream_window(sid)
            if n > window or n > self.conn_window:
                self.result["flow_violations"].append(
                    {"stream": sid, "length": n, "stream_window": window,
                     "connection_window": self.conn_window})
            self.stream_windows[sid] = window - n
            self.conn_window -= n
        elif ftype == 3 and len(payload) == 4:
            self.stream(sid)["reset"] = struct.unpack(">I", payload)[0]
        elif ftype == 4 and not flags & 1:
            self.result["settings_frames"] += 1
            for code, value in settings_of(payload).items():
                self.result["settings"][SETTING_NAMES.get(code, str(code))] = value
        elif ftype == 6 and flags & 1:
            self.result["ping_acks"].append(payload.hex())
        elif ftype == 7 and len(payload) >= 8:
            last, code = struct.unpack(">II", payload[:8])
            g = {"code": code, "last_stream": last & 0x7FFFFFFF,
                 "debug": payload[8:].decode("utf-8", "replace")}
            self.result["goaway"] = g
            self.result["goaways"].append(g)

    def on_event(self, ev):
        if isinstance(ev, h2.events.InformationalResponseReceived):
            self.stream(ev.stream_id)["informational"].append(pairs(ev.headers))
        elif isinstance(ev, h2.events.ResponseReceived):
            s = self.stream(ev.stream_id)
            s["headers"] = pairs(ev.headers)
            for k, v in s["headers"]:
                if k == ":status":
                    s["status"] = int(v)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.stream(ev.stream_id)["trailers"] = pairs(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            s = self.stream(ev.stream_id)
            s["length"] += len(ev.data)
            s["_hash"].update(ev.data)
            if len(s["_body"]) <= BODY_TEXT_MAX:
                s["_body"] += ev.data[:BODY_TEXT_MAX + 1 - len(s["_body"])]
            if self.window_mode == "auto" and ev.flow_controlled_length:
                self.grant(0, ev.flow_controlled_length)
                if not ev.stream_ended:
                    self.grant(ev.stream_id, ev.flow_controlled_length)
        elif isinstance(ev, h2.events.StreamEnded):
            self.stream(ev.stream_id)["ended"] = True
        elif isinstance(ev, h2.events.StreamReset):
            if not ev.remote_reset:
                self.stream(ev.stream_id)["local_reset"] = ev.error_code

    def grant(self, sid, inc):
        if inc <= 0 or self.h2_broken:
            return
        try:
            self.conn.increment_flow_control_window(inc, None if sid == 0 else sid)
        except h2.exceptions.H2Error:
            pass  # the stream closed meanwhile

    def lazy_grants(self):
        if self.window_mode != "lazy" or self.h2_broken:
            return
        for sid, window in list(self.stream_windows.items()):
            if window <= 0 and not self.ended(sid):
                self.grant(sid, self.initial_window - window)
        if self.conn_window < 16384:
            self.grant(0, 65535 - self.conn_window)

    def receive(self, data):
        passed = b""
        for f in self.incoming.feed(data):
            self.note_frame(*f)
            ftype, flags, sid, payload = f
            # h2 closes its state on a GOAWAY and then refuses the frames of
            # streams the server still finishes: GOAWAY is recorded here only.
            if ftype != 7:
                passed += frame_bytes(ftype, flags, sid, payload)
        if self.conn is None or self.h2_broken or self.raw_mode or not passed:
            return
        try:
            events = self.conn.receive_data(passed)
        except Exception as e:
            self.h2_broken = True
            self.result["client_error"] = f"{type(e).__name__}: {e}"
            self.flush()  # h2's own GOAWAY
            return
        for ev in events:
            self.on_event(ev)
        self.lazy_grants()
        self.flush()

    def pump(self, done, timeout):
        """Reads until done() or the connection closed; False on a timeout."""
        until = min(self.deadline, time.monotonic() + timeout)
        while not done():
            if self.closed:
                return True
            left = until - time.monotonic()
            if left <= 0:
                if time.monotonic() >= self.deadline:
                    raise GlobalTimeout()
                return False
            if not self.sock.pending():
                ready, _, _ = select.select([self.sock], [], [], left)
                if not ready:
                    continue
            self.read_once(left)
        return True

    def drain(self):
        """Reads what has already arrived, without waiting."""
        while not self.closed and (self.sock.pending() or
                                   select.select([self.sock], [], [], 0)[0]):
            if not self.read_once(1):
                return

    def read_once(self, timeout):
        """One read into the connection; False when nothing came."""
        try:
            self.sock.settimeout(max(0.05, timeout))
            data = self.sock.recv(65536)
        except (ssl.SSLWantReadError, socket.timeout):
            return False
        except (OSError, ssl.SSLError) as e:
            self.closed = True
            self.result["close_error"] = f"{type(e).__name__}: {e}"
            return False
        if not data:
            self.closed = True
            return False
        self.receive(data)
        return True

    # --- setup -----------------------------------------------------------

    def connect(self):
        sc = self.sc
        self.sock = tunnel_h2(sc["proxy"], sc["ca"], sc.get("host", "api.github.com"),
                              int(sc.get("port", 443)))
        self.result["alpn"] = self.sock.selected_alpn_protocol()
        if self.result["alpn"] != "h2":
            raise RuntimeError(f"ALPN: the server chose {self.result['alpn']!r}, not h2")
        config = h2.config.H2Configuration(
            client_side=True, header_encoding=None,
            validate_outbound_headers=False, normalize_outbound_headers=False,
        )
        self.conn = h2.connection.H2Connection(config=config)
        local = {
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 65536,
        }
        for name, value in sc.get("settings", {}).items():
            local[SETTING_CODES[name]] = value
        self.conn.local_settings = h2.settings.Settings(client=True, initial_values=local)
        self.conn.initiate_connection()
        if sc.get("preface", True):
            self.flush()
            if sc.get("connection_window"):
                self.grant(0, int(sc["connection_window"]))
                self.flush()
        else:
            self.outgoing.feed(self.conn.data_to_send())  # kept from the wire

    # --- steps -----------------------------------------------------------

    def lift_stream_limit(self):
        # The test decides how many streams to open, not the server's limit.
        rs = self.conn.remote_settings
        if rs.max_concurrent_streams < 2**31 - 1:
            rs[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 2**31 - 1
            rs.acknowledge()

    def send_data(self, step):
        sid = step["stream"]
        if "text" in step:
            data = step["text"].encode()
        else:
            data = os.urandom(int(step["size"]))
        s = self.stream(sid)
        cap = int(step.get("chunk", 1 << 30))
        at = 0
        while at < len(data) or (at == 0 and not data):
            if not data:
                self.conn.send_data(sid, b"", end_stream=bool(step.get("end")))
                self.flush()
                break

            def window():
                return min(self.conn.local_flow_control_window(sid),
                           self.conn.max_outbound_frame_size, cap)

            if window() <= 0:
                if not self.pump(lambda: self.ended(sid) or window() > 0, 10):
                    raise RuntimeError(f"upload stalled after {at} bytes: no WINDOW_UPDATE")
                if self.closed or self.ended(sid):
                    raise RuntimeError(f"stream ended after {at} bytes of the upload")
                continue
            piece = data[at:at + window()]
            at += len(piece)
            end = bool(step.get("end")) and at == len(data)
            self.conn.send_data(sid, piece, end_stream=end)
            s["_sent_hash"].update(piece)
            s["sent"]["length"] += len(piece)
            self.flush()
            self.drain()  # answers what came meanwhile

    def run_step(self, i, step):
        op = step["op"]
        timeout = float(step.get("timeout", 10))
        if op == "headers":
            self.lift_stream_limit()
            for n in range(int(step.get("count", 1))):
                sid = step["stream"] + 2 * n
                self.stream(sid)
                headers = [[k, v.replace("{n}", str(n))] for k, v in step["headers"]]
                self.conn.send_headers(sid, headers_of(headers), end_stream=bool(step.get("end")))
            self.flush()
        elif op == "data":
            self.send_data(step)
        elif op == "reset":
            self.conn.reset_stream(step["stream"], int(step.get("code", 8)))
            self.flush()
        elif op == "ping":
            self.conn.ping(bytes.fromhex(step.get("data", "0102030405060708")))
            self.flush()
        elif op == "goaway":
            # Written by hand: h2 would refuse every frame after its own GOAWAY.
            payload = struct.pack(">II", int(step.get("last_stream", 0)), int(step.get("code", 0)))
            self.write(frame_bytes(7, 0, 0, payload), track=False)
        elif op == "window":
            self.grant(int(step.get("stream", 0)), int(step["increment"]))
            self.flush()
        elif op == "frame":
            size = step.get("payload_size", 0)
            if size == "over_max":  # one byte over the server's SETTINGS_MAX_FRAME_SIZE
                size = self.result["settings"].get("MAX_FRAME_SIZE", 16384) + 1
            payload = (bytes.fromhex(step["payload_hex"]) if "payload_hex" in step
                       else b"\0" * int(size))
            self.write(frame_bytes(step["type"], step.get("flags", 0), step.get("stream", 0),
                                   payload), track=False)
        elif op == "raw":
            data = step["text"].encode() if "text" in step else bytes.fromhex(step["hex"])
            self.write(data, track=False)
        elif op == "flood":
            self.lift_stream_limit()
            headers = headers_of(step["headers"])
            sid = int(step.get("first_stream", 1))
            for _ in range(int(step["count"])):
                self.conn.send_headers(sid, headers, end_stream=True)
                self.conn.reset_stream(sid, int(step.get("code", 8)))
                sid += 2
            self.flush()
        elif op == "wait":
            if "streams" in step:
                ids = step["streams"]
                done = lambda: all(self.ended(s) for s in ids)
            elif "ended" in step:
                n = int(step["ended"])
                done = lambda: sum(1 for k in self.result["streams"] if self.ended(k)) >= n
            elif step.get("close"):
                done = lambda: self.closed
            elif step.get("ping_ack"):
                done = lambda: bool(self.result["ping_acks"])
            elif step.get("settings"):
                done = lambda: self.result["settings_frames"] > 0
            else:
                raise ValueError(f"wait for what: {step}")
            if not self.pump(done, timeout):
                self.result["timeouts"].append({"step": i, **step})
        elif op == "sleep":
            self.pump(lambda: False, float(step["ms"]) / 1000)
        else:
            raise ValueError(f"unknown op {op!r}")

    def run(self):
        self.connect()
        for i, step in enumerate(self.sc.get("steps", [])):
            try:
                self.run_step(i, step)
            except GlobalTimeout:
                raise
            except Exception as e:  # recorded; the run goes on
                self.result["step_errors"].append(
                    {"step": i, "op": step["op"], "error": f"{type(e).__name__}: {e}"})
                self.flush()

    def finish(self):
        self.result["closed"] = self.closed
        for s in self.result["streams"].values():
            body = s.pop("_body")
            s["sha256"] = s.pop("_hash").hexdigest()
            s["sent"]["sha256"] = s.pop("_sent_hash").hexdigest()
            s["body"] = body.decode("utf-8", "replace") if s["length"] <= BODY_TEXT_MAX else None
        return self.result


def tunnel_h2(proxy, ca, host, port=443):
    """A TLS socket offering h2, through a CONNECT to host:port on the proxy (host:port)."""
    phost, pport = proxy.rsplit(":", 1)
    raw = socket.create_connection((phost, int(pport)), timeout=10)
    raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = raw.recv(1)
        if not chunk:
            raise RuntimeError(f"CONNECT answer cut short: {answer!r}")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT refused: {answer!r}")
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    return ctx.wrap_socket(raw, server_hostname=host)


def frame_bytes(ftype, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def headers_of(pairs_):
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs_]


def pairs(headers):
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers]


def main():
    source = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    sc = json.load(source)
    client = Client(sc)

    def on_alarm(_sig, _frame):
        raise GlobalTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(float(sc.get("timeout", 15))) + 2)
    try:
        client.run()
    except GlobalTimeout:
        client.result["error"] = f"global timeout of {sc.get('timeout', 15)} s"
    except Exception as e:
        client.result["error"] = f"{type(e).__name__}: {e}"
    signal.alarm(0)
    try:
        client.sock and client.sock.close()
    except OSError:
        pass
    json.dump(client.finish(), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
