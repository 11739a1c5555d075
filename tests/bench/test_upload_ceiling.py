"""The raw upload ceiling uploads what it says: every slot's object holds the buffer (size,
crc32c, bytes), once per round, and failures name the object."""

from __future__ import annotations

import base64

import google_crc32c
import numpy as np
import pytest

from ckptbench.ceiling import UploadCeiling, measure_upload_ceiling
from ckptbench.ceiling.upload import ceiling_object_name
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

SIZE = (1 << 20) + 7
FIRST_GENERATION = 10_000_000  # LocalGCS numbers every write from here


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket("ceiling")
        yield endpoint


def test_every_upload_lands_with_the_buffer(gcs):
    ceiling = measure_upload_ceiling(
        gcs.endpoint, "ceiling", object_bytes=SIZE, concurrency=4, rounds=2, prefix="c"
    )
    assert isinstance(ceiling, UploadCeiling)
    assert (ceiling.object_bytes, ceiling.concurrency, ceiling.rounds) == (SIZE, 4, 2)
    assert len(ceiling.seconds) == 2 and all(s > 0 for s in ceiling.seconds)
    assert ceiling.bytes_per_round == 4 * SIZE
    assert ceiling.best_bytes_per_s >= ceiling.median_bytes_per_s > 0
    assert ceiling.best_bytes_per_s == pytest.approx(4 * SIZE / min(ceiling.seconds))
    assert "uploadType=media" in ceiling.method

    expected = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    crc = base64.b64encode(google_crc32c.Checksum(expected).digest()).decode()
    store = ObjectStore(gcs.endpoint)
    names = [ceiling_object_name("c", slot) for slot in range(4)]
    assert sorted(store.list("ceiling", "c/")) == names
    client = gcs.storage_client()
    generations = []
    for name in names:
        blob = client.bucket("ceiling").get_blob(name)
        assert (blob.size, blob.crc32c) == (SIZE, crc)
        assert store.download("ceiling", name) == expected
        generations.append(blob.generation)
    # One warm-up upload and two rounds per slot: 12 uploads numbered from LocalGCS's first
    # generation, the last round's 4 are live.
    assert sorted(generations) == list(range(FIRST_GENERATION + 8, FIRST_GENERATION + 12))


def test_a_failed_upload_names_the_object(gcs):
    with pytest.raises(OSError, match=r"gs://absent/c/upload-000\d: HTTP 404"):
        measure_upload_ceiling(
            gcs.endpoint, "absent", object_bytes=10, concurrency=2, rounds=1, prefix="c"
        )
    with pytest.raises(ValueError, match="positive"):
        measure_upload_ceiling(gcs.endpoint, "ceiling", object_bytes=0, concurrency=1, rounds=1)
