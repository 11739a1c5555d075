"""Clients compared by the range-read benchmark, behind one small interface.

Each client reads a RangeSet of one object and reports what it knows about its HTTP traffic;
`check` verifies the bytes of its last round against the source.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import tempfile

import numpy as np

from ckptbench.ceiling.pool import ConnectionPool, ranged_get_into
from ckptbench.range_read.ranges import RangeSet
from gcsckpt.io import RangeReader, RangeRequest
from gcsckpt.io.endpoint import media_path


@dataclasses.dataclass
class RoundCounts:
    """HTTP traffic of one round; None where the client cannot tell."""

    requests: int | None
    bytes_received: int | None
    retries: int | None = None


def dests_match(range_set: RangeSet, dests: list[np.ndarray], source: np.ndarray) -> bool:
    return all(
        np.array_equal(d, source[o : o + range_set.range_bytes])
        for o, d in zip(range_set.offsets, dests, strict=True)
    )


class ReaderClient:
    """gcsckpt.io.RangeReader at a given max_inflight_requests (other options default/given)."""

    def __init__(self, endpoint: str, bucket: str, name: str, concurrency: int, **options):
        self.name = "gcsckpt"
        self.concurrency = concurrency
        self.options = options
        self._bucket, self._object = bucket, name
        self._reader = RangeReader(endpoint, max_inflight_requests=concurrency, **options)

    def fits(self, range_set: RangeSet) -> bool:
        return True

    def run(self, range_set: RangeSet, dests: list[np.ndarray]) -> RoundCounts:
        requests = [
            RangeRequest(self._bucket, self._object, o, range_set.range_bytes, d)
            for o, d in zip(range_set.offsets, dests, strict=True)
        ]
        self._reader.reset_stats()
        self._reader.read(requests)
        stats = self._reader.stats()
        return RoundCounts(stats["requests"], stats["bytes_received"], stats["retries"])

    def check(self, range_set, dests, source) -> bool:
        return dests_match(range_set, dests, source)

    def close(self) -> None:
        self._reader.close()


class GcsfsClient:
    """gcsfs `cat_ranges` in this process (its own asyncio concurrency), bytes returned as lists."""

    def __init__(self, endpoint: str, bucket: str, name: str):
        from gcsckpt.testing import gcsfs_filesystem

        self.name = "gcsfs.cat_ranges"
        self.concurrency = None
        self._fs = gcsfs_filesystem(endpoint)
        self._path = f"{bucket}/{name}"
        self._last: list[bytes] = []

    def fits(self, range_set: RangeSet) -> bool:
        return True

    def run(self, range_set: RangeSet, dests: list[np.ndarray]) -> RoundCounts:
        starts = list(range_set.offsets)
        ends = [o + range_set.range_bytes for o in starts]
        self._last = self._fs.cat_ranges([self._path] * len(starts), starts, ends, on_error="raise")
        # One GET per range: fsspec's cat_ranges does not merge ranges (max_gap unsupported).
        return RoundCounts(len(starts), sum(len(b) for b in self._last))

    def check(self, range_set, dests, source) -> bool:
        return all(
            blob == source[o : o + range_set.range_bytes].tobytes()
            for o, blob in zip(range_set.offsets, self._last, strict=True)
        )

    def close(self) -> None:
        self._last = []


class GcsChunksClient:
    """google-cloud-storage transfer_manager.download_chunks_concurrently into a file.

    Fits only range sets that tile the whole object (it downloads whole blobs). Threads, not
    its default processes, so that client CPU is measured in this process; crc32c checking off
    so that the same work (transfer only) is compared.
    """

    def __init__(self, endpoint: str, bucket: str, name: str, workers: int):
        from gcsckpt.testing import storage_client

        self.name = "gcs.download_chunks"
        self.concurrency = workers
        self._blob = storage_client(endpoint).bucket(bucket).blob(name)
        self._blob.reload()
        # The emulator's mediaLink names its own port (or a stale one from an earlier run);
        # without it the library builds the download URL from the endpoint, i.e. via nginx.
        # Downloads overwrite generation from answer headers (nginx sends none), which would
        # make the next call reload the metadata: restore it before every round.
        self._metadata = {k: v for k, v in self._blob._properties.items() if k != "mediaLink"}
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self._path = tempfile.mkstemp(prefix="range-read-", dir=folder)
        os.close(fd)

    def fits(self, range_set: RangeSet) -> bool:
        return range_set.covers_whole_object_of == self._blob.size

    def run(self, range_set: RangeSet, dests: list[np.ndarray]) -> RoundCounts:
        from google.cloud.storage import transfer_manager

        self._blob._properties = dict(self._metadata)
        transfer_manager.download_chunks_concurrently(
            self._blob,
            self._path,
            chunk_size=range_set.range_bytes,
            max_workers=self.concurrency,
            worker_type=transfer_manager.THREAD,
            crc32c_checksum=False,
        )
        return RoundCounts(len(range_set.offsets), range_set.useful_bytes)

    def check(self, range_set, dests, source) -> bool:
        return np.array_equal(np.fromfile(self._path, dtype=np.uint8), source)

    def close(self) -> None:
        if os.path.exists(self._path):
            os.remove(self._path)


class RawPoolClient:
    """The raw parallel-GET ceiling: N Python threads, one keep-alive http.client connection
    each (`ceiling.pool.ConnectionPool`), one ranged GET per range, bodies read with
    `readinto` straight into the destination.
    """

    def __init__(self, endpoint: str, bucket: str, name: str, concurrency: int, label: str):
        self.name = label
        self.concurrency = concurrency
        self._path = media_path(bucket, name)
        self._pool = ConnectionPool(endpoint, concurrency)

    def fits(self, range_set: RangeSet) -> bool:
        return True

    def run(self, range_set: RangeSet, dests: list[np.ndarray]) -> RoundCounts:
        tasks = [(o, memoryview(d)) for o, d in zip(range_set.offsets, dests, strict=True)]
        self._pool.run(tasks, lambda conn, task: self._get(conn, *task))
        return RoundCounts(len(range_set.offsets), range_set.useful_bytes)

    def _get(self, conn: http.client.HTTPConnection, offset: int, dest: memoryview) -> None:
        ranged_get_into(conn, self._path, offset, dest)

    def check(self, range_set, dests, source) -> bool:
        return dests_match(range_set, dests, source)

    def close(self) -> None:
        self._pool.close()


class CeilingClient:
    """The raw parallel-GET ceiling: the whole object in fixed-size ranged GETs from a
    RawPoolClient, into its own buffers. It ignores the range set it is given (measure() uses
    `range_set` / `dests` below), so it can be timed interleaved with every range-size group.
    """

    def __init__(self, endpoint: str, bucket: str, name: str, whole: RangeSet, concurrency: int):
        self.name = f"raw ceiling ({whole.label} GETs)"
        self.concurrency = concurrency
        self.range_set = whole
        self.dests = [np.zeros(whole.range_bytes, np.uint8) for _ in whole.offsets]
        self._pool = RawPoolClient(endpoint, bucket, name, concurrency, self.name)

    def fits(self, range_set: RangeSet) -> bool:
        return True

    def run(self, range_set: RangeSet, dests: list[np.ndarray]) -> RoundCounts:
        if range_set.range_bytes != self.range_set.range_bytes:  # a warm-up of another size
            return self._pool.run(RangeSet(self.range_set.range_bytes, (0,)), self.dests[:1])
        return self._pool.run(self.range_set, self.dests)

    def check(self, range_set, dests, source) -> bool:
        return dests_match(self.range_set, self.dests, source)

    def close(self) -> None:
        self._pool.close()
