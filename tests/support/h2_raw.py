#!/usr/bin/python3
"""A raw HTTP/2 frame client for forgekit's --ssl-bump conformance and flood tests.

Unlike h2_client.py (hyper's h2, which keeps a client's state machine and
refuses to send what a client must not), this writes frames exactly as the
steps give them and records every frame the server sends. It needs only
hyper's hpack (Debian: python3-hpack, a dependency of python3-h2).

Reads one scenario (JSON) on stdin and prints one result (JSON) on stdout:

  {"proxy": "127.0.0.1:8080", "ca": "/path/ca.pem", "host": "api.github.com",
   "timeout": 20, "cases": {"name": [step, ...], ...}}

Each case runs on its own connection (CONNECT host:443, TLS with ALPN h2, the
session CA trusted), one after the other. Steps:

  {"op": "preface", "settings": [[4, 65535]], "wait": true}
      # magic and SETTINGS; waits for the server's SETTINGS (acknowledged
      # like every SETTINGS the server sends)
  {"op": "headers", "stream": 1, "fields": [[name, value], ...] | "block_hex": "...",
   "end_stream": true, "end_headers": true, "pad": 0, "priority": [dependency, weight]}
  {"op": "continuation", "stream": 1, "fields" | "block_hex", "end_headers": true}
  {"op": "data", "stream": 1, "text": "..." | "size": 100, "end_stream": false, "pad": 0}
  {"op": "frame", "type": 2, "flags": 0, "stream": 1, "hex": "..."}
  {"op": "raw", "hex": "..."}  # bytes written as is (e.g. the magic alone: "magic": true)
  {"op": "repeat", "count": 1000, "steps": [...], "stream_step": 2}
      # the frames of "steps", "count" times, in writes of about 64 KiB (what
      # the server sent meanwhile is read between them); a step's stream id
      # grows by stream_step (its own or the repeat's) each round
  {"op": "wait", "until": "goaway" | "close" | "settings" | "ping_ack" | "stream_end",
   "stream": 1, "timeout": 5}  # stream_end: END_STREAM or RST_STREAM on "stream"
  {"op": "sleep", "ms": 100}   # reading meanwhile
  {"op": "blast", "ms": 3000}  # unknown-type frames as fast as the server takes them,
                               # without reading, until it closes or the time is up

Fields are HPACK-encoded by one encoder per connection (hpack.Encoder), so a
header block may index fields an earlier one added.

Result: {"cases": {"name": {"frames": [...], "closed", "error", "sent"}}}, each
frame {"type", "flags", "stream", "length", "t" (ms)} plus "code" (RST_STREAM,
GOAWAY), "last_stream" and "debug" (GOAWAY), "status" and "headers" (a whole
HEADERS block), "end_stream" (HEADERS, DATA). DATA frames are not listed past
the first 1000; "data_bytes" counts their payload.
"""
import json
import select
import socket
import ssl
import struct
import sys
import time

import hpack

from h2_client import tunnel_h2

MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
WRITE_BATCH = 64 * 1024


def frame(ftype, flags, sid, payload=b""):
    return (len(payload).to_bytes(3, "big") + bytes([ftype, flags]) +
            struct.pack(">I", sid & 0x7FFFFFFF) + payload)


class Connection:
    def __init__(self, sc, deadline):
        self.sc = sc
        self.start = time.monotonic()
        self.deadline = deadline
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.block = None
        self.result = {"frames": [], "closed": False, "error": None, "sent": 0, "data_bytes": 0}
        self.data_frames = 0
        self.got_settings = False
        self.sock = None

    # --- connection ---

    def connect(self):
        self.sock = tunnel_h2(self.sc["proxy"], self.sc["ca"], self.sc.get("host", "api.github.com"))
        if self.sock.selected_alpn_protocol() != "h2":
            raise RuntimeError(f"ALPN chose {self.sock.selected_alpn_protocol()!r}, not h2")

    def write(self, data):
        if self.result["closed"] or not data:
            return
        try:
            self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
            self.sock.sendall(data)
            self.result["sent"] += len(data)
        except (OSError, ssl.SSLError):
            self.result["closed"] = True

    # --- building frames ---

    def block_of(self, step):
        if "block_hex" in step:
            return bytes.fromhex(step["block_hex"])
        return self.enc.encode([(k.encode("latin-1"), v.encode("latin-1"))
                                for k, v in step["fields"]])

    def frames_of(self, step, sid):
        op = step["op"]
        if op == "headers":
            flags = (1 if step.get("end_stream", True) else 0) | \
                (4 if step.get("end_headers", True) else 0)
            prefix, pad = b"", int(step.get("pad", 0))
            if "pad" in step:
                flags |= 0x8
                prefix += bytes([pad])
            if "priority" in step:
                dep, weight = step["priority"]
                flags |= 0x20
                prefix += struct.pack(">IB", dep, weight)
            return frame(1, flags, sid, prefix + self.block_of(step) + b"\0" * pad)
        if op == "continuation":
            return frame(9, 4 if step.get("end_headers", True) else 0, sid, self.block_of(step))
        if op == "data":
            data = (step["text"].encode("latin-1") if "text" in step
                    else b"x" * int(step.get("size", 0)))
            flags = 1 if step.get("end_stream") else 0
            if "pad" in step:
                flags |= 0x8
                data = bytes([int(step["pad"])]) + data + b"\0" * int(step["pad"])
            return frame(0, flags, sid, data)
        if op == "frame":
            return frame(int(step["type"]), int(step.get("flags", 0)), sid,
                         bytes.fromhex(step.get("hex", "")))
        raise ValueError(f"not a frame step: {op}")

    # --- reading ---

    def note(self, ftype, flags, sid, payload):
        f = {"type": ftype, "flags": flags, "stream": sid, "length": len(payload),
             "t": round((time.monotonic() - self.start) * 1000)}
        if ftype == 3 and len(payload) == 4:
            f["code"] = struct.unpack(">I", payload)[0]
        elif ftype == 7 and len(payload) >= 8:
            last, code = struct.unpack(">II", payload[:8])
            f.update(code=code, last_stream=last & 0x7FFFFFFF,
                     debug=payload[8:].decode("utf-8", "replace"))
        elif ftype == 4 and not flags & 1:
            self.got_settings = True
            self.write(frame(4, 1, 0))
        elif ftype in (1, 9):
            if ftype == 1:
                block = payload
                if flags & 0x8:
                    block = block[1:len(block) - block[0]]
                if flags & 0x20:
                    block = block[5:]
                self.block = [flags, block]
            elif self.block is not None:
                self.block[1] += payload
            if self.block is None or not flags & 4:
                return
            f["end_stream"] = bool(self.block[0] & 1)
            try:
                fields = [[k.decode("latin-1"), v.decode("latin-1")]
                          for k, v in self.dec.decode(self.block[1], raw=True)]
                f["headers"] = fields
                f["status"] = next((int(v) for k, v in fields if k == ":status"), None)
            except Exception as e:  # recorded: the server's block did not decode
                f["headers_error"] = f"{type(e).__name__}: {e}"
            self.block = None
            f["type"] = 1
        elif ftype == 0:
            f["end_stream"] = bool(flags & 1)
            self.result["data_bytes"] += len(payload)
            self.data_frames += 1
            if self.data_frames > 1000:
                return
        self.result["frames"].append(f)

    def read_some(self, timeout):
        if self.result["closed"]:
            return False
        if not self.sock.pending():
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not ready:
                return False
        try:
            self.sock.settimeout(1)
            data = self.sock.recv(65536)
        except (ssl.SSLWantReadError, socket.timeout):
            return False
        except (OSError, ssl.SSLError):
            data = b""
        if not data:
            self.result["closed"] = True
            return False
        self.buf += data
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            self.note(self.buf[3], self.buf[4], sid, self.buf[9:9 + n])
            self.buf = self.buf[9 + n:]
        return True

    def pump(self, done, seconds):
        until = min(self.deadline, time.monotonic() + seconds)
        while not done() and not self.result["closed"]:
            left = until - time.monotonic()
            if left <= 0:
                return
            self.read_some(left)

    def drain(self):
        while self.read_some(0):
            pass

    # --- steps ---

    def waiter(self, step):
        frames = self.result["frames"]
        sid = step.get("stream")
        return {
            "goaway": lambda: any(f["type"] == 7 for f in frames),
            "close": lambda: self.result["closed"],
            "settings": lambda: self.got_settings,
            "ping_ack": lambda: any(f["type"] == 6 and f["flags"] & 1 for f in frames),
            "stream_end": lambda: any(f["stream"] == sid and (f["type"] == 3 or f.get("end_stream"))
                                      for f in frames),
        }[step["until"]]

    @staticmethod
    def static(step):
        """Whether a repeat's rounds are all alike (no stream ids grow, no HPACK state)."""
        return not step.get("stream_step") and all(
            not s.get("stream_step") and "fields" not in s for s in step["steps"])

    def run(self, steps):
        for step in steps:
            op = step["op"]
            if op == "preface":
                self.write(MAGIC + frame(4, 0, 0, b"".join(
                    struct.pack(">HI", k, v) for k, v in step.get("settings", []))))
                if step.get("wait", True):
                    self.pump(lambda: self.got_settings, 5)
            elif op == "repeat" and self.static(step):
                # The same frames each round: built once.
                rnd = b"".join(self.frames_of(s, int(s.get("stream", 0))) for s in step["steps"])
                per = max(1, WRITE_BATCH // max(1, len(rnd)))
                left = int(step["count"])
                while left > 0 and not self.result["closed"]:
                    self.write(rnd * min(per, left))
                    left -= per
                    self.drain()
            elif op == "repeat":
                out = []
                size = 0
                for i in range(int(step["count"])):
                    for s in step["steps"]:
                        grow = int(s.get("stream_step", step.get("stream_step", 0)))
                        out.append(self.frames_of(s, int(s.get("stream", 0)) + grow * i))
                        size += len(out[-1])
                    if size >= WRITE_BATCH:
                        self.write(b"".join(out))
                        out, size = [], 0
                        self.drain()
                self.write(b"".join(out))
            elif op == "raw":
                self.write(MAGIC if step.get("magic") else bytes.fromhex(step["hex"]))
            elif op == "wait":
                self.pump(self.waiter(step), float(step.get("timeout", 5)))
            elif op == "sleep":
                self.pump(lambda: False, float(step["ms"]) / 1000)
            elif op == "blast":
                junk = frame(0x20, 0, 0, b"\0" * 16000) * 4
                until = min(self.deadline, time.monotonic() + float(step["ms"]) / 1000)
                while not self.result["closed"] and time.monotonic() < until:
                    self.write(junk)
                continue  # what came meanwhile is read by the next step
            else:
                self.write(self.frames_of(step, int(step.get("stream", 0))))
            self.drain()


def main():
    sc = json.load(sys.stdin)
    deadline = time.monotonic() + float(sc.get("timeout", 20))
    results = {}
    for name, steps in sc["cases"].items():
        conn = Connection(sc, deadline)
        try:
            conn.connect()
            conn.run(steps)
        except Exception as e:  # reported in the JSON: the test reads it
            conn.result["error"] = f"{type(e).__name__}: {e}"
        try:
            conn.sock and conn.sock.close()
        except OSError:
            pass
        results[name] = conn.result
    json.dump({"cases": results}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
