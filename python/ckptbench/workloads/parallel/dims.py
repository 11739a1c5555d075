"""ParallelDims: the sizes of a rank layout's mesh dims, checked once (pure Python, no torch).

Everything in ``ckptbench.workloads.parallel`` takes a ``ParallelDims`` rather than a caller's
record: the benchmark builds one from its ``Case`` (``Case.parallel_dims``), tests build them
directly.
"""

from __future__ import annotations

import dataclasses

from ckptbench.workloads.parallel.strategies import MESH_DIMS, STRATEGY_DIMS, LayoutError

# The long names of the sizes: in error messages, and the benchmark catalogue's fields and result
# columns.
SIZE_NAMES = {
    "pp": "pipeline_parallel_size",
    "dp_replicate": "data_parallel_replicate_size",
    "dp_shard": "data_parallel_size",
    "tp": "tensor_parallel_size",
    "ep": "expert_parallel_size",
}


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ParallelDims:
    """A layout: its strategy, world size and the size of every mesh dim.

    Attributes:
      strategy: one of ``strategies.STRATEGY_DIMS`` (``fsdp``, ``hsdp``, ``tp``, ``fsdp_tp``,
        ``hsdp_tp``, ``pp``, ``pp_fsdp``, ``pp_fsdp_tp``, ``pp_hsdp_tp``, ``ep``).
      world_size: ranks (processes, one per device).
      pp, dp_replicate, dp_shard, tp: mesh dim sizes (``pipeline_parallel_size``,
        ``data_parallel_replicate_size``, ``data_parallel_size``, ``tensor_parallel_size``).
      ep: expert-parallel size (``expert_parallel_size``); not a mesh dim: EP reuses the
        dp_shard ranks, so it equals ``dp_shard`` for ``ep`` and is 1 otherwise.

    Raises (at construction):
      LayoutError: unknown strategy; a size that is not a positive int; a dim of the strategy
        that is 1 or a dim outside it that is not; a product of the sizes different from
        ``world_size``; ``ep`` != ``dp_shard`` for ``ep`` or != 1 otherwise. A ``world_size``
        of 1 with every size 1 is accepted for any strategy (one rank holds the whole model).
    """

    strategy: str
    world_size: int
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGY_DIMS:
            raise LayoutError(
                f"strategy {self.strategy!r} is unknown; known: {', '.join(STRATEGY_DIMS)}"
            )
        world_size = _positive("world_size", self.world_size)
        wanted = () if world_size == 1 else STRATEGY_DIMS[self.strategy]
        product = 1
        for dim in MESH_DIMS:
            size = _positive(SIZE_NAMES[dim], getattr(self, dim))
            if dim in wanted and size == 1:
                raise LayoutError(f"{SIZE_NAMES[dim]} must be > 1 for strategy {self.strategy!r}")
            if dim not in wanted and size != 1:
                raise LayoutError(
                    f"{SIZE_NAMES[dim]} must be 1 for strategy {self.strategy!r}, got {size}"
                )
            product *= size
        if product != world_size:
            sizes = " x ".join(f"{SIZE_NAMES[d]}={getattr(self, d)}" for d in wanted)
            raise LayoutError(f"world_size {world_size} != {sizes} = {product}")
        ep = _positive(SIZE_NAMES["ep"], self.ep)
        if self.strategy == "ep" and ep != self.dp_shard:
            raise LayoutError(
                f"expert_parallel_size {ep} must equal data_parallel_size "
                f"{self.dp_shard} for ep (EP reuses the dp_shard ranks)"
            )
        if self.strategy != "ep" and ep != 1:
            raise LayoutError(f"expert_parallel_size must be 1 for strategy {self.strategy!r}")

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """The mesh's dims: the non-unit ones, outermost first (``MESH_DIMS`` order)."""
        return tuple(d for d in MESH_DIMS if getattr(self, d) > 1)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The sizes of ``mesh_dim_names``, in the same order (empty for one rank)."""
        return tuple(getattr(self, d) for d in self.mesh_dim_names)
