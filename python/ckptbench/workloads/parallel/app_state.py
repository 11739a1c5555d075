"""The state a rank saves or loads: a seeded model + AdamW state in a layout (``ParallelDims``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from ckptbench.workloads.models.builder import build_meta_model
from ckptbench.workloads.models.configs import config_dict, parse_model_spec, with_scale
from ckptbench.workloads.models.state import app_state_dict, attach_adamw_state, materialize
from ckptbench.workloads.parallel.dims import SIZE_NAMES, ParallelDims
from ckptbench.workloads.parallel.layout import Layout, apply_layout
from ckptbench.workloads.parallel.strategies import MESH_DIMS

# Bump when the synthetic values or the state-dict structure change, so old checkpoints are
# not reused against new checksums.
STATE_FORMAT_VERSION = 1


@dataclass
class RankState:
    """A rank's model, optimizer, layout and the DCP state dict over them (shared storage)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    layout: Layout
    state_dict: dict[str, Any]


def build_rank_state(
    model_spec: str,
    dims: ParallelDims,
    mesh: DeviceMesh | None,
    *,
    seed: int,
    device: torch.device | str,
) -> RankState:
    """Builds ``model_spec`` on ``meta``, applies the layout ``dims`` on ``mesh``, materializes
    this rank's shards on ``device`` with values keyed by (seed, FQN) and attaches a seeded AdamW
    state.

    Raises: see ``apply_layout`` and ``parse_model_spec``.
    """
    model = build_meta_model(model_spec)
    layout = apply_layout(model, dims, mesh)
    materialize(model, device, seed)
    optimizer = attach_adamw_state(model, seed)
    return RankState(model, optimizer, layout, app_state_dict(model, optimizer))


def build_app_state(
    model_spec: str,
    dims: ParallelDims,
    mesh: DeviceMesh | None,
    *,
    seed: int,
    device: torch.device | str,
) -> dict[str, Any]:
    """The state dict to pass to ``dcp.save`` / ``dcp.load`` on this rank.

    ``{"model": {FQN: tensor}, "optim": {"state.<FQN>.<exp_avg|exp_avg_sq|step>": tensor,
    "param_groups.<FQN>.<lr|...>": python value}}``: bf16 parameters and moments (DTensors for
    sharded layouts, plain tensors for EP experts and unsharded layouts), float32 ``step``
    scalars. A different ``seed`` gives different values (fill a fresh state before each timed
    load); the same seed gives the same global values under every layout.
    """
    return build_rank_state(model_spec, dims, mesh, seed=seed, device=device).state_dict


def state_config_hash(
    model_spec: str,
    dims: ParallelDims,
    model_scale: str | None = None,
    *,
    seed: int | None = None,
) -> str:
    """A 16-hex-digit digest of everything that fixes a saved checkpoint's bytes and layout.

    Covers the resolved model config (``model_spec`` at ``model_scale`` when given), strategy,
    world size and parallel sizes, ``STATE_FORMAT_VERSION`` and torch's major.minor version
    (DCP's format), plus ``seed`` when given. Nothing else of a caller's record (a benchmark
    case's rounds, sweep axis, bucket kind) enters it. Reuse a stored checkpoint only when the
    digest (and the save seed) match.

    Raises:
      ModelSpecError: invalid model spec or scale.
    """
    spec = model_spec if model_scale is None else with_scale(model_spec, model_scale)
    parsed = parse_model_spec(spec)
    payload = {
        "format": STATE_FORMAT_VERSION,
        "torch": ".".join(torch.__version__.split(".")[:2]),
        "model": parsed.key,
        "scale": parsed.scale,
        "config": config_dict(parsed),
        "strategy": dims.strategy,
        "world_size": dims.world_size,
        # Keyed by the long size names, as before ParallelDims: stored digests stay valid.
        "sizes": {SIZE_NAMES[dim]: getattr(dims, dim) for dim in MESH_DIMS},
        "expert_parallel_size": dims.ep,
        "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
