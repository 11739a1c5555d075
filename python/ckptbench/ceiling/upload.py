"""The raw upload ceiling of a GCS endpoint: many parallel single-request uploads of one buffer.

The save phase reports it beside the writers' figures, as the range-read benchmark reports the
raw GET ceiling beside the readers': `concurrency` threads, each with its own keep-alive
http.client connection (`ceiling.pool`), each upload one JSON API media request
(`uploadType=media`) whose body is the same preallocated buffer (sent without copies), every
round `concurrency` objects of `object_bytes`. The names are reused each round (each upload a
new generation of the same object), so disk use stays at one round's bytes. Every answer is
checked: status 200, the object's size and its crc32c against the buffer's.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import statistics
import time

import numpy as np

from ckptbench.ceiling.pool import ConnectionPool
from gcsckpt.io.endpoint import quote_object

METHOD = (
    "parallel JSON media uploads (uploadType=media) of one buffer, "
    "one keep-alive http.client connection per thread"
)


@dataclasses.dataclass(frozen=True)
class UploadCeiling:
    """What `measure_upload_ceiling` measured.

    Attributes:
      object_bytes: bytes per upload.
      concurrency: uploads in flight (threads, connections), also uploads per round.
      rounds: timed rounds.
      seconds: wall time of each round, seconds.
      median_bytes_per_s / best_bytes_per_s: bytes uploaded per second over the rounds.
      method: how it was measured, in words.
    """

    object_bytes: int
    concurrency: int
    rounds: int
    seconds: tuple[float, ...]
    median_bytes_per_s: float
    best_bytes_per_s: float
    method: str

    @property
    def bytes_per_round(self) -> int:
        return self.object_bytes * self.concurrency

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "seconds": list(self.seconds)}


def ceiling_object_name(prefix: str, slot: int) -> str:
    """The object upload `slot` writes each round."""
    return f"{prefix}/upload-{slot:04d}"


def _crc32c_b64(buf: np.ndarray) -> str:
    import google_crc32c

    return base64.b64encode(google_crc32c.Checksum(buf.tobytes()).digest()).decode("ascii")


def _upload(
    conn: http.client.HTTPConnection, bucket: str, name: str, body: memoryview, crc32c: str
) -> dict:
    path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote_object(name)}"
    conn.request(
        "POST",
        path,
        body=body,
        headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(body))},
    )
    resp = conn.getresponse()
    answer = resp.read()
    if resp.status != 200:
        raise OSError(f"upload gs://{bucket}/{name}: HTTP {resp.status}: {answer[:300]!r}")
    obj = json.loads(answer)
    if int(obj.get("size", -1)) != len(body) or obj.get("crc32c") != crc32c:
        raise OSError(
            f"upload gs://{bucket}/{name}: the endpoint stored size {obj.get('size')} crc32c "
            f"{obj.get('crc32c')}, sent {len(body)} bytes with crc32c {crc32c}"
        )
    return obj


def measure_upload_ceiling(
    endpoint: str,
    bucket: str,
    *,
    object_bytes: int,
    concurrency: int,
    rounds: int,
    prefix: str = "upload-ceiling",
) -> UploadCeiling:
    """Times `rounds` rounds of `concurrency` parallel uploads of `object_bytes` each.

    Args:
      endpoint: "http://host:port" of a GCS JSON API endpoint (no auth is sent: an emulator).
      bucket: an existing bucket; the objects `{prefix}/upload-NNNN` (one per slot) are
        written there and stay (the last round's generation).
      object_bytes: bytes per upload (> 0).
      concurrency: uploads in flight and per round (>= 1).
      rounds: timed rounds (>= 1); one untimed upload per connection runs first, so that
        connection set-up is not timed.

    Returns:
      UploadCeiling with per-round seconds and median / best bytes per second.
    Raises:
      ValueError: a non-positive size, concurrency or round count.
      OSError: an upload failed or the endpoint stored other bytes than sent (names the object).
    """
    if object_bytes <= 0 or rounds < 1:
        raise ValueError(f"object_bytes and rounds must be positive, got {object_bytes}, {rounds}")
    buf = np.random.default_rng(0).integers(0, 256, object_bytes, dtype=np.uint8)
    body = memoryview(buf).cast("B")
    crc32c = _crc32c_b64(buf)
    names = [ceiling_object_name(prefix, slot) for slot in range(concurrency)]
    pool = ConnectionPool(endpoint, concurrency)
    try:
        warm = memoryview(buf[:1]).cast("B")
        warm_crc = _crc32c_b64(buf[:1])
        pool.run(names, lambda conn, name: _upload(conn, bucket, name, warm, warm_crc))
        seconds = []
        for _ in range(rounds):
            start = time.perf_counter()
            pool.run(names, lambda conn, name: _upload(conn, bucket, name, body, crc32c))
            seconds.append(time.perf_counter() - start)
    finally:
        pool.close()
    rates = [object_bytes * concurrency / s for s in seconds]
    return UploadCeiling(
        object_bytes=object_bytes,
        concurrency=concurrency,
        rounds=rounds,
        seconds=tuple(seconds),
        median_bytes_per_s=statistics.median(rates),
        best_bytes_per_s=max(rates),
        method=METHOD,
    )
