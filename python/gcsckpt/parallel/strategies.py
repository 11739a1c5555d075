"""Strategies and the mesh dims each one uses (pure Python, no torch import)."""

from __future__ import annotations

from typing import Any

# Mesh dims, outermost first; size-1 dims are dropped from the mesh.
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")

# The case field holding each dim's size.
DIM_FIELDS = {
    "pp": "pipeline_parallel_size",
    "dp_replicate": "data_parallel_replicate_size",
    "dp_shard": "data_parallel_size",
    "tp": "tensor_parallel_size",
}

# The dims that must be non-unit for each strategy (all others must be 1). EP reuses the
# dp_shard ranks: it is not a mesh dim, and its size must equal data_parallel_size.
STRATEGY_DIMS: dict[str, tuple[str, ...]] = {
    "fsdp": ("dp_shard",),
    "hsdp": ("dp_replicate", "dp_shard"),
    "tp": ("tp",),
    "fsdp_tp": ("dp_shard", "tp"),
    "hsdp_tp": ("dp_replicate", "dp_shard", "tp"),
    "pp": ("pp",),
    "pp_fsdp": ("pp", "dp_shard"),
    "pp_fsdp_tp": ("pp", "dp_shard", "tp"),
    "pp_hsdp_tp": ("pp", "dp_replicate", "dp_shard", "tp"),
    "ep": ("dp_shard",),
}


class LayoutError(ValueError):
    """A case's strategy and sizes do not describe a valid layout."""


def _size(case: Any, field: str) -> int:
    value = getattr(case, field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(f"{field} must be a positive integer, got {value!r}")
    return value


def check_dims(case: Any) -> None:
    """Checks a case's parallel sizes against its strategy.

    ``case`` needs ``strategy``, ``world_size``, the four ``DIM_FIELDS`` sizes and
    ``expert_parallel_size``.

    A ``world_size`` of 1 with every size 1 is accepted for any strategy (one rank, whole model).

    Raises:
      LayoutError: unknown strategy; a size that is not a positive int; a dim of the strategy
        that is 1 or a dim outside it that is not; a product different from world_size;
        expert_parallel_size != data_parallel_size for ``ep`` or != 1 otherwise.
    """
    if case.strategy not in STRATEGY_DIMS:
        raise LayoutError(
            f"strategy {case.strategy!r} is unknown; known: {', '.join(STRATEGY_DIMS)}"
        )
    wanted = STRATEGY_DIMS[case.strategy]
    if _size(case, "world_size") == 1:
        wanted = ()  # a single rank holds the whole model, whatever the strategy
    product = 1
    for dim in MESH_DIMS:
        field = DIM_FIELDS[dim]
        size = _size(case, field)
        if dim in wanted and size == 1:
            raise LayoutError(f"{field} must be > 1 for strategy {case.strategy!r}")
        if dim not in wanted and size != 1:
            raise LayoutError(f"{field} must be 1 for strategy {case.strategy!r}, got {size}")
        product *= size
    world_size = _size(case, "world_size")
    if product != world_size:
        sizes = " x ".join(f"{DIM_FIELDS[d]}={getattr(case, DIM_FIELDS[d])}" for d in wanted)
        raise LayoutError(f"world_size {world_size} != {sizes} = {product}")
    expert = _size(case, "expert_parallel_size")
    if case.strategy == "ep" and expert != case.data_parallel_size:
        raise LayoutError(
            f"expert_parallel_size {expert} must equal data_parallel_size "
            f"{case.data_parallel_size} for ep (EP reuses the dp_shard ranks)"
        )
    if case.strategy != "ep" and expert != 1:
        raise LayoutError(f"expert_parallel_size must be 1 for strategy {case.strategy!r}")


def mesh_layout(case: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(dim names, sizes) of the case's mesh: non-unit dims in ``MESH_DIMS`` order."""
    names = tuple(d for d in MESH_DIMS if getattr(case, DIM_FIELDS[d]) > 1)
    return names, tuple(getattr(case, DIM_FIELDS[d]) for d in names)
