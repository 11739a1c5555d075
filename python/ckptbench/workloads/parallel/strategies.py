"""Strategies and the mesh dims each one uses (pure Python, no torch import).

The sizes of one layout are a ``dims.ParallelDims``, which checks them against these tables.
"""

from __future__ import annotations

# Mesh dims, outermost first; size-1 dims are dropped from the mesh.
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")

# The dims that must be non-unit for each strategy (all others must be 1). EP reuses the
# dp_shard ranks: it is not a mesh dim, and its size must equal the dp_shard size.
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
    """A strategy and sizes that do not describe a valid layout (the message names the size)."""
