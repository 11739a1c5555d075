"""The node-local tier's reader (`local_tier._TierReader`) loads exactly what torch's own
FileSystemReader loads from the same copy: every dtype, 0-d, zero-size and strided
destinations, a subset of the saved keys and BYTE_IO values; a copy with an item cut short
fails the load naming the file."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException

from gcsckpt.dcp.local_tier import LocalTier
from gcsckpt.dcp.paths import CheckpointLocation

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _state() -> dict:
    g = torch.Generator().manual_seed(7)
    state = {
        f"t.{str(d).split('.')[1]}": (torch.randn(37, 5, generator=g) * 9).to(d) for d in DTYPES
    }
    state["zero_d"] = torch.tensor(3.25)
    state["empty"] = torch.empty(0, 4)
    state["view"] = torch.arange(60.0).reshape(6, 10)[:, 2:7]  # saved from a strided view
    state["odd"] = torch.randn(3, generator=g)  # 12 bytes: later archives start unaligned
    state["meta"] = {"step": 11, "lr": 0.5, "names": ["a", "b"]}
    return state


def _blank(state: dict) -> dict:
    out = {k: torch.zeros_like(v) for k, v in state.items() if isinstance(v, torch.Tensor)}
    out["view"] = torch.zeros(5, 6).t()  # a strided destination
    out["meta"] = {"step": 0, "lr": 0.0, "names": []}
    return out


def _tier(tmp_path) -> LocalTier:
    tier = LocalTier(str(tmp_path), CheckpointLocation("bucket", "run"), rank=0, world_size=1)
    tier.write(_state(), step=3, committed=lambda: 17)
    return tier


def test_tier_reader_loads_what_torch_loads(tmp_path):
    tier = _tier(tmp_path)
    ours, torchs = _blank(_state()), _blank(_state())
    tier.load(ours, 3)
    dcp.load(torchs, storage_reader=FileSystemReader(tier.folder(3)), no_dist=True)
    assert ours.keys() == torchs.keys()
    for key, value in torchs.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
        else:
            assert ours[key] == value
    want = _state()
    assert torch.equal(ours["view"], want["view"]) and ours["meta"] == want["meta"]
    assert (
        ours["t.bfloat16"].view(torch.int16).tolist()
        == want["t.bfloat16"].view(torch.int16).tolist()
    )


def test_tier_reader_loads_the_keys_asked_for(tmp_path):
    tier = _tier(tmp_path)
    dest = {"odd": torch.zeros(3), "t.int64": torch.zeros(37, 5, dtype=torch.int64)}
    tier.load(dest, 3)
    want = _state()
    assert torch.equal(dest["odd"], want["odd"]) and torch.equal(dest["t.int64"], want["t.int64"])


def test_a_cut_copy_fails_naming_nothing_loaded_silently(tmp_path):
    tier = _tier(tmp_path)
    folder = tier.folder(3)
    (data,) = [n for n in os.listdir(folder) if n.endswith(".distcp")]
    path = os.path.join(folder, data)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    assert "holds" in tier.verify(3, 17)  # the manifest check catches it first
    with pytest.raises(CheckpointException):
        tier.load(_blank(_state()), 3)
