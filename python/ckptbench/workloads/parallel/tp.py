"""Tensor parallelism: colwise q/k/v/gate/up, rowwise o/down, parallel embeddings and lm_head."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

_COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROWWISE = ("o_proj", "down_proj")


def tp_plan(model: nn.Module) -> dict[str, ParallelStyle]:
    """The TP plan for the modules present in ``model`` (a PP stage may lack some).

    Linear projections by leaf name (attention and MLP, every OLMoE expert included); the token
    embedding row-wise (vocab-sharded) and ``lm_head`` column-wise, both with replicated
    outputs. Norms and the MoE router stay plain (replicated) tensors.
    """
    plan: dict[str, ParallelStyle] = {}
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, nn.Linear) and leaf in _COLWISE:
            plan[name] = ColwiseParallel()
        elif isinstance(module, nn.Linear) and leaf in _ROWWISE:
            plan[name] = RowwiseParallel()
    inner = getattr(model, "model", None)
    if isinstance(getattr(inner, "embed_tokens", None), nn.Embedding):
        plan["model.embed_tokens"] = RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Replicate()
        )
    if isinstance(getattr(model, "lm_head", None), nn.Linear):
        plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
    return plan


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Applies :func:`tp_plan` over ``tp_mesh`` in place (works on ``meta`` models).

    Colwise weights become ``Shard(0)`` DTensors, rowwise ``Shard(1)``, the embedding
    ``Shard(0)``. Only the state-dict layout is the point: attention head counts are not
    rewritten for a TP forward pass.
    """
    return parallelize_module(model, tp_mesh, tp_plan(model))
