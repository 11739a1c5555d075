"""Deterministic state dicts for DCP round-trip tests, and exact comparison after a load.

A saved state is {"model": ..., "optim": ..., "extra": ...}: FSDP2 (DTensor Shard(0)) model and
AdamW state, plus plain tensors of several dtypes, an empty and a 0-dim tensor, a bf16 DTensor and
BYTE_IO entries. Values come from generators seeded by name, so every rank builds identical full
tensors; the saver writes the full values (`expected`) to local disk and loaders compare to them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor


def det_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Values fixed by `name` (same on every rank and run)."""
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-(2**40), 2**40, shape, generator=gen, dtype=torch.int64).to(dtype)


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 12))


def fsdp_state(mesh: DeviceMesh) -> dict[str, Any]:
    """FSDP2 model + one AdamW step (deterministic grads) + extra entries, sharded on `mesh`
    (1-D: FSDP; 2-D (dp_replicate, dp_shard): HSDP, replicated on the first dimension)."""
    placements = [Replicate()] * (mesh.ndim - 1) + [Shard(0)]
    model = _model()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(det_tensor("param." + name, tuple(param.shape), param.dtype))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for name, param in model.named_parameters():
        grad = det_tensor("grad." + name, tuple(param.shape), torch.float32)
        param.grad = distribute_tensor(grad, mesh, placements)
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim)
    extra = {
        "bf16": distribute_tensor(det_tensor("bf16", (37, 6), torch.bfloat16), mesh, placements),
        "i64": det_tensor("i64", (5, 3), torch.int64),
        "f32": det_tensor("f32", (11,), torch.float32),
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(3.25),
        "meta": {"step": 7, "tag": "run-a", "lrs": [0.1, 0.2]},
    }
    return {"model": model_sd, "optim": optim_sd, "extra": extra}


def plain_state() -> dict[str, Any]:
    """Non-distributed tensors of every dtype we care about, plus BYTE_IO entries."""
    return {
        "w": det_tensor("w", (33, 17), torch.float32),
        "b": det_tensor("b", (9, 4), torch.bfloat16),
        "h": det_tensor("h", (6,), torch.float16),
        "i": det_tensor("i", (4, 2), torch.int64),
        "i32": det_tensor("i32", (7,), torch.int32),
        "u8": det_tensor("u8", (10,), torch.uint8),
        "flag": torch.tensor([True, False, True]),
        "t": det_tensor("t", (5, 7), torch.float32).t(),
        "empty": torch.empty(0, 3),
        "scalar": torch.tensor(2.5),
        "meta": {"step": 3, "name": "plain", "nested": {"x": [1, 2, 3]}},
    }


def tree_map(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Applies `fn` to the leaves of nested dicts/lists/tuples."""
    if isinstance(value, dict):
        return {k: tree_map(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(tree_map(v, fn) for v in value)
    return fn(value)


def full_values(state: dict[str, Any]) -> dict[str, Any]:
    """The state with DTensors gathered to full CPU tensors (a collective on every rank)."""

    def gather(leaf):
        if isinstance(leaf, DTensor):
            return leaf.full_tensor().clone()
        if isinstance(leaf, torch.Tensor):
            return leaf.clone()
        return leaf

    return tree_map(state, gather)


def _sentinel(leaf: Any) -> Any:
    if isinstance(leaf, bool):
        return not leaf
    if isinstance(leaf, int):
        return -123456
    if isinstance(leaf, float):
        return -1.5
    if isinstance(leaf, str):
        return "<unloaded>"
    return leaf


def blank_like(state: dict[str, Any]) -> dict[str, Any]:
    """Same structure, tensors zeroed in place (DTensor shards too), other leaves replaced."""

    def blank(leaf):
        if isinstance(leaf, DTensor):
            leaf.to_local().zero_()
            return leaf
        if isinstance(leaf, torch.Tensor):
            return torch.zeros_like(leaf)
        return _sentinel(leaf)

    return tree_map(state, blank)


def compare(loaded: Any, expected: Any, path: str = "") -> tuple[int, list[str]]:
    """(leaves compared, mismatch descriptions); DTensors are gathered (collective)."""
    if isinstance(expected, dict):
        count, bad = 0, []
        if not isinstance(loaded, dict) or set(loaded) != set(expected):
            return 0, [f"{path}: keys differ"]
        for key in sorted(expected):
            c, b = compare(loaded[key], expected[key], f"{path}.{key}")
            count, bad = count + c, bad + b
        return count, bad
    if isinstance(expected, (list, tuple)) and not isinstance(loaded, torch.Tensor):
        if len(loaded) != len(expected):
            return 0, [f"{path}: length {len(loaded)} != {len(expected)}"]
        count, bad = 0, []
        for i, (lv, ev) in enumerate(zip(loaded, expected, strict=True)):
            c, b = compare(lv, ev, f"{path}.{i}")
            count, bad = count + c, bad + b
        return count, bad
    if isinstance(expected, torch.Tensor):
        value = loaded.full_tensor() if isinstance(loaded, DTensor) else loaded
        same = (
            isinstance(value, torch.Tensor)
            and value.dtype == expected.dtype
            and value.shape == expected.shape
            and torch.equal(value.cpu(), expected)
        )
        return 1, [] if same else [f"{path}: tensor differs"]
    return 1, [] if loaded == expected else [f"{path}: {loaded!r} != {expected!r}"]
