"""FaultProxy: a threaded keep-alive HTTP proxy that injects the faults of a FaultPlan."""

from __future__ import annotations

import http.client
import io
import json
import socket
import struct
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gcsckpt.testing.faults import Fault, FaultPlan
from gcsckpt.testing.ports import LOOPBACK
from gcsckpt.testing.server_http import body_chunks

_HOP_BY_HOP = {
    "connection",
    "expect",  # 100-continue was already answered to the client
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}
_CHUNK = 256 * 1024
_UPSTREAM_TIMEOUT_S = 300.0


def _shifted_content_range(header: str | None, body_length: int) -> str:
    """A syntactically valid Content-Range one byte off from `header` (or from the whole body)."""
    first, last, total = 0, body_length - 1, body_length
    if header and header.startswith("bytes ") and "/" in header:
        span, _, size = header[len("bytes ") :].partition("/")
        if "-" in span:
            first, last = (int(v) for v in span.split("-", 1))
        if size.isdigit():
            total = int(size)
    return f"bytes {first + 1}-{last + 1}/{max(total, last + 2)}"


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, upstream: tuple[str, int], plan: FaultPlan) -> None:
        super().__init__((LOOPBACK, 0), _ProxyHandler)
        self.upstream = upstream
        self.plan = plan
        self.stopping = threading.Event()
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self.connections_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive towards the client
    timeout = 120  # seconds an idle client connection is kept
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        self._drop_upstream()
        super().finish()

    def log_message(self, format, *args) -> None:  # noqa: A002 (base class signature)
        pass  # counts are what tests look at; stderr noise would only hide failures

    def do_GET(self) -> None:
        self._proxy()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    # request side -----------------------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        if self.headers.get("Content-Length") is None and not self.headers.get("Transfer-Encoding"):
            return None
        return b"".join(body_chunks(self.rfile, self.headers))

    def _proxy(self) -> None:
        body = self._read_body()
        fault = self.server.plan.choose(
            self.command,
            self.path,
            body,
            self.headers.get("Range"),
            self.headers.get("Content-Range"),
        )
        if fault is not None and fault.kind == "status":
            self._answer_status(fault)
            return
        try:
            resp = self._forward(body, fault)
        except (OSError, http.client.HTTPException) as err:
            self._drop_upstream()
            host, port = self.server.upstream
            self._answer_error(502, f"upstream {host}:{port} failed: {err!r}")
            return
        try:
            self._relay(resp, fault)
        except (OSError, http.client.HTTPException):  # client gone, or upstream broke mid-body
            self.close_connection = True
            self._drop_upstream()

    def _forward(self, body: bytes | None, fault: Fault | None) -> http.client.HTTPResponse:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        path = self.path
        if fault is not None and fault.kind == "ignore_range":
            headers = {k: v for k, v in headers.items() if k.lower() != "range"}
        if fault is not None and fault.kind == "ignore_generation":
            split = urllib.parse.urlsplit(path)
            query = [(k, v) for k, v in urllib.parse.parse_qsl(split.query) if k != "generation"]
            path = split._replace(query=urllib.parse.urlencode(query)).geturl()
        for attempt in (0, 1):  # a kept-alive upstream connection may have been closed meanwhile
            if self._upstream is None:
                host, port = self.server.upstream
                self._upstream = http.client.HTTPConnection(host, port, timeout=_UPSTREAM_TIMEOUT_S)
            try:
                self._upstream.request(self.command, path, body=body, headers=headers)
                return self._upstream.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_upstream()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _drop_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    # response side ----------------------------------------------------------------------------

    def _answer_status(self, fault: Fault) -> None:
        reason = http.client.responses.get(fault.status, "Injected")
        echo = ""
        if fault.echo_headers:
            credential = (self.headers.get("Authorization") or "").split(" ", 1)[-1]
            echo = f"; request headers {dict(self.headers)}; credential {credential}"
        self._answer_error(fault.status, f"injected by FaultProxy: {reason}{echo}")

    def _answer_error(self, status: int, message: str) -> None:
        """A GCS-style JSON error answer; the connection stays usable."""
        body = json.dumps({"error": {"code": status, "message": message}}).encode()
        self.send_response_only(status, http.client.responses.get(status, "Error"))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _relay(self, resp: http.client.HTTPResponse, fault: Fault | None) -> None:
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
        status, reason = resp.status, resp.reason
        has_body = self.command != "HEAD" and status not in (204, 304) and status >= 200
        read, length = resp.read, resp.length or 0
        if resp.length is None and has_body:  # unknown length upstream: buffer to frame it
            data = resp.read()
            read, length = io.BytesIO(data).read, len(data)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(length)))
        if fault is not None and fault.kind == "wrong_content_range":
            old = next((v for k, v in headers if k.lower() == "content-range"), None)
            headers = [(k, v) for k, v in headers if k.lower() != "content-range"]
            headers.append(("Content-Range", _shifted_content_range(old, length)))
            status, reason = 206, "Partial Content"
        self.send_response_only(status, reason)
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if not has_body:
            resp.read()  # lets http.client see the response done, so the connection is reusable
            return
        if fault is not None and fault.kind == "flip_byte":
            body = bytearray(read(length) if length else read())
            if body:
                body[min(fault.cut_at(len(body)), len(body) - 1)] ^= 0xFF
            self.wfile.write(body)
            return
        if fault is None or fault.kind not in ("reset_mid_body", "stall", "short_body"):
            self._copy(read, None)
            return
        self._copy(read, fault.cut_at(length))
        if fault.kind == "stall":
            if self.server.stopping.wait(fault.stall_s):
                self._close_with_reset()  # the proxy is stopping: do not send the rest
            else:
                self._copy(read, None)
            return
        self._drop_upstream()  # the rest of this upstream body is never read
        if fault.kind == "reset_mid_body":
            self._close_with_reset()
        else:
            self.close_connection = True  # clean FIN with fewer bytes than Content-Length

    def _copy(self, read, n: int | None) -> None:
        """Copies `n` body bytes (None: up to the end) from `read` to the client."""
        while n is None or n > 0:
            chunk = read(_CHUNK if n is None else min(_CHUNK, n))
            if not chunk:
                return
            self.wfile.write(chunk)
            if n is not None:
                n -= len(chunk)

    def _close_with_reset(self) -> None:
        """Closes the client socket with SO_LINGER 0, so the client sees ECONNRESET, not EOF."""
        self.close_connection = True
        self._drop_upstream()
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # drops makefile's reference so close() really closes the socket
        sock.close()


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 between a client and `upstream` that injects faults.

    Requests without a fault pass through byte for byte (Range headers and all); both sides use
    keep-alive. Use as a context manager; `endpoint` is what the client should talk to.

    Args:
      upstream: "http://host:port" of the real endpoint (e.g. LocalGCS.endpoint).
      faults: Fault rules (see faults.Fault for matching by count, nth request or object name).

    Attributes:
      endpoint: "http://127.0.0.1:PORT" of the proxy (set by start/__enter__).
      counts: dict kind -> faults injected so far (all kinds present, 0 when none).
      requests: requests received so far.
      request_log: (method, path with query) of each request received so far, in order.
      request_ranges: the Range header (or None) of each request received so far, in order.
    """

    def __init__(self, upstream: str, faults: list[Fault] | None = None) -> None:
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or not url.hostname or not url.port:
            raise ValueError(f"FaultProxy upstream must be http://host:port, got {upstream!r}")
        self._upstream = (url.hostname, url.port)
        self._plan = FaultPlan(list(faults or []))
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None
        self.endpoint = ""

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> FaultProxy:
        """Binds a free loopback port and serves in a background thread."""
        self._server = _ProxyServer(self._upstream, self._plan)
        self.endpoint = f"http://{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes every client connection; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        with server.connections_lock:
            for conn in list(server.open_connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def set_faults(self, faults: list[Fault]) -> None:
        """Replaces the rules and restarts all counting (counts, requests) from zero."""
        self._plan = FaultPlan(list(faults))
        if self._server is not None:
            self._server.plan = self._plan

    @property
    def counts(self) -> dict[str, int]:
        return self._plan.counts

    @property
    def injected_per_fault(self) -> list[int]:
        """Injections per rule, in the order given."""
        return self._plan.injected_per_fault

    @property
    def requests(self) -> int:
        return self._plan.requests

    @property
    def request_log(self) -> list[tuple[str, str]]:
        return self._plan.request_log

    @property
    def request_ranges(self) -> list[str | None]:
        return self._plan.request_ranges
