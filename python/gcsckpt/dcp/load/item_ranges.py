"""The records the load path passes along: one ItemRange per ReadItem, Windows of ItemRanges.

In: nothing (pure data). Out: `ItemRangeKind`, `ItemRange` (built once by `plan`, never changed
after), `Window` (built by `plan.make_windows`). Fetched bytes travel separately, next to the
ItemRange they belong to (see `pipeline`), so no stage writes into these records.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.distributed.checkpoint.planner import ReadItem

# Buffered item ranges start at multiples of this (bytes), so tensors viewed in place are aligned
# (BYTES item ranges excepted: `plan.make_windows` packs runs of them back to back).
ALIGN = 64


class ItemRangeKind(enum.Enum):
    """What the fetched bytes are."""

    BYTES = "bytes"  # a BYTE_IO item's serialized value
    TORCH_SAVE = "torch_save"  # a `torch.save` archive of one tensor (maybe stream-transformed)
    RAW = "raw"  # plain tensor bytes from a safetensors blob


class ItemRange(NamedTuple):
    """One byte range of one checkpoint object and what to do with its bytes (immutable).

    A NamedTuple rather than a frozen dataclass: a load builds one per ReadItem (~12k per rank
    for a scaled-OLMoE checkpoint), and a frozen dataclass's `__init__` costs several times as
    much (docs/measurements.md, "Per-item costs on the load path").

    Attributes:
        path: object path relative to the checkpoint prefix. offset, length: the byte range in
            that object (bytes).
        item: the ReadItem this range serves. kind: an ItemRangeKind.
        descriptors: stream transforms to undo before decoding (TORCH_SAVE/BYTES only), or ().
        dtype, shape: for RAW, the fetched block's dtype and shape (elements); else None/().
        narrow: for RAW, (offsets, lengths) still to cut from the fetched block, or None.
        target: for "direct" item ranges, the planner's tensor the bytes land in (contiguous
            CPU tensor of `dtype` and `shape`); None for buffered item ranges.
        archive: for direct TORCH_SAVE item ranges, the group's `archives.ArchiveTemplate` (the
            archive's head and tail go to a scratch slot, checked before commit); else None.
        skip: for direct TORCH_SAVE item ranges, bytes from the storage's start to the region.
    """

    path: str
    offset: int
    length: int
    item: ReadItem
    kind: ItemRangeKind
    descriptors: tuple = ()
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()
    narrow: tuple[list[int], list[int]] | None = None
    target: torch.Tensor | None = None
    archive: Any = None
    skip: int = 0

    @property
    def buffered(self) -> bool:
        """True when the bytes need a slot in a window buffer (not direct, not empty)."""
        return self.target is None and self.length > 0

    @property
    def slot_bytes(self) -> int:
        """Bytes of window buffer this item range needs: its length when buffered, an archive's head
        and tail when direct TORCH_SAVE, else 0."""
        if self.archive is not None:
            return self.archive.head_len + self.archive.tail_len
        return self.length if self.target is None else 0

    @property
    def unaligned(self) -> bool:
        """True when the slot's bytes are never viewed as a tensor (a BYTE_IO archive, or a
        direct TORCH_SAVE item range's head and tail), so the slot may start anywhere."""
        return self.kind is ItemRangeKind.BYTES or self.archive is not None

    def pieces(self, slot: int) -> list[tuple[int, int, Any]]:
        """This item range's byte ranges as (offset, length, where), in object order: `where` is a
        position in the window buffer (int: the item range's slot starts at `slot`) for bytes read
        into the slot, or a uint8 numpy view of the target for bytes read straight into it.
        One piece for a buffered or direct RAW item range, three for a direct TORCH_SAVE item range
        (head into the slot, the storage region into the target, tail into the slot after the
        head)."""
        if self.target is None:
            return [(self.offset, self.length, slot)]
        dest = self.target.reshape(-1).view(torch.uint8).numpy()
        if self.archive is None:
            return [(self.offset, self.length, dest)]
        head, tail = self.archive.head_len, self.archive.tail_len
        return [
            (self.offset, head, slot),
            (self.offset + head + self.skip, dest.size, dest),
            (self.offset + self.length - tail, tail, slot + head),
        ]

    def where(self) -> tuple[str, int, int]:
        """(path, offset, length), for error messages."""
        return self.path, self.offset, self.length


@dataclass(frozen=True, slots=True, eq=False)
class Window:
    """Consecutive ItemRanges sharing one buffer of `buffer_bytes` bytes.

    `slots[i]` is where `item_ranges[i]`'s buffered bytes (`ItemRange.slot_bytes`) start in that
    buffer (a multiple of ALIGN, except a BYTES item range packed right after the BYTES item range
    before it: `plan.make_windows`), or -1 for an item range that needs no buffer (direct RAW or
    empty).
    """

    item_ranges: tuple[ItemRange, ...]
    slots: tuple[int, ...]
    buffer_bytes: int
