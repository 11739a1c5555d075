"""The records the load path passes along: one Fetch per ReadItem, Windows of Fetches.

In: nothing (pure data). Out: `FetchKind`, `Fetch` (built once by `plan`, never changed after),
`Window` (built by `plan.make_windows`). Fetched bytes travel separately, next to the Fetch they
belong to (see `pipeline`), so no stage writes into these records.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.distributed.checkpoint.planner import ReadItem

# Buffered fetches start at multiples of this (bytes), so tensors viewed in place are aligned.
ALIGN = 64


class FetchKind(enum.Enum):
    """What the fetched bytes are."""

    BYTES = "bytes"  # a BYTE_IO item's serialized value
    TORCH_SAVE = "torch_save"  # a `torch.save` archive of one tensor (maybe stream-transformed)
    RAW = "raw"  # plain tensor bytes from a safetensors blob


class Fetch(NamedTuple):
    """One byte range of one checkpoint object and what to do with its bytes (immutable).

    A NamedTuple rather than a frozen dataclass: a load builds one per ReadItem (~12k per rank
    for a scaled-OLMoE checkpoint), and a frozen dataclass's `__init__` costs several times as
    much (docs/measurements.md, "Per-item costs on the load path").

    Attributes:
        path: object path relative to the checkpoint prefix. offset, length: the byte range in
            that object (bytes).
        item: the ReadItem this range serves. kind: a FetchKind.
        descriptors: stream transforms to undo before decoding (TORCH_SAVE/BYTES only), or ().
        dtype, shape: for RAW, the fetched block's dtype and shape (elements); else None/().
        narrow: for RAW, (offsets, lengths) still to cut from the fetched block, or None.
        target: for "direct" RAW fetches, the planner's tensor the bytes land in (contiguous
            CPU tensor of `dtype` and `shape`); None for buffered fetches.
    """

    path: str
    offset: int
    length: int
    item: ReadItem
    kind: FetchKind
    descriptors: tuple = ()
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()
    narrow: tuple[list[int], list[int]] | None = None
    target: torch.Tensor | None = None

    @property
    def buffered(self) -> bool:
        """True when the bytes need a slot in a window buffer (not direct, not empty)."""
        return self.target is None and self.length > 0

    def where(self) -> tuple[str, int, int]:
        """(path, offset, length), for error messages."""
        return self.path, self.offset, self.length


@dataclass(frozen=True, slots=True, eq=False)
class Window:
    """Consecutive Fetches sharing one buffer of `buffer_bytes` bytes.

    `slots[i]` is where `fetches[i]`'s bytes start in that buffer (a multiple of ALIGN), or -1
    for a fetch that needs no buffer (direct or empty).
    """

    fetches: tuple[Fetch, ...]
    slots: tuple[int, ...]
    buffer_bytes: int
