"""The raw download ceiling reads what it says: the object it uploaded, whole, every round, in
ranged GETs of the given size; bad shapes and a short object fail naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from ckptbench.ceiling import DownloadCeiling, measure_download_ceiling
from ckptbench.ceiling.download import ceiling_object_name
from ckptbench.ceiling.pool import ConnectionPool, ranged_get_into
from gcsckpt.io.endpoint import media_path
from gcsckpt.testing import LocalGCS

SIZE = 4 << 20
RANGE = 1 << 20


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket("ceiling")
        yield endpoint


def test_every_round_reads_the_whole_object_in_ranged_gets(gcs):
    ceiling = measure_download_ceiling(
        gcs.endpoint,
        "ceiling",
        object_bytes=SIZE,
        range_bytes=RANGE,
        concurrency=2,
        rounds=3,
        prefix="d",
    )
    assert isinstance(ceiling, DownloadCeiling)
    assert (ceiling.object_bytes, ceiling.range_bytes, ceiling.concurrency) == (SIZE, RANGE, 2)
    assert len(ceiling.seconds) == 3 and all(s > 0 for s in ceiling.seconds)
    assert ceiling.best_bytes_per_s == pytest.approx(SIZE / min(ceiling.seconds))
    assert ceiling.best_bytes_per_s >= ceiling.median_bytes_per_s > 0
    stored = gcs.get("ceiling", ceiling_object_name("d"))
    expected = np.random.default_rng(1).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    assert stored == expected
    media = [r for r in gcs.media_requests() if "download.bin" in r.uri and r.range]
    # 2 warm-up GETs (one per connection), then the 4 ranges of the object each round.
    assert len(media) == 2 + 3 * 4
    assert all(r.status == 206 and r.body_bytes == RANGE for r in media)
    wanted = {f"bytes={o}-{o + RANGE - 1}" for o in range(0, SIZE, RANGE)}
    assert sorted(r.range for r in media[2:]) == sorted(sorted(wanted) * 3)


def test_bad_shapes_and_short_bodies_fail(gcs):
    with pytest.raises(ValueError, match="multiple of range_bytes"):
        measure_download_ceiling(gcs.endpoint, "ceiling", object_bytes=SIZE + 1, range_bytes=RANGE)
    gcs.put("ceiling", "d/short.bin", b"x" * 10)
    pool = ConnectionPool(gcs.endpoint, 1)
    try:
        short = r"short.bin\?alt=media bytes=0-19: short body \(10 of 20\)"
        with pytest.raises(OSError, match=short):
            dest = memoryview(bytearray(20))
            ranged_get_into(pool.connection(0), media_path("ceiling", "d/short.bin"), 0, dest)
    finally:
        pool.close()
