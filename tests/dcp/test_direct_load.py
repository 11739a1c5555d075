"""Bytes straight into the destination tensors: which path each item takes (LoadStats counters),
byte-exact values for each item kind and layout, and a failed read that commits nothing."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
from torch.distributed.checkpoint.planner import LoadPlan
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.load.regions import narrow_block
from gcsckpt.io import RetryPolicy
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "direct"
FORMATS = [SerializationFormat.TORCH_SAVE, SerializationFormat.SAFETENSORS]


def _state() -> dict:
    return {
        "w": torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32),
        "x": torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32) * -1,  # w's group
        "b": torch.arange(40, dtype=torch.float32).to(torch.bfloat16).reshape(5, 8),
        "m": {"step": 3, "tag": "a"},
    }


def _blank(**overrides) -> dict:
    state = {
        "w": torch.zeros(64, 32),
        "x": torch.zeros(64, 32),
        "b": torch.zeros(5, 8, dtype=torch.bfloat16),
        "m": {"step": 0, "tag": ""},
    }
    state.update(overrides)
    return state


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        for fmt in FORMATS:
            url = f"gs://{BUCKET}/{fmt.value}"
            writer = GCSStorageWriter(url, endpoint=endpoint.endpoint, serialization_format=fmt)
            dcp.save(_state(), storage_writer=writer)
        yield endpoint


def _load(endpoint: str, name: str, state: dict, planner=None, **kw) -> GCSStorageReader:
    reader = GCSStorageReader(f"gs://{BUCKET}/{name}", endpoint=endpoint, **kw)
    dcp.load(state, storage_reader=reader, planner=planner)
    return reader


def _paths(stats) -> tuple[int, int, int, int]:
    """(tensor items, direct items, direct TORCH_SAVE items, re-read items)."""
    return stats.tensor_items, stats.direct_items, stats.direct_archive_items, stats.archive_rereads


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_same_layout_lands_in_the_targets(gcs, fmt):
    state = _blank()
    targets = {k: v.data_ptr() for k, v in state.items() if isinstance(v, torch.Tensor)}
    stats = _load(gcs.endpoint, fmt.value, state).load_stats
    want = _state()
    for fqn in ("w", "x", "b"):
        assert torch.equal(state[fqn], want[fqn]) and state[fqn].data_ptr() == targets[fqn]
    assert state["m"] == want["m"]  # BYTE_IO: always through a buffer
    archives = 3 if fmt is SerializationFormat.TORCH_SAVE else 0
    assert _paths(stats) == (3, 3, archives, 0) and stats.bytes_items == 2
    # One stand-in per (dtype, shape, length) group: w and x share one, b has its own.
    assert stats.archive_templates == (2 if archives else 0)
    if archives:  # no request beyond the items' bytes (SAFETENSORS also reads blob headers)
        assert stats.bytes_fetched == stats.bytes_needed == _stored_bytes(gcs, fmt.value)


def _stored_bytes(gcs, name: str) -> int:
    """Bytes of every item of checkpoint `name`, from its `.metadata`."""
    metadata = pickle.loads(gcs.get(BUCKET, f"{name}/.metadata"))
    return sum(info.length for info in metadata.storage_data.values())


class _Region(DefaultLoadPlanner):
    """Loads one region of `w` (offsets, sizes) into `state["w"]`, as a rank of another layout
    would, and nothing else."""

    def __init__(self, offsets: tuple[int, int], sizes: tuple[int, int]) -> None:
        super().__init__()
        self.chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes))

    def create_local_plan(self):
        md = self.metadata.state_dict_metadata["w"]
        return LoadPlan(create_read_items_for_chunk_list("w", md, [self.chunk]))

    def resolve_tensor(self, read_item):
        return narrow_block(self.state_dict["w"], read_item.dest_offsets, read_item.lengths)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_resharded_contiguous_slice_lands_in_the_target(gcs, fmt):
    state = {"w": torch.zeros(32, 32)}
    planner = _Region((16, 0), (32, 32))  # rows 16..47: one run of the stored bytes
    stats = _load(gcs.endpoint, fmt.value, state, planner=planner).load_stats
    assert torch.equal(state["w"], _state()["w"][16:48])
    archives = 1 if fmt is SerializationFormat.TORCH_SAVE else 0
    assert _paths(stats) == (1, 1, archives, 0)
    rows = 32 * 32 * 4
    assert rows + (1000 if archives else 0) <= stats.bytes_needed < rows + 4096  # + head, tail


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_strided_region_takes_the_buffered_path(gcs, fmt):
    state = {"w": torch.zeros(64, 16)}
    columns = _Region((0, 8), (64, 16))  # columns 8..23: not one run
    stats = _load(gcs.endpoint, fmt.value, state, planner=columns).load_stats
    assert torch.equal(state["w"], _state()["w"][:, 8:24])
    assert _paths(stats) == (1, 0, 0, 0)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_non_contiguous_target_and_dtype_cast_take_the_buffered_path(gcs, fmt):
    # w's target is a transposed view; x's target is float64: both need a copy, b lands direct.
    state = _blank(w=torch.zeros(32, 64).t(), x=torch.zeros(64, 32, dtype=torch.float64))
    stats = _load(gcs.endpoint, fmt.value, state).load_stats
    want = _state()
    assert torch.equal(state["w"], want["w"]) and not state["w"].is_contiguous()
    assert torch.equal(state["x"], want["x"].double()) and state["x"].dtype == torch.float64
    assert torch.equal(state["b"], want["b"]) and state["m"] == want["m"]
    archives = 1 if fmt is SerializationFormat.TORCH_SAVE else 0
    assert _paths(stats) == (3, 1, archives, 0)


def test_stream_transform_takes_the_buffered_path(gcs):
    from torch.testing._internal.distributed.checkpoint_utils import (
        Rot13Example,
        get_test_extension_registry,
    )

    url = f"gs://{BUCKET}/rot13"
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint, _extensions=[Rot13Example()])
    dcp.save(_state(), storage_writer=writer)
    state = _blank()
    registry = get_test_extension_registry()
    stats = _load(gcs.endpoint, "rot13", state, extension_registry=registry).load_stats
    want = _state()
    assert all(torch.equal(state[k], want[k]) for k in ("w", "x", "b")) and state["m"] == want["m"]
    assert _paths(stats) == (3, 0, 0, 0)


def test_archive_unlike_its_template_is_read_again(gcs):
    # One padding byte of x's archive rewritten: torch.load still reads it, but it no longer
    # matches its group's template, so it is read again through a buffer.
    name = "torch_save"
    metadata = pickle.loads(gcs.get(BUCKET, f"{name}/.metadata"))
    for index, info in metadata.storage_data.items():
        data = gcs.get(BUCKET, f"{name}/{info.relative_path}")
        if index.fqn == "x":
            data = bytearray(data)
            pad = data.index(b"ZZZZ", info.offset)  # the extra field of data.pkl's local header
            assert pad < info.offset + 100
            data[pad] = ord("Y")
        gcs.put(BUCKET, f"patched/{info.relative_path}", bytes(data))
    gcs.put(BUCKET, "patched/.metadata", gcs.get(BUCKET, f"{name}/.metadata"))
    state = _blank()
    # Unverified: the patched bytes would fail their block checksums before the template check.
    stats = _load(gcs.endpoint, "patched", state, verify=False).load_stats
    want = _state()
    assert all(torch.equal(state[k], want[k]) for k in ("w", "x", "b")) and state["m"] == want["m"]
    assert _paths(stats) == (3, 2, 2, 1)


class _Recording(DefaultLoadPlanner):
    """Records the FQN of every committed tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[str] = []

    def commit_tensor(self, read_item, tensor) -> None:
        self.committed.append(read_item.dest_index.fqn)
        super().commit_tensor(read_item, tensor)


def test_short_read_into_a_target_commits_nothing(gcs):
    name = SerializationFormat.TORCH_SAVE.value
    # Every GET of a data object ends after 1000 bytes: no archive arrives whole.
    fault = Fault(kind="short_body", count=None, after_bytes=1000, object_glob=f"{name}/__*")
    retry = RetryPolicy(max_attempts=1)
    planner = _Recording()
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        state = _blank()
        with pytest.raises(CheckpointException) as info:
            _load(proxy.endpoint, name, state, planner=planner, retry=retry)
        assert proxy.counts["short_body"] >= 1
    message = str(info.value)
    pattern = rf"rank 0: checkpoint load failed: gs://{BUCKET}/{name}/__\S+ bytes=\d+-\d+"
    assert re.search(pattern, message) and "body ended early" in message
    assert planner.committed == []  # heads and parts of the bytes arrived: nothing committed


def test_filesystem_writer_checkpoint_lands_in_the_targets(gcs, tmp_path):
    # Archives written by torch's own FileSystemWriter match the stand-in templates too.
    dcp.save(_state(), storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    for path in tmp_path.iterdir():
        gcs.put(BUCKET, f"stock/{path.name}", path.read_bytes())
    state = _blank()
    stats = _load(gcs.endpoint, "stock", state, check_commit_order=False).load_stats
    want = _state()
    assert all(torch.equal(state[k], want[k]) for k in ("w", "x", "b")) and state["m"] == want["m"]
    assert _paths(stats) == (3, 3, 3, 0)
