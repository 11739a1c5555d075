"""verify_checkpoint: every byte of a committed checkpoint against its block checksums.

A good checkpoint verifies every byte of every data object (counts asserted against the listing
and the recorded checksums); a byte flipped on the endpoint's disk under the same generation is
one mismatch naming object, generation, block range and both CRC-32Cs, and the other blocks still
verify; a missing or truncated object is a problem naming it; a stock-saved checkpoint is
reported unverified with its bytes counted; windows smaller than a block still read each once.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from disk_faults import flip_on_disk
from torch.distributed.checkpoint import FileSystemWriter

from gcsckpt.dcp import GCSStorageWriter
from gcsckpt.dcp.checksums import records_of
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.verify import verify_checkpoint
from gcsckpt.io import ObjectStore

BUCKET = "verify"


def _state() -> dict:
    g = torch.Generator().manual_seed(7)
    return {
        "w": torch.randn(600 * 1024, generator=g),  # 2.3 MiB: three blocks of its own
        "b": torch.randn(100, generator=g),
        "m": {"step": 5, "note": "y" * 40},
    }


@pytest.fixture(scope="module")
def gcs():
    from gcsckpt.testing import LocalGCS

    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _save(gcs, prefix: str) -> dict[str, int]:
    """Saves _state() with 2 data objects; returns {object name: size} of the data objects."""
    writer = GCSStorageWriter(f"gs://{BUCKET}/{prefix}", endpoint=gcs.endpoint, thread_count=2)
    dcp.save(_state(), storage_writer=writer, no_dist=True)
    infos = ObjectStore(gcs.endpoint).list_objects(BUCKET, f"{prefix}/")
    return {i.name: i.size for i in infos if i.name.endswith(".distcp")}


def _records(gcs, prefix: str) -> dict:
    metadata = load_metadata(gcs.get(BUCKET, f"{prefix}/.metadata"), source=prefix)
    return records_of(metadata)


def test_a_good_checkpoint_verifies_every_byte(gcs):
    data = _save(gcs, "good")
    seen: list[tuple[int, int]] = []
    result = verify_checkpoint(
        f"gs://{BUCKET}/good", endpoint=gcs.endpoint, progress=lambda d, t: seen.append((d, t))
    )
    total = sum(data.values())
    assert result.ok and result.mismatches == []
    assert len(data) >= 2 and len(result.objects) == len(data)
    assert {f"good/{o.path}": o.size for o in result.objects} == data
    assert result.bytes_verified == total and result.bytes_unverified == 0
    records = _records(gcs, "good")
    for obj in result.objects:
        assert obj.status == "ok" and obj.checksummed
        assert obj.bytes_verified == obj.size == records[obj.path][0]
        assert obj.generation is not None and obj.generation <= result.metadata_generation
    assert seen[0] == (0, total) and seen[-1] == (total, total)


def test_windows_smaller_than_a_block_read_each_byte_once(gcs):
    data = _save(gcs, "small-windows")
    result = verify_checkpoint(
        f"gs://{BUCKET}/small-windows", endpoint=gcs.endpoint, window_bytes=1000
    )
    assert result.ok and result.bytes_verified == sum(data.values())


def test_a_byte_flipped_on_disk_is_one_mismatch_naming_the_block(gcs):
    data = _save(gcs, "flipped")
    name = max(data, key=data.get)  # the object holding "w"
    path = name.split("/", 1)[1]
    size, starts, crcs = _records(gcs, "flipped")[path]
    starts = np.frombuffer(starts, dtype="<u8").astype(int).tolist()
    ends = [*starts[1:], size]
    where = (starts[1] + ends[1]) // 2  # inside the object's second block
    flip_on_disk(gcs, BUCKET, name, where)
    result = verify_checkpoint(f"gs://{BUCKET}/flipped", endpoint=gcs.endpoint)
    assert not result.ok
    (bad,) = [o for o in result.objects if o.path == path]
    (mismatch,) = bad.mismatches
    assert mismatch.url == f"gs://{BUCKET}/{name}" and mismatch.generation == bad.generation
    assert (mismatch.offset, mismatch.length) == (starts[1], ends[1] - starts[1])
    assert mismatch.expected_crc32c == int(np.frombuffer(crcs, dtype="<u4")[1])
    assert mismatch.computed_crc32c != mismatch.expected_crc32c
    assert bad.status == "mismatch" and bad.problems == []
    assert bad.bytes_verified == size - (ends[1] - starts[1])  # every other block verified
    assert f"gs://{BUCKET}/{name} bytes={starts[1]}-{ends[1] - 1} (generation " in str(mismatch)
    assert all(o.ok for o in result.objects if o.path != path)


def test_missing_and_truncated_objects_are_named(gcs):
    data = _save(gcs, "damaged")
    small, large = sorted(data, key=data.get)
    store = ObjectStore(gcs.endpoint)
    store.delete(BUCKET, small)
    gcs.put(BUCKET, large, gcs.get(BUCKET, large)[:-10])
    result = verify_checkpoint(
        f"gs://{BUCKET}/damaged", endpoint=gcs.endpoint, check_commit_order=False
    )
    by_name = {f"damaged/{o.path}": o for o in result.objects}
    assert not result.ok
    assert by_name[small].status == "missing" and by_name[small].bytes_verified == 0
    assert by_name[small].problems == [f"gs://{BUCKET}/{small} is missing (named by .metadata)"]
    short = by_name[large]
    assert short.status == "short" and short.size == data[large] - 10
    assert f"gs://{BUCKET}/{large} holds {data[large] - 10} bytes" in short.problems[0]
    assert 0 < short.bytes_verified < data[large] - 10  # the whole blocks still there


def test_an_object_rewritten_after_the_commit_is_reported(gcs):
    data = _save(gcs, "rewritten")
    name = min(data, key=data.get)
    gcs.put(BUCKET, name, gcs.get(BUCKET, name))  # same bytes, a newer generation
    result = verify_checkpoint(f"gs://{BUCKET}/rewritten", endpoint=gcs.endpoint)
    (obj,) = [o for o in result.objects if f"rewritten/{o.path}" == name]
    assert obj.status == "failed" and "was written after .metadata" in obj.problems[0]
    assert "check_commit_order=False" in obj.problems[0]
    relaxed = verify_checkpoint(
        f"gs://{BUCKET}/rewritten", endpoint=gcs.endpoint, check_commit_order=False
    )
    assert relaxed.ok and relaxed.bytes_verified == sum(data.values())


def test_a_stock_checkpoint_is_reported_unverified(gcs, tmp_path):
    dcp.save(_state(), storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    sizes = {}
    for path in tmp_path.iterdir():
        gcs.put(BUCKET, f"stock/{path.name}", path.read_bytes())
        if path.name.endswith(".distcp"):
            sizes[path.name] = path.stat().st_size
    result = verify_checkpoint(f"gs://{BUCKET}/stock", endpoint=gcs.endpoint)
    assert result.ok and result.bytes_verified == 0
    assert result.bytes_unverified == sum(sizes.values()) > 0
    assert {o.path: (o.status, o.size) for o in result.objects} == {
        name: ("unverified", size) for name, size in sizes.items()
    }


def test_no_metadata_is_checkpoint_not_found(gcs):
    from gcsckpt.dcp import CheckpointNotFoundError

    with pytest.raises(CheckpointNotFoundError, match=f"gs://{BUCKET}/nothing/.metadata"):
        verify_checkpoint(f"gs://{BUCKET}/nothing", endpoint=gcs.endpoint)
