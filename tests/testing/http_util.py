"""Plain http.client helpers the tests use to look at an endpoint the way any client would."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import urllib.parse

import google_crc32c


def connect(endpoint: str, timeout_s: float = 60.0) -> http.client.HTTPConnection:
    """A keep-alive connection to "http://host:port"."""
    url = urllib.parse.urlsplit(endpoint)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)


def fetch(
    conn: http.client.HTTPConnection,
    path: str,
    range_header: str | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of one request on `conn` (kept open)."""
    conn.request(method, path, headers={"Range": range_header} if range_header else {})
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def error_code(body: bytes) -> int:
    """error.code of a GCS-style JSON error body."""
    return json.loads(body)["error"]["code"]


def crc32c_b64(data: bytes) -> str:
    """CRC32C of `data` as GCS's `crc32c` field writes it (base64 of the big-endian digest)."""
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def md5_b64(data: bytes) -> str:
    """MD5 of `data` as GCS's `md5Hash` field writes it (base64 of the digest)."""
    return base64.b64encode(hashlib.md5(data).digest()).decode()
