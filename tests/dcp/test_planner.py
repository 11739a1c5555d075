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


def _optimizer_state(extra: dict | None = None) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)])
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optim.step()
    options = StateDictOptions(flatten_optimizer_state_dict=True)
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "meta": {"step": 3, "tags": ["a"]},
        **(extra or {}),
    }


def _plans(metadata, make_state, **kwargs):
    plans, planners = [], []
    for planner in (
        dcp.DefaultLoadPlanner(**kwargs),
        GCSLoadPlanner(compact_plans=False, **kwargs),
    ):
        state = make_state()
        planner.set_up_planner(state, metadata, True)
        assert planner.original_state_dict is state
        plans.append(planner.create_local_plan())
        planners.append(planner)
    # The flattened state and its mappings are torch's, leaf for leaf.
    want, got = planners
    assert got.mappings == want.mappings and got.state_dict.keys() == want.state_dict.keys()
    for key, value in want.state_dict.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got.state_dict[key], value), key
        else:
            assert got.state_dict[key] == value, key
    return plans


@pytest.mark.parametrize("flatten", [True, False])
def test_local_plan_equals_the_default_planners(tmp_path, flatten):
    dcp.save(_optimizer_state(), storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    metadata = dcp.FileSystemReader(str(tmp_path)).read_metadata()
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    state = _optimizer_state if flatten else lambda: flatten_state_dict(_optimizer_state())[0]
    torch_plan, plan = _plans(metadata, state, flatten_state_dict=flatten)
    assert plan.items == torch_plan.items and len(plan.items) > 50
    assert (
        plan.storage_data == torch_plan.storage_data
        and plan.planner_data == torch_plan.planner_data
    )
    # A state dict with a key the checkpoint lacks: skipped with allow_partial_load, else the
    # same error as torch's.
    more = lambda: _optimizer_state({"new": torch.zeros(2)})  # noqa: E731
    torch_plan, plan = _plans(metadata, more, allow_partial_load=True)
    assert plan.items == torch_plan.items
    with pytest.raises(RuntimeError, match="Missing key in checkpoint state_dict: new"):
        _plans(metadata, more)
    # A state dict without some of the checkpoint's keys (torch's pre-2.4 check): torch's path.
    fewer = lambda: {k: v for k, v in _optimizer_state().items() if k != "meta"}  # noqa: E731
    torch_plan, plan = _plans(metadata, fewer, allow_partial_load=True)
    assert plan.items == torch_plan.items
