"""Applies a layout to a ``meta`` model: PP split, EP experts, TP, then FSDP2/HSDP."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from ckptbench.workloads.parallel.dims import ParallelDims
from ckptbench.workloads.parallel.ep import expert_slice, keep_local_experts
from ckptbench.workloads.parallel.fsdp import apply_fsdp
from ckptbench.workloads.parallel.mesh import dim_size, local_rank, sub_mesh
from ckptbench.workloads.parallel.pp import split_pipeline_stage
from ckptbench.workloads.parallel.tp import apply_tp


@dataclass(frozen=True)
class Layout:
    """What a rank holds.

    Attributes:
      strategy: the layout's strategy.
      pp_stage: this rank's pipeline stage (0 without PP); layers: its decoder-layer indices
        (``None`` when the rank holds all layers).
      experts: this rank's expert indices under EP, else ``None``.
    """

    strategy: str
    pp_stage: int = 0
    layers: range | None = None
    experts: range | None = None


def apply_layout(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh | None) -> Layout:
    """Reshapes and shards ``model`` in place for the layout ``dims`` on ``mesh`` (``build_mesh``).

    Order: PP stage split (drops other stages' modules), EP (keeps this dp_shard rank's experts),
    TP over ``tp``, FSDP2 over ``dp_shard`` or HSDP over (``dp_replicate``, ``dp_shard``), with
    EP experts ignored by FSDP.

    Raises:
      ValueError: uneven PP or EP split, tied embeddings, ``ep`` on a dense model.
      RuntimeError: ``mesh`` is ``None`` for a multi-rank layout.
    """
    if mesh is None:
        if dims.world_size != 1:
            raise RuntimeError(f"layout needs a mesh of {dims.world_size} ranks, got none")
        return Layout(dims.strategy)
    stage, layers, experts, ignored = 0, None, None, []
    if sub_mesh(mesh, "pp") is not None:
        stage = local_rank(mesh, "pp")
        layers = split_pipeline_stage(model, stage, dim_size(mesh, "pp"))
    if dims.strategy == "ep":
        rank, size = local_rank(mesh, "dp_shard"), dims.ep
        ignored = keep_local_experts(model, rank, size)
        experts = expert_slice(model.config.num_experts, rank, size)
    tp_mesh = sub_mesh(mesh, "tp")
    if tp_mesh is not None:
        apply_tp(model, tp_mesh)
    dp_mesh = sub_mesh(mesh, "dp_replicate", "dp_shard")
    if dp_mesh is not None:
        apply_fsdp(model, dp_mesh, ignored)
    return Layout(dims.strategy, stage, layers, experts)
