"""Loopback ports: pick a free one, check one, wait until an HTTP endpoint answers."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on `host` that nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when `host:port` can be bound (no listener holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def http_get_ok(host: str, port: int, path: str = "/", timeout_s: float = 2.0) -> bytes | None:
    """Body of `GET path` when it answers 200, else None (refused, reset, other status)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return body if resp.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def wait_until_ready(
    host: str,
    port: int,
    expect_body: bytes,
    timeout_s: float,
    still_running: Callable[[], bool],
) -> bool:
    """Polls `GET /` until it answers 200 with `expect_body`.

    Returns:
      True when ready; False when `still_running()` turns False or `timeout_s` seconds pass.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if http_get_ok(host, port) == expect_body:
            return True
        if not still_running():
            return False
        time.sleep(0.05)
    return False
