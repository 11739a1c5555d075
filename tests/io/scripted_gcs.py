"""ScriptedGCS: a tiny media-read server on 127.0.0.1 that misbehaves exactly as a test asks.

LocalGCS cannot replace an object at an exact point inside one read, answer a ranged GET with
the whole object, cut a connection after an exact byte count or echo request headers; this
server does each on request, for GET /download/storage/v1/b/B/o/O?alt=media with one Range.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d+)$")


@dataclasses.dataclass
class Script:
    """What the server does.

    Attributes:
      versions: object contents, oldest first; version i has generation ``first_generation + i``.
      switch_after: after this many answered GETs the next version becomes current (None: never).
      on_old_generation: what a GET naming a generation other than the current one gets:
        "404" (GCS without versioning), "412", or "ignore" (answer the current version).
      send_generation: send x-goog-generation.
      whole_object: answer every GET with 200 and the whole object, chunked.
      cut_after_total: send at most this many body bytes over all GETs, then close each
        connection (a clean FIN, so every byte sent arrives) short of its Content-Length
        (None: never).
      echo_status: answer every GET with this status and a body echoing the request headers.
    """

    versions: list[bytes]
    first_generation: int = 1_000
    switch_after: int | None = None
    on_old_generation: str = "404"
    send_generation: bool = True
    whole_object: bool = False
    cut_after_total: int | None = None
    echo_status: int | None = None


@dataclasses.dataclass
class Seen:
    """One GET as the server saw it."""

    query: dict[str, str]
    range: str | None
    status: int | None  # None: the client hung up before the answer was sent whole
    generation: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Script):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)  # notified when a GET's record is in
        self.in_flight = 0  # GETs being answered (a record of each comes when it ends)
        self.answered = 0
        self.sent_total = 0
        self.seen: list[Seen] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 (base class signature)
        pass

    def do_GET(self):  # noqa: N802 (base class naming)
        s = self.server.script
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        rng = self.headers.get("Range")
        with self.server.lock:
            version = len(s.versions) - 1
            if s.switch_after is not None:
                version = min(self.server.answered // s.switch_after, len(s.versions) - 1)
            self.server.answered += 1
            self.server.in_flight += 1
        generation = s.first_generation + version
        data = s.versions[version]
        status = None
        try:
            status = self._answer(s, query, rng, data, generation)
        finally:  # also when the client hung up mid-body (the write raised): it was asked
            with self.server.lock:
                self.server.seen.append(Seen(query, rng, status, generation))
                self.server.in_flight -= 1
                self.server.settled.notify_all()

    def _answer(self, s: Script, query, rng, data: bytes, generation: int) -> int:
        if s.echo_status is not None:
            body = json.dumps({"error": {"code": s.echo_status, "headers": dict(self.headers)}})
            auth = self.headers.get("Authorization", "")
            body += " raw token: " + auth.split(" ", 1)[-1]
            return self._send(s.echo_status, body.encode(), {})
        asked = int(query.get("generation") or 0)
        if asked and asked != generation and s.on_old_generation != "ignore":
            code = int(s.on_old_generation)
            return self._send(code, json.dumps({"error": {"code": code}}).encode(), {})
        headers = {"x-goog-generation": str(generation)} if s.send_generation else {}
        if s.whole_object:
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 64 << 10):
                chunk = data[i : i + (64 << 10)]
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                except OSError:
                    return 200  # the client stopped reading: it had what it needed
            self.wfile.write(b"0\r\n\r\n")
            return 200
        first, last = (int(v) for v in _RANGE.match(rng or "").groups())
        if first > last:
            return self._send(400, b'{"error":{"code":400,"message":"inverted range"}}', {})
        last = min(last, len(data) - 1)
        body = data[first : last + 1]
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        if s.cut_after_total is None:
            return self._send(206, body, headers)
        with self.server.lock:
            budget = max(0, s.cut_after_total - self.server.sent_total)
            send = min(budget, len(body))
            self.server.sent_total += send
        self.send_response(206)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:send])
        self.wfile.flush()
        self.close_connection = True
        return 206

    def _send(self, status: int, body: bytes, headers: dict) -> int:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:  # the client hung up after the headers (e.g. a generation it refuses)
            self.close_connection = True
        return status


class ScriptedGCS:
    """Runs a Script on 127.0.0.1; use as a context manager.

    Attributes:
      endpoint: "http://127.0.0.1:PORT".
      seen: every GET answered so far (Seen records, in completion order); waits (up to
        10 s) for GETs still being answered, e.g. a handler still writing to a client that
        stopped reading, so that a test never reads the list before their records are in.
    """

    def __init__(self, script: Script):
        self._server = _Server(script)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def seen(self) -> list[Seen]:
        with self._server.settled:
            self._server.settled.wait_for(lambda: self._server.in_flight == 0, timeout=10.0)
            return list(self._server.seen)

    def __enter__(self) -> ScriptedGCS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
