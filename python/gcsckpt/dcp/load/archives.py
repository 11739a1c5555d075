"""Direct TORCH_SAVE reads: where a `torch.save` archive's storage bytes lie, without decoding it.

`torch.save` archives of tensors of one dtype and shape are byte-identical outside the storage
bytes except for CRC-32s and the serialization id. So per (dtype, chunk shape, archive length)
of a load, `make_templates` saves a stand-in tensor of that dtype and shape here (no request)
and keeps the parts outside its storage; each item of the group is then read as three ranges,
its head and tail into a small scratch slot and its storage bytes (or the contiguous region of
them the item asks for) straight into the destination tensor. Before commit, `matches` compares
the scratch with the template outside the varying spans (one masked compare); an item that
differs (an archive written by another torch version that happens to have the same length) is
read again on the buffered path. A group whose stand-in has another length gets no template.
Why a stand-in, not a read of one archive per group: no extra round trip or GET per load.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch

from gcsckpt.dcp.load.item_ranges import ItemRange
from gcsckpt.dcp.torch_save_view import plain_storage, varying_spans

# (dtype, chunk sizes, archive length in bytes): archives that share one template.
GroupKey = tuple[torch.dtype, tuple[int, ...], int]

# Largest chunk (bytes) given a stand-in: saving one costs a copy and a CRC of its bytes
# (~1 GB/s), once per group and process; items of larger chunks keep the buffered path.
STAND_IN_MAX_BYTES = 16 << 20


class ArchiveTemplate(NamedTuple):
    """One group's archive outside its storage bytes.

    head_len: bytes from the archive's start to its storage bytes. tail_len: bytes from the
    storage bytes' end to the archive's end. mask: uint8 [head_len + tail_len], 0 on bytes
    that may differ between archives of the group. expected: (head + tail) & mask, as bytes.
    """

    head_len: int
    tail_len: int
    mask: np.ndarray
    expected: bytes


def make_templates(groups: Iterable[GroupKey]) -> dict[GroupKey, ArchiveTemplate]:
    """A template per group whose stand-in archive (`torch.save` of an uninitialised tensor of
    the key's dtype and shape) is as long as the key's archive length and holds one plain
    C-contiguous tensor; other groups (or chunks over STAND_IN_MAX_BYTES) get none, and their
    items stay on the buffered path. Templates are kept for later loads of the process."""
    templates = {}
    for key in groups:
        template = _stand_in(key)
        if template is not None:
            templates[key] = template
    return templates


@functools.lru_cache(maxsize=1024)
def _stand_in(key: GroupKey) -> ArchiveTemplate | None:
    dtype, sizes, length = key
    if math.prod(sizes) * dtype.itemsize > STAND_IN_MAX_BYTES:
        return None
    stream = io.BytesIO()
    torch.save(torch.empty(sizes, dtype=dtype), stream)
    if stream.tell() != length:
        return None
    return _template(np.frombuffer(stream.getbuffer(), dtype=np.uint8), key)


def matches(template: ArchiveTemplate, scratch: np.ndarray | torch.Tensor) -> bool:
    """True when `scratch` (uint8 [head_len + tail_len], numpy or CPU tensor: an item's head,
    then its tail) equals the template outside the varying spans, so its storage bytes lie
    where the template says and hold the dtype and shape it names."""
    if isinstance(scratch, torch.Tensor):
        scratch = scratch.numpy()
    return (scratch & template.mask).tobytes() == template.expected


def buffered(item_range: ItemRange) -> ItemRange:
    """`item_range` (a direct TORCH_SAVE ItemRange) as the buffered ItemRange of its whole
    archive."""
    return item_range._replace(dtype=None, shape=(), target=None, archive=None, skip=0)


def _template(full: np.ndarray, key: GroupKey) -> ArchiveTemplate | None:
    dtype, sizes, length = key
    try:
        (start, end), rebuilt = plain_storage(full)
        spans = varying_spans(full)
    except Exception:  # noqa: BLE001 - an archive the fast path cannot read: stay buffered
        return None
    storage_dtype, _, numel = rebuilt.storage
    if (
        storage_dtype != dtype
        or rebuilt.size != sizes
        or rebuilt.stride != _contiguous_strides(sizes)
        or rebuilt.storage_offset != 0
        or numel != math.prod(sizes)
    ):
        return None
    mask = np.full(start + length - end, 0xFF, dtype=np.uint8)  # head, then tail
    for a, b in spans:
        if b <= start:
            mask[a:b] = 0
        elif a >= end:
            mask[a - end + start : b - end + start] = 0
    outside = np.concatenate([full[:start], full[end:]])
    mask.flags.writeable = False  # shared by every load of the process
    return ArchiveTemplate(start, length - end, mask, (outside & mask).tobytes())


def _contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
