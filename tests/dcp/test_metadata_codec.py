"""gcsckpt.dcp.metadata_codec: the restricted `.metadata` unpickler (same values as pickle,
no code run, malformed storage entries refused)."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import SerializationFormat, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata

from gcsckpt.dcp import UnsafeMetadataError
from gcsckpt.dcp.metadata_codec import dump_metadata, load_metadata


def _local_metadata(tmp_path, fmt=SerializationFormat.TORCH_SAVE) -> bytes:
    state = {
        "w": torch.ones(3, 2, dtype=torch.bfloat16),
        "meta": {"k": [1, 2]},
        "e": torch.empty(0),
    }
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path), serialization_format=fmt))
    return (tmp_path / ".metadata").read_bytes()


@pytest.mark.parametrize("fmt", list(SerializationFormat))
def test_load_metadata_matches_pickle(tmp_path, fmt):
    raw = _local_metadata(tmp_path, fmt)
    ours = load_metadata(raw, source="test")
    theirs = pickle.loads(raw)
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.storage_data == theirs.storage_data
    assert ours.planner_data == theirs.planner_data
    assert str(ours.storage_meta.checkpoint_id) == str(theirs.storage_meta.checkpoint_id)
    assert pickle.loads(dump_metadata(ours)).storage_data == theirs.storage_data


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch should_not_exist",))


def test_malicious_metadata_does_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = pickle.dumps(Metadata(state_dict_metadata={"x": _RunsCode()}))
    with pytest.raises(UnsafeMetadataError, match="posix.system|os.system"):
        load_metadata(payload, source="gs://b/p/.metadata")
    assert not (tmp_path / "should_not_exist").exists()


def test_getattr_only_reaches_enum_members():
    # getattr(Metadata, "__init__") built by hand: builtins.getattr is admitted only for enums.
    payload = (
        b"\x80\x04cbuiltins\ngetattr\n"
        b"ctorch.distributed.checkpoint.metadata\nMetadata\n"
        b"X\x08\x00\x00\x00__init__\x86R."
    )
    with pytest.raises(UnsafeMetadataError, match="getattr"):
        load_metadata(payload, source="crafted")


def test_metadata_must_be_metadata():
    with pytest.raises(UnsafeMetadataError, match="not DCP Metadata"):
        load_metadata(pickle.dumps({"a": 1}), source="crafted")


def test_truncated_metadata(tmp_path):
    raw = _local_metadata(tmp_path)
    with pytest.raises(ValueError, match="not a readable DCP metadata"):
        load_metadata(raw[: len(raw) // 2], source="crafted")


def _with_storage(raw: bytes, **changes) -> bytes:
    metadata = pickle.loads(raw)
    index = next(iter(metadata.storage_data))
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo(
        changes.get("relative_path", info.relative_path),
        changes.get("offset", info.offset),
        changes.get("length", info.length),
    )
    return pickle.dumps(metadata)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"relative_path": "../other/__0_0.distcp"}, "'\\.\\.'"),
        ({"relative_path": "/abs/__0_0.distcp"}, "absolute"),
        ({"relative_path": "gs://evil/__0_0.distcp"}, "scheme"),
        ({"offset": -1}, "offset=-1"),
        ({"length": "12"}, "length='12'"),
    ],
)
def test_bad_storage_entries(tmp_path, change, message):
    raw = _with_storage(_local_metadata(tmp_path), **change)
    with pytest.raises(ValueError, match=message):
        load_metadata(raw, source="gs://b/p/.metadata")


def test_storage_index_must_be_metadata_index(tmp_path):
    metadata = pickle.loads(_local_metadata(tmp_path))
    metadata.storage_data = {"w": next(iter(metadata.storage_data.values()))}
    with pytest.raises(ValueError, match="malformed"):
        load_metadata(pickle.dumps(metadata), source="crafted")
