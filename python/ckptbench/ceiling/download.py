"""The raw download ceiling of a GCS endpoint: parallel ranged GETs of one object.

The load tables report it beside the readers' figures, as the save tables report the upload
ceiling: one object of seeded random bytes, read whole each round as fixed-size ranged GETs by
`concurrency` threads with a keep-alive http.client connection each (`ceiling.pool`, as the
range-read benchmark's raw ceiling), bodies read straight into preallocated buffers; every
round's bytes are compared with the source. Defaults: 16 x 8 MiB GETs over 256 MiB, the shape
issue 21 quotes as what the endpoint serves.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from ckptbench.ceiling.pool import ConnectionPool, ranged_get_into
from gcsckpt.io import ObjectStore
from gcsckpt.io.endpoint import media_path

METHOD = (
    "parallel ranged GETs of one object into preallocated buffers, "
    "one keep-alive http.client connection per thread"
)


@dataclasses.dataclass(frozen=True)
class DownloadCeiling:
    """What `measure_download_ceiling` measured.

    Attributes:
      object_bytes: bytes read per round (one whole object).
      range_bytes: bytes per ranged GET.
      concurrency: GETs in flight (threads, connections).
      seconds: wall time of each timed round, seconds.
      median_bytes_per_s / best_bytes_per_s: bytes read per second over the rounds.
      method: how it was measured, in words.
    """

    object_bytes: int
    range_bytes: int
    concurrency: int
    seconds: tuple[float, ...]
    median_bytes_per_s: float
    best_bytes_per_s: float
    method: str = METHOD


def ceiling_object_name(prefix: str) -> str:
    """The object the download ceiling reads."""
    return f"{prefix}/download.bin"


def measure_download_ceiling(
    endpoint: str,
    bucket: str,
    *,
    object_bytes: int = 256 << 20,
    range_bytes: int = 8 << 20,
    concurrency: int = 16,
    rounds: int = 3,
    prefix: str = "download-ceiling",
) -> DownloadCeiling:
    """Uploads one object, then times `rounds` whole reads of it as parallel ranged GETs.

    Args:
      endpoint: "http://host:port" of a GCS JSON API endpoint (no auth is sent: an emulator).
      bucket: an existing bucket; the object `{prefix}/download.bin` is written there and stays
        (the caller deletes the prefix).
      object_bytes: object size, a multiple of `range_bytes` (> 0).
      range_bytes: bytes per GET (> 0). concurrency: threads (>= 1). rounds: timed rounds
        (>= 1); one untimed GET per connection runs first.

    Returns:
      DownloadCeiling with per-round seconds and median / best bytes per second.
    Raises:
      ValueError: a non-positive size, count or round number, or a size that is not a multiple
        of `range_bytes`.
      OSError: a GET failed, came back short, or a round's bytes differ from the object's (the
        message names the object).
    """
    if min(object_bytes, range_bytes, concurrency, rounds) < 1 or object_bytes % range_bytes:
        raise ValueError(
            f"object_bytes {object_bytes} must be a positive multiple of range_bytes "
            f"{range_bytes}; concurrency {concurrency} and rounds {rounds} must be >= 1"
        )
    name = ceiling_object_name(prefix)
    source = np.random.default_rng(1).integers(0, 256, object_bytes, dtype=np.uint8)
    store = ObjectStore(endpoint)
    try:
        store.upload(bucket, name, source.tobytes())
    finally:
        store.close()
    path = media_path(bucket, name)
    offsets = range(0, object_bytes, range_bytes)
    dests = [np.empty(range_bytes, np.uint8) for _ in offsets]
    tasks = [(offset, memoryview(dest)) for offset, dest in zip(offsets, dests, strict=True)]
    pool = ConnectionPool(endpoint, concurrency)
    seconds = []
    try:
        pool.run(tasks[:concurrency], lambda conn, task: ranged_get_into(conn, path, *task))
        for _ in range(rounds):
            for dest in dests:
                dest.fill(0)  # a skipped range must not pass with older bytes
            start = time.perf_counter()
            pool.run(tasks, lambda conn, task: ranged_get_into(conn, path, *task))
            seconds.append(time.perf_counter() - start)
            same = all(
                np.array_equal(dest, source[o : o + range_bytes])
                for o, dest in zip(offsets, dests, strict=True)
            )
            if not same:
                raise OSError(f"download ceiling: gs://{bucket}/{name} read back other bytes")
    finally:
        pool.close()
    rates = [object_bytes / s for s in seconds]
    return DownloadCeiling(
        object_bytes=object_bytes,
        range_bytes=range_bytes,
        concurrency=concurrency,
        seconds=tuple(seconds),
        median_bytes_per_s=statistics.median(rates),
        best_bytes_per_s=max(rates),
    )
