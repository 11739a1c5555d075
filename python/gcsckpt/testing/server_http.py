"""Request bodies as files (a multipart/related body split into its parts) and plain answers,
for the handlers of server_main.py.

An upload body is always a file on the data disk, so committing it is a rename and hashing it
one read (server_store.py). Behind nginx the body is the file nginx already wrote (its path
comes in `X-Gcsckpt-Body-File`, see nginx_config.py); a request that comes straight to the
server has its body streamed from the socket into a temp file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

# First path segments of the JSON API; any other `/BUCKET/OBJECT` path is the XML API
# (server_main.py routes it, nginx_config.py too).
JSON_API_ROOTS = ("storage", "upload", "download", "batch", "b", "wipe")
UPLOADS_DIR = ".uploads"  # under the data dir: upload bodies, resumable sessions, XML parts
# The file name of a stored object's name segment over 255 bytes starts with this (then the
# segment's SHA-256): server_objects.py names it, nginx_config.py passes its reads to the server.
LONG_SEGMENT_MARK = ".~gcsckpt-long~"
BODY_FILE_HEADER = "X-Gcsckpt-Body-File"  # set by nginx: the file holding the request body
ELAPSED_HEADER = "X-Gcsckpt-Elapsed"  # set by nginx: seconds since the request's first byte
_COPY_CHUNK_BYTES = 1 << 20
_HEAD_BYTES = 1 << 20  # a multipart upload's metadata part lies within its first MiB
JSON_TYPE = "application/json; charset=UTF-8"


class APIError(Exception):
    """One JSON API error answer: HTTP status, reason, message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason

    def body(self) -> bytes:
        errors = [{"domain": "global", "reason": self.reason, "message": str(self)}]
        answer = {"error": {"code": self.status, "message": str(self), "errors": errors}}
        return json.dumps(answer).encode()

    def send(self, handler) -> None:
        """Writes this answer (JSON body)."""
        send(handler, self.status, self.body(), {"Content-Type": JSON_TYPE})


class BadRequestBody(Exception):
    """The request body cannot be read as declared (length, chunking, body file)."""


def body_chunks(rfile, headers):
    """The request body (Content-Length, chunked, or none) read from `rfile`, as an iterator
    of bytes chunks of at most _COPY_CHUNK_BYTES.

    Raises:
      BadRequestBody: the body ends before it declared.
    """

    def exactly(n: int):
        while n > 0:
            chunk = rfile.read(min(n, _COPY_CHUNK_BYTES))
            if not chunk:
                raise BadRequestBody(f"request body ended {n} bytes early")
            n -= len(chunk)
            yield chunk

    length = headers.get("Content-Length")
    if length is not None:
        yield from exactly(int(length))
        return
    if (headers.get("Transfer-Encoding") or "").lower() != "chunked":
        return
    while size := int(rfile.readline().split(b";")[0].strip() or b"0", 16):
        yield from exactly(size)
        rfile.readline()
    while rfile.readline() not in (b"\r\n", b"\n", b""):
        pass  # trailers


def body_file(handler, storage) -> str:
    """The request body as a file of its own on the data disk (the caller renames or removes it).

    Raises:
      BadRequestBody: a short body, or a body file outside the data disk's body folder.
    """
    path = storage.new_temp_path()
    given = handler.headers.get(BODY_FILE_HEADER)
    if given:
        body_dir = os.path.join(storage.uploads_dir, "nginx")
        if os.path.dirname(os.path.realpath(given)) != os.path.realpath(body_dir):
            os.unlink(path)
            raise BadRequestBody(f"body file {given!r} is not in {body_dir}")
        # nginx removes its own name when the request ends; this link keeps the bytes.
        os.unlink(path)
        os.link(given, path)
        return path
    try:
        with open(path, "wb", buffering=0) as out:
            for chunk in body_chunks(handler.rfile, handler.headers):
                out.write(chunk)
    except BaseException:
        os.unlink(path)
        raise
    return path


def goog_hashes(headers) -> list[tuple[str, str]]:
    """[(label, base64 digest)] of the request's `x-goog-hash` headers ("crc32c=..,md5=..";
    labels as sent, lower case), the digests a client asks the server to check."""
    hashes = []
    for item in ",".join(headers.get_all("x-goog-hash") or []).split(","):
        label, _, value = item.strip().partition("=")
        if label and value:
            hashes.append((label.lower(), value))
    return hashes


def read_small_body(handler, storage, limit: int = 16 << 20) -> bytes:
    """The whole request body as bytes (metadata, XML documents); at most `limit` bytes."""
    path = body_file(handler, storage)
    try:
        if os.path.getsize(path) > limit:
            raise BadRequestBody(f"body of {os.path.getsize(path)} bytes, at most {limit}")
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def request_started(handler) -> float:
    """time.monotonic() of the request's first byte, as nginx saw it (else: now)."""
    elapsed = handler.headers.get(ELAPSED_HEADER)
    try:
        return time.monotonic() - float(elapsed) if elapsed else time.monotonic()
    except ValueError:
        return time.monotonic()


@dataclasses.dataclass(frozen=True)
class Pacing:
    """The latency model of uploads: first byte after `latency_s`, at most `rate_bytes_per_s`
    per request (0: no cap)."""

    latency_s: float = 0.0
    rate_bytes_per_s: float = 0.0

    def pace(self, started: float, nbytes: int) -> None:
        """Sleeps until the answer is due for a request that began at `started` (monotonic)."""
        due = started + self.latency_s
        if self.rate_bytes_per_s > 0:
            due += nbytes / self.rate_bytes_per_s
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def send(handler, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
    """Writes one complete answer (keep-alive: always with Content-Length)."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if body and handler.command != "HEAD":
        handler.wfile.write(body)


def split_multipart(path: str, boundary: str) -> tuple[dict, str, int, int]:
    """(metadata, content type, content offset, content length) of a multipart/related body
    of two parts (JSON metadata, then the content), read from its head and tail only.

    Line breaks are CRLF (RFC 2046; google-cloud-storage) or bare LF (gcsfs), as the first
    delimiter line has them; the content is exactly what lies between its part headers and the
    closing delimiter's line break.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(min(size, _HEAD_BYTES))
        f.seek(max(0, size - 4096))
        tail_at = f.tell()
        tail = f.read()
    delim = b"--" + boundary.encode()
    first = head.find(delim)
    if first < 0:
        raise APIError(400, "invalid", f"multipart body without the boundary {boundary!r}")
    eol = b"\r\n" if head[first + len(delim) : first + len(delim) + 2] == b"\r\n" else b"\n"
    headers_end = head.find(eol + eol, first)
    second = head.find(eol + delim + eol, headers_end)
    content_headers_end = head.find(eol + eol, second + len(eol))
    if min(headers_end, second, content_headers_end) < 0:
        raise APIError(400, "invalid", "multipart body without its two parts")
    try:
        metadata = json.loads(head[headers_end + 2 * len(eol) : second] or b"{}")
    except ValueError as err:
        raise APIError(400, "parseError", f"multipart metadata is not JSON: {err}") from err
    content_type = "application/octet-stream"
    for line in head[second + 2 * len(eol) + len(delim) : content_headers_end].split(eol):
        key, _, value = line.decode("latin-1").partition(":")
        if key.strip().lower() == "content-type":
            content_type = value.strip()
    start = content_headers_end + 2 * len(eol)
    end_at = tail.rfind(eol + delim + b"--")
    if end_at < 0:
        raise APIError(400, "invalid", "multipart body without its closing delimiter")
    end = tail_at + end_at
    if end < start:
        raise APIError(400, "invalid", "multipart content part ends before it starts")
    return metadata, metadata.get("contentType") or content_type, start, end - start
