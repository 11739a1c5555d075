"""Loads of checkpoints whose `.metadata` carries the columnar index, through LocalGCS: the
reader reads the tail and section only (one generation), returns the saved values with either
planner, torch's FileSystemReader loads a local copy of the same objects, a damaged section
fails naming the object and generation, and a `.metadata` without index takes the pickle."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSLoadPlanner, GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.indexed_metadata import index_of
from gcsckpt.dcp.load import metadata_read
from gcsckpt.dcp.metadata_index import MetadataIndexError, parse_footer
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

BUCKET = "indexed"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _state():
    g = torch.Generator().manual_seed(5)
    return {
        "w": torch.randn(33, 17, generator=g),
        "b": torch.randn(8, generator=g).to(torch.bfloat16),
        "i": torch.arange(12, dtype=torch.int64).reshape(3, 4),
        "empty": torch.empty(0, 5),
        "step": torch.tensor(7.0),
        "flag": torch.tensor([True, False]),
        "lr": 3e-4,
        "betas": (0.9, 0.95),
        "name": "run-1",
    }


def _blank():
    out = {}
    for key, value in _state().items():
        out[key] = torch.zeros_like(value) if isinstance(value, torch.Tensor) else None
    return out


def _assert_loaded(loaded):
    for key, want in _state().items():
        got = loaded[key]
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def _save(gcs, name, fmt=SerializationFormat.TORCH_SAVE) -> str:
    url = f"gs://{BUCKET}/{name}"
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint, serialization_format=fmt)
    dcp.save(_state(), storage_writer=writer, no_dist=True)
    return url


@pytest.mark.parametrize("fmt", list(SerializationFormat))
@pytest.mark.parametrize("planner", [GCSLoadPlanner, DefaultLoadPlanner])
def test_indexed_checkpoint_loads(gcs, fmt, planner):
    url = _save(gcs, f"ok-{fmt.name}-{planner.__name__}", fmt)
    data = gcs.get(BUCKET, f"ok-{fmt.name}-{planner.__name__}/.metadata")
    assert parse_footer(data, source=url) is not None
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    state = _blank()
    dcp.load(state, storage_reader=reader, planner=planner(), no_dist=True)
    _assert_loaded(state)
    stats = reader.load_stats
    assert stats.metadata_requests == 1 and stats.metadata_bytes == len(data)  # all in the tail


def test_reader_reads_only_the_section_and_pins_the_generation(gcs, monkeypatch):
    url = _save(gcs, "section")
    data = gcs.get(BUCKET, "section/.metadata")
    footer = parse_footer(data, source=url)
    monkeypatch.setattr(metadata_read, "TAIL_BYTES", 256)  # the section lies before the tail
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    metadata = reader.read_metadata()
    assert index_of(metadata) is not None
    assert reader.load_stats.metadata_requests == 2
    assert reader.load_stats.metadata_bytes == 256 + footer.section_length  # no pickle byte
    generation = ObjectStore(gcs.endpoint).stat(BUCKET, "section/.metadata").generation
    assert reader._metadata_generation == generation
    state = _blank()
    dcp.load(state, storage_reader=GCSStorageReader(url, endpoint=gcs.endpoint), no_dist=True)
    _assert_loaded(state)


def test_stock_filesystem_reader_loads_a_local_copy(gcs, tmp_path):
    _save(gcs, "stock-copy")
    store = ObjectStore(gcs.endpoint)
    for name in store.list(BUCKET, "stock-copy/"):
        (tmp_path / name.removeprefix("stock-copy/")).write_bytes(gcs.get(BUCKET, name))
    state = _blank()
    dcp.load(state, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    _assert_loaded(state)


def test_damaged_section_fails_naming_object_and_generation(gcs):
    url = _save(gcs, "damaged")
    data = bytearray(gcs.get(BUCKET, "damaged/.metadata"))
    footer = parse_footer(bytes(data), source=url)
    data[footer.section_offset + 40] ^= 0xFF
    generation = gcs.put(BUCKET, "damaged/.metadata", bytes(data))
    assert pickle.loads(bytes(data)).storage_data  # stock readers still read the pickle
    where = f"{url}/.metadata (generation {generation}): index section fails its CRC-32C"
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    with pytest.raises(MetadataIndexError, match=re.escape(where)):
        reader.read_metadata()
    state = _blank()
    with pytest.raises(CheckpointException, match=re.escape(where)):
        dcp.load(state, storage_reader=reader, no_dist=True)
    assert torch.equal(state["w"], torch.zeros(33, 17))  # nothing loaded


def test_metadata_without_index_takes_the_pickle(gcs):
    url = _save(gcs, "plain")
    data = gcs.get(BUCKET, "plain/.metadata")
    footer = parse_footer(data, source=url)
    gcs.put(BUCKET, "plain/.metadata", data[: footer.section_offset])  # as stock torch writes
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    state = _blank()
    dcp.load(state, storage_reader=reader, no_dist=True)
    _assert_loaded(state)
    # The tail GET, then the whole object in a GET whose hash the client library checks.
    assert index_of(reader.metadata) is None and reader.load_stats.metadata_requests == 2
