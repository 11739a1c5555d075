"""A case's device mesh over dims ``pp``, ``dp_replicate``, ``dp_shard``, ``tp`` (non-unit ones)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gcsckpt.parallel.strategies import check_dims, mesh_layout


def build_mesh(case: Any, device_type: str = "cpu") -> DeviceMesh | None:
    """``init_device_mesh(device_type, sizes, mesh_dim_names=dims)`` for the case's layout.

    Args:
      case: a ``gcsckpt.bench.cases.Case`` (or any object with its size fields).
      device_type: ``"cpu"`` (gloo or fake) or ``"cuda"`` (nccl).
    Returns:
      The mesh, or ``None`` when every dim is 1 (a single-rank case: no mesh, plain tensors).
    Raises:
      LayoutError: the case's sizes are inconsistent (see ``strategies.check_dims``).
      RuntimeError: the default process group is missing or its size is not ``world_size``.
    """
    check_dims(case)
    names, sizes = mesh_layout(case)
    if not names:
        return None
    if not dist.is_initialized():
        raise RuntimeError(f"case {case.strategy}: init the default process group first")
    if dist.get_world_size() != case.world_size:
        raise RuntimeError(
            f"process group has {dist.get_world_size()} ranks but the case needs world_size "
            f"{case.world_size}"
        )
    return init_device_mesh(device_type, sizes, mesh_dim_names=names)


def sub_mesh(mesh: DeviceMesh | None, *dims: str) -> DeviceMesh | None:
    """The sub-mesh over the given dims that the mesh has (in mesh order), or ``None``."""
    if mesh is None or mesh.mesh_dim_names is None:
        return None
    present = tuple(d for d in mesh.mesh_dim_names if d in dims)
    if not present:
        return None
    return mesh[present] if len(present) > 1 else mesh[present[0]]


def local_rank(mesh: DeviceMesh | None, dim: str) -> int:
    """This rank's coordinate along ``dim`` (0 when the mesh lacks the dim)."""
    sub = sub_mesh(mesh, dim)
    return 0 if sub is None else sub.get_local_rank()


def dim_size(mesh: DeviceMesh | None, dim: str) -> int:
    """The size of ``dim`` in the mesh (1 when absent)."""
    sub = sub_mesh(mesh, dim)
    return 1 if sub is None else sub.size()
