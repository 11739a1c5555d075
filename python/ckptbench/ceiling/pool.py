"""N Python threads, one keep-alive http.client connection each, sharing one task list.

The raw ceilings (range_read's parallel GETs, ceiling.upload's parallel uploads) measure what
an endpoint carries with the least client work there is: no library, no retries, bodies read
into or sent from preallocated memory. This is the loop both share.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ranged_get_into(conn: http.client.HTTPConnection, path: str, offset: int, dest) -> None:
    """One ranged GET of ``len(dest)`` bytes from ``offset`` of the media ``path``, its body
    read with ``readinto`` straight into ``dest`` (a writable memoryview).

    Raises:
      OSError: an answer other than 206, or a body shorter than the range (naming the range).
    """
    n = len(dest)
    conn.request("GET", path, headers={"Range": f"bytes={offset}-{offset + n - 1}"})
    resp = conn.getresponse()
    if resp.status != 206:
        raise OSError(f"raw GET {path} bytes={offset}-{offset + n - 1}: HTTP {resp.status}")
    got = 0
    while got < n:
        k = resp.readinto(dest[got:])
        if not k:
            raise OSError(
                f"raw GET {path} bytes={offset}-{offset + n - 1}: short body ({got} of {n})"
            )
        got += k
    resp.read()


class ConnectionPool:
    """`concurrency` threads per `run`, thread i always on keep-alive connection i.

    Args:
      endpoint: "http://host:port".
      concurrency: threads (and connections).
      timeout_s: socket timeout of every connection, seconds.
    """

    def __init__(self, endpoint: str, concurrency: int, timeout_s: float = 600.0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        url = urllib.parse.urlsplit(endpoint)
        self.concurrency = concurrency
        self._host, self._port, self._timeout_s = url.hostname, url.port, timeout_s
        self._connections: list[http.client.HTTPConnection | None] = [None] * concurrency

    def connection(self, slot: int) -> http.client.HTTPConnection:
        """Connection `slot` (opened on first use, reopened after `drop`)."""
        conn = self._connections[slot]
        if conn is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            self._connections[slot] = conn
        return conn

    def run(
        self, tasks: Sequence[T], work: Callable[[http.client.HTTPConnection, T], R]
    ) -> list[R]:
        """Runs `work(connection, task)` for every task on the pool's threads; results in task
        order. The first exception of any task is raised here, after every thread stopped."""
        lock = threading.Lock()
        todo = iter(range(len(tasks)))
        results: list = [None] * len(tasks)
        errors: list[BaseException] = []

        def worker(slot: int) -> None:
            try:
                while not errors:
                    with lock:
                        i = next(todo, None)
                    if i is None:
                        return
                    results[i] = work(self.connection(slot), tasks[i])
            except BaseException as e:  # surfaced below, in the calling thread
                errors.append(e)
                self.drop(slot)

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def drop(self, slot: int) -> None:
        """Closes connection `slot` (a failed request leaves it in an unknown state)."""
        conn, self._connections[slot] = self._connections[slot], None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for slot in range(self.concurrency):
            self.drop(slot)
