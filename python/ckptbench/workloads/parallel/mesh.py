"""A layout's device mesh over dims ``pp``, ``dp_replicate``, ``dp_shard``, ``tp`` (non-unit)."""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ckptbench.workloads.parallel.dims import ParallelDims


def build_mesh(dims: ParallelDims, device_type: str = "cpu") -> DeviceMesh | None:
    """``init_device_mesh(device_type, dims.mesh_shape, mesh_dim_names=dims.mesh_dim_names)``.

    Args:
      dims: the layout's sizes (already validated).
      device_type: ``"cpu"`` (gloo or fake) or ``"cuda"`` (nccl).
    Returns:
      The mesh, or ``None`` when every dim is 1 (a single-rank layout: no mesh, plain tensors).
    Raises:
      RuntimeError: the default process group is missing or its size is not ``world_size``.
    """
    if not dims.mesh_dim_names:
        return None
    if not dist.is_initialized():
        raise RuntimeError(f"layout {dims.strategy}: init the default process group first")
    if dist.get_world_size() != dims.world_size:
        raise RuntimeError(
            f"process group has {dist.get_world_size()} ranks but the case needs world_size "
            f"{dims.world_size}"
        )
    return init_device_mesh(device_type, dims.mesh_shape, mesh_dim_names=dims.mesh_dim_names)


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
