"""Every byte checked: block CRC-32C checksums saved with each data object and verified on load.

A byte changed on the endpoint's disk under the same generation, an object rewritten with other
bytes of the same size (loaded with check_commit_order=False), another save's object swapped in,
and a byte flipped in transit every time all fail the load with one CheckpointReadError naming
rank, object, generation, byte range and both CRC-32Cs; a byte flipped once is re-fetched and
the load is exact. Each for TORCH_SAVE and SAFETENSORS, for tensors on the direct path (bytes
straight into the destination) and the buffered path (a strided destination), and BYTE_IO.
Checkpoints stay loadable by torch's stock FileSystemReader, and stock checkpoints load with
gcsckpt, reported unverified.
"""

from __future__ import annotations

import json
import os
import re
import struct

import pytest
import torch
import torch.distributed.checkpoint as dcp
from disk_faults import flip_on_disk
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.checksums import records_of
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.io import ObjectStore, RetryPolicy
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "integrity"
FORMATS = [SerializationFormat.TORCH_SAVE, SerializationFormat.SAFETENSORS]
# fqn -> what loading it exercises: "w" lands directly in its destination (2 MiB, blocks of 1
# MiB), "s" is loaded into a strided destination through a window buffer, "m.note" is BYTE_IO.
ITEMS = ["w", "s", "m.note"]


def _state(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(512 * 1024, generator=g),
        "s": torch.randn(8, 16, generator=g),
        "m": {"step": 3 + seed, "note": "x" * 64},
    }


def _blank() -> dict:
    return {"w": torch.zeros(512 * 1024), "s": torch.zeros(16, 8).t(), "m": {"step": 0, "note": ""}}


def _exact(state: dict, seed: int = 0) -> bool:
    want = _state(seed)
    return (
        torch.equal(state["w"], want["w"])
        and torch.equal(state["s"], want["s"])
        and state["m"] == want["m"]
    )


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _save(gcs, prefix: str, fmt=SerializationFormat.TORCH_SAVE, seed: int = 0, **kw) -> str:
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/{prefix}",
        endpoint=gcs.endpoint,
        thread_count=1,
        serialization_format=fmt,
        **kw,
    )
    dcp.save(_state(seed), storage_writer=writer, no_dist=True)
    (data,) = [n for n in ObjectStore(gcs.endpoint).list(BUCKET, f"{prefix}/") if "__0_" in n]
    return data


def _load(endpoint: str, prefix: str, **kw):
    state = _blank()
    reader = GCSStorageReader(f"gs://{BUCKET}/{prefix}", endpoint=endpoint, **kw)
    dcp.load(state, storage_reader=reader, no_dist=True)
    return state, reader.load_stats


def _item_range(gcs, prefix: str, fqn: str) -> tuple[int, int]:
    """(offset, length) of item `fqn`'s stored bytes in its data object."""
    metadata = load_metadata(gcs.get(BUCKET, f"{prefix}/.metadata"), source=prefix)
    (info,) = [v for k, v in metadata.storage_data.items() if k.fqn == fqn]
    data = gcs.get(BUCKET, f"{prefix}/{info.relative_path}")
    if fqn.startswith("m.") or data[info.offset : info.offset + 2] == b"PK":  # BYTE_IO, zip
        return info.offset, info.length
    # A safetensors blob (after the BYTE_IO items): 8-byte header length, JSON header, then
    # the tensors' bytes.
    blob = data[info.offset :]
    (header_len,) = struct.unpack("<Q", blob[:8])
    begin, end = json.loads(blob[8 : 8 + header_len])[fqn]["data_offsets"]
    return info.offset + 8 + header_len + begin, end - begin


def _flip_on_disk(gcs, name: str, offset: int) -> None:
    flip_on_disk(gcs, BUCKET, name, offset)


def _assert_checksum_error(info, name: str) -> None:
    message = str(info.value)
    assert "rank 0: checkpoint load failed" in message
    assert f"gs://{BUCKET}/{name} bytes=" in message
    assert "bytes differ from what was saved (generation " in message
    assert re.search(r"CRC-32C mismatch in bytes \d+-\d+", message), message
    assert re.search(r"expected 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}", message), message


@pytest.mark.parametrize("fqn", ITEMS)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_a_byte_flipped_on_disk_fails_the_load(gcs, fmt, fqn):
    prefix = f"flip-{fmt.value}-{fqn}"
    name = _save(gcs, prefix, fmt)
    offset, length = _item_range(gcs, prefix, fqn)
    _flip_on_disk(gcs, name, offset + length // 2)
    state = _blank()
    reader = GCSStorageReader(f"gs://{BUCKET}/{prefix}", endpoint=gcs.endpoint)
    with pytest.raises(CheckpointException) as info:
        dcp.load(state, storage_reader=reader, no_dist=True)
    _assert_checksum_error(info, name)
    assert "again after re-fetching the block" in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_a_same_size_rewrite_fails_without_commit_order(gcs, fmt):
    prefix = f"rewrite-{fmt.value}"
    name = _save(gcs, prefix, fmt)
    data = bytearray(gcs.get(BUCKET, name))
    offset, length = _item_range(gcs, prefix, "w")
    data[offset + length - 4 : offset + length] = b"\x00\x00\x80\x7f"  # the last float: +inf
    gcs.put(BUCKET, name, bytes(data))
    with pytest.raises(CheckpointException) as info:
        _load(gcs.endpoint, prefix, check_commit_order=False)
    _assert_checksum_error(info, name)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_another_saves_object_swapped_in_fails(gcs, fmt):
    ours = _save(gcs, f"swap-a-{fmt.value}", fmt, seed=0)
    theirs = _save(gcs, f"swap-b-{fmt.value}", fmt, seed=1)
    other = gcs.get(BUCKET, theirs)
    assert len(other) == len(gcs.get(BUCKET, ours))  # same layout, same size
    gcs.put(BUCKET, ours, other)
    with pytest.raises(CheckpointException) as info:
        _load(gcs.endpoint, f"swap-a-{fmt.value}", check_commit_order=False)
    _assert_checksum_error(info, ours)


@pytest.mark.parametrize("fqn", ITEMS)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_a_byte_flipped_in_transit_is_fetched_again(gcs, fmt, fqn):
    prefix = f"transit-{fmt.value}-{fqn}"
    name = _save(gcs, prefix, fmt)
    offset, length = _item_range(gcs, prefix, fqn)
    # The flip strikes the first media GET of the object, inside the item's bytes: the block
    # is read again, and the item is exact.
    fault = Fault(kind="flip_byte", count=1, object_name=name, after_bytes=0)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        before = _load(gcs.endpoint, prefix)[1]  # where the first GET of the object starts
        state, stats = _load(proxy.endpoint, prefix, retry=RetryPolicy(initial_backoff_s=0.01))
        assert proxy.counts["flip_byte"] == 1
    assert _exact(state)
    assert stats.retries == 1 and stats.requests == before.requests + 1
    # Verified: the items' bytes and, for SAFETENSORS, the blob headers read to plan them.
    assert stats.bytes_verified >= stats.bytes_needed > 0 and stats.bytes_unverified == 0


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_a_byte_flipped_in_transit_every_time_fails(gcs, fmt):
    prefix = f"transit-always-{fmt.value}"
    name = _save(gcs, prefix, fmt)
    fault = Fault(kind="flip_byte", count=None, object_name=name, after_bytes=0)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        state = _blank()
        reader = GCSStorageReader(
            f"gs://{BUCKET}/{prefix}",
            endpoint=proxy.endpoint,
            retry=RetryPolicy(initial_backoff_s=0.01),
        )
        with pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader, no_dist=True)
        assert proxy.counts["flip_byte"] >= 2  # the first answer and the block's re-fetch
    _assert_checksum_error(info, name)


def test_checksums_cost_no_extra_bytes_for_whole_items(gcs):
    prefix = "plain"
    _save(gcs, prefix)
    state, stats = _load(gcs.endpoint, prefix)
    assert _exact(state)
    assert stats.bytes_verified == stats.bytes_needed and stats.bytes_unverified == 0
    assert stats.bytes_fetched == stats.bytes_needed  # items are blocks: no widening
    metadata = load_metadata(gcs.get(BUCKET, f"{prefix}/.metadata"), source=prefix)
    ((path, (size, starts, crcs)),) = records_of(metadata).items()
    assert size == len(gcs.get(BUCKET, f"{prefix}/{path}"))
    assert len(starts) == 2 * len(crcs)  # uint64 starts, uint32 CRC-32Cs
    # Turned off: the same load, unverified.
    state, stats = _load(gcs.endpoint, prefix, verify=False)
    assert _exact(state) and stats.bytes_verified == 0 and stats.bytes_unverified > 0


def test_stock_reader_loads_a_checksummed_checkpoint(gcs, tmp_path):
    prefix = "stock-reads"
    _save(gcs, prefix)
    for name in ObjectStore(gcs.endpoint).list(BUCKET, f"{prefix}/"):
        (tmp_path / os.path.basename(name)).write_bytes(gcs.get(BUCKET, name))
    state = _blank()
    dcp.load(state, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    assert _exact(state)


def test_a_stock_checkpoint_loads_unverified(gcs, tmp_path):
    dcp.save(_state(), storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    for path in tmp_path.iterdir():
        gcs.put(BUCKET, f"stock/{path.name}", path.read_bytes())
    state, stats = _load(gcs.endpoint, "stock")
    assert _exact(state)
    assert stats.bytes_verified == 0 and stats.bytes_unverified == stats.bytes_needed > 0
