"""Layout-independent seeded values: each element is a function of (seed, name, global index).

``torch.Generator`` streams depend on how a tensor is cut into shards, so a checkpoint saved under
one layout could not be checked against a model filled under another. Here every element comes
from a counter-based integer hash of its global linear index (a 32-bit xor-shift-multiply mixer,
constant 0x45d9f3b, after T. Mueller's public integer-hash answer on Stack Overflow) mapped to a
normal quantile, so a rank fills only its shard and the values match any layout.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

_MASK32 = 0xFFFFFFFF
_MULT = 0x45D9F3B  # < 2**31, so (x < 2**32) * _MULT never overflows int64
_CHUNK_ELEMENTS = 1 << 22  # bounds the int64/float32 temporaries to ~50 MB


def name_key(seed: int, name: str) -> tuple[int, int, int]:
    """Three 32-bit words derived from (seed, name) by sha256; the per-tensor stream key."""
    digest = hashlib.sha256(f"{int(seed)}\x00{name}".encode()).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in (0, 4, 8))  # type: ignore[return-value]


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """In place: x int64 with values in [0, 2**32) -> hashed values in [0, 2**32)."""
    x.bitwise_xor_(x >> 16)
    x.mul_(_MULT).bitwise_and_(_MASK32)
    x.bitwise_xor_(x >> 16)
    x.mul_(_MULT).bitwise_and_(_MASK32)
    x.bitwise_xor_(x >> 16)
    return x


_QUANTILES: dict[torch.device, torch.Tensor] = {}


def _quantile_table(device: torch.device) -> torch.Tensor:
    """float32[65536]: standard normal quantiles at (j + 0.5) / 65536 (tails cut at ~4.3 sigma).

    A table lookup replaces Box-Muller's log/sqrt/cos: 16 bits of resolution are already finer
    than bf16's 8-bit mantissa, and a lookup costs less CPU than the transcendental functions.
    """
    if device not in _QUANTILES:
        levels = (torch.arange(65536, dtype=torch.float64) + 0.5) / 65536.0
        _QUANTILES[device] = torch.special.ndtri(levels).to(torch.float32).to(device)
    return _QUANTILES[device]


def _normals(index: torch.Tensor, key: tuple[int, int, int], wide: bool) -> torch.Tensor:
    """Standard normal float32 values for int64 global indices (any shape, index's device)."""
    h = (index & _MASK32) ^ key[0]
    if wide:  # indices past 2**32: fold in the high word too
        h.bitwise_xor_(_mix32_((index >> 32) ^ key[1]))
    _mix32_(h.bitwise_xor_(key[2]))
    return _quantile_table(index.device)[h >> 16]


def local_extent(tensor: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """(local tensor, global shape, global offset) of a DTensor shard or a plain tensor.

    Uses the same ``compute_local_shape_and_global_offset`` as DCP's save planner, so offsets
    are the chunk offsets written to ``.metadata``.

    Raises:
      RuntimeError: the DTensor's local shape disagrees with its placements.
    """
    if not isinstance(tensor, DTensor):
        return tensor, tuple(tensor.shape), (0,) * tensor.dim()
    local = tensor.to_local()
    shape, offset = compute_local_shape_and_global_offset(
        tensor.shape, tensor.device_mesh, tensor.placements
    )
    if tuple(local.shape) != tuple(shape):
        raise RuntimeError(
            f"local shard shape {tuple(local.shape)} != {tuple(shape)} expected from placements "
            f"{tensor.placements} of global shape {tuple(tensor.shape)}"
        )
    return local, tuple(tensor.shape), tuple(offset)


def _row_indices(
    rows: range,
    local_shape: Sequence[int],
    offset: Sequence[int],
    global_shape: Sequence[int],
    device: torch.device,
) -> torch.Tensor:
    """Global linear indices (int64) of local rows ``rows`` (dim 0) of a block."""
    strides = [1] * len(global_shape)
    for d in range(len(global_shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * global_shape[d + 1]
    ndim = len(global_shape)
    index = torch.zeros((), dtype=torch.int64, device=device)
    for d in range(ndim):
        start, size = (rows.start, len(rows)) if d == 0 else (0, local_shape[d])
        axis = torch.arange(
            offset[d] + start, offset[d] + start + size, dtype=torch.int64, device=device
        )
        view = [1] * ndim
        view[d] = size
        index = index + (axis * strides[d]).view(view)
    return index


@torch.no_grad()
def fill_normal_block_(
    local: torch.Tensor,
    global_shape: Sequence[int],
    offset: Sequence[int],
    seed: int,
    name: str,
    std: float,
) -> torch.Tensor:
    """Fills ``local``, the block at ``offset`` of a ``global_shape`` tensor, in place.

    The value at global index i depends only on (seed, name, i), so any cut of the tensor gets
    the same values as the whole. Computed in float32 on ``local``'s device in chunks of
    4 Mi elements, then cast to ``local``'s dtype (bf16 here).

    Raises:
      ValueError: the block does not fit inside ``global_shape``.
    """
    if (
        len(offset) != local.dim()
        or len(global_shape) != local.dim()
        or any(
            o < 0 or o + n > g for o, n, g in zip(offset, local.shape, global_shape, strict=True)
        )
    ):
        where = f"block {tuple(local.shape)} at {tuple(offset)}"
        raise ValueError(f"{name}: {where} is outside {tuple(global_shape)}")
    if local.numel() == 0:
        return local
    key = name_key(seed, name)
    wide = math.prod(global_shape) > (1 << 32)
    if local.dim() == 0:
        zero = torch.zeros((), dtype=torch.int64, device=local.device)
        return local.copy_(_normals(zero, key, wide).mul_(std))
    row = max(1, math.prod(local.shape[1:]))
    step = max(1, _CHUNK_ELEMENTS // row)
    for start in range(0, local.shape[0], step):
        rows = range(start, min(start + step, local.shape[0]))
        index = _row_indices(rows, local.shape, offset, global_shape, local.device)
        local[rows.start : rows.stop].copy_(_normals(index, key, wide).mul_(std))
    return local


def fill_normal_(tensor: torch.Tensor, seed: int, name: str, std: float) -> torch.Tensor:
    """Fills a tensor or this rank's DTensor shard with N(0, std^2) values keyed by (seed, name).

    Same values per global element under every layout (fsdp, tp, ep, ...); see
    :func:`fill_normal_block_`.

    Args:
      tensor: a plain tensor or DTensor of any shape; written in place.
      seed: integer seed. name: the tensor's FQN (or FQN + suffix for optimizer state).
      std: standard deviation.
    Returns: ``tensor``.
    """
    local, global_shape, offset = local_extent(tensor)
    fill_normal_block_(local, global_shape, offset, seed, name, std)
    return tensor
