"""gcsckpt.dcp.planner: GCSLoadPlanner decodes plain BYTE_IO values itself, like torch.load."""

from __future__ import annotations

import io

import pytest
import torch
import torch.distributed.checkpoint as dcp

from gcsckpt.dcp.planner import GCSLoadPlanner


class _Custom:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, _Custom) and other.x == self.x


@pytest.mark.parametrize(
    "value",
    [0.001, (0.9, 0.95), False, None, "adamw", [1, 2, {"a": (3, 4)}], {"k": {1, 2}}, 3, b"xy"],
)
def test_planner_plain_values_match_torch_load(value):
    buf = io.BytesIO()
    torch.save(value, buf)
    found, decoded = GCSLoadPlanner()._plain_value(io.BytesIO(buf.getvalue()))
    assert found and decoded == torch.load(io.BytesIO(buf.getvalue()), weights_only=False)


@pytest.mark.parametrize("value", [torch.ones(2), _Custom(5), {"t": torch.zeros(1)}])
def test_planner_leaves_non_plain_values_to_torch(value):
    buf = io.BytesIO()
    torch.save(value, buf)
    assert GCSLoadPlanner()._plain_value(io.BytesIO(buf.getvalue())) == (False, None)


def test_planner_gives_mutable_values_fresh_copies():
    planner = GCSLoadPlanner()
    buf = io.BytesIO()
    torch.save([1, 2], buf)
    first = planner._plain_value(io.BytesIO(buf.getvalue()))[1]
    first.append(3)
    assert planner._plain_value(io.BytesIO(buf.getvalue()))[1] == [1, 2]


def test_planner_loads_like_the_default_planner(tmp_path):
    state = {"w": torch.ones(2), "opt": {"lr": 0.1, "betas": (0.9, 0.99), "obj": _Custom(7)}}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    results = []
    for planner in (dcp.DefaultLoadPlanner(), GCSLoadPlanner()):
        target = {"w": torch.zeros(2), "opt": {"lr": 0.0, "betas": (0.0, 0.0), "obj": None}}
        dcp.load(target, storage_reader=dcp.FileSystemReader(str(tmp_path)), planner=planner)
        results.append(target)
    assert results[0]["opt"] == results[1]["opt"] == state["opt"]
    assert torch.equal(results[1]["w"], state["w"])
