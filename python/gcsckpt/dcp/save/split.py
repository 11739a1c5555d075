"""A rank's data objects: their names for this save, and the split of its WriteItems into them.

Names: rank i of a save writes `__{i}_{save}_{n}.distcp` (torch's `__{i}_{n}.distcp` with the
save between: 16 hex digits of its save_id), so a save never writes over another save's bytes;
only the `.metadata` a save commits makes its objects a checkpoint (`gcsckpt.dcp.save.commit`).

Split: one object per item, or (single_file_per_rank) torch's size-balanced split
(`_split_by_size_and_type`) into max(thread_count, tensor bytes / object_bytes) objects, so a
rank's save is many uploads in flight. With plan caching (`GCSSavePlanner`) torch hands every
later save the same finished plan object, so the split of its items is computed once and reused
while the item list and the split options stay the same.
"""

from __future__ import annotations

import math
import uuid

from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, _split_by_size_and_type
from torch.distributed.checkpoint.planner import WriteItem, WriteItemType

from gcsckpt.dcp.paths import METADATA_NAME


def object_prefix(rank: int, save_id: str) -> str:
    """`__{rank}_{save}_`: the start of the names of `rank`'s data objects in save `save_id`
    (a UUID string; `save` is the first 16 hex digits of it)."""
    return f"__{rank}_{uuid.UUID(save_id).hex[:16]}_"


def object_names(prefix: str, groups: list[list[WriteItem]]) -> list[tuple[str, list]]:
    """(`{prefix}{n}.distcp`, items) for each group of items, n counting from 0."""
    return [(f"{prefix}{n}{DEFAULT_SUFFIX}", group) for n, group in enumerate(groups)]


def metadata_name(rank: int | None, *, use_collectives: bool) -> str:
    """The metadata object a save of `rank` commits: `.metadata` when ranks coordinate (or
    without a rank), else the rank's own `__{rank}.metadata` (torch's layout)."""
    if use_collectives or rank is None:
        return METADATA_NAME
    return f"__{rank}{METADATA_NAME}"


def estimate_bytes(items: list[WriteItem]) -> int:
    """Tensor bytes this rank writes for `items`: each item's own chunk (`chunk.sizes`), not
    the whole tensor (`tensor_data.size`, what torch's `_item_size` counts, which for a
    DTensor shard is world-size times too large and cut an fsdp rank's 124 MB into 56 objects
    of ~2 MB); BYTE_IO items count 0 (their size is known only once serialized). The size
    estimate of an object before it is written, bytes."""
    total = 0
    for item in items:
        if item.type == WriteItemType.BYTE_IO or item.tensor_data is None:
            continue
        numel = math.prod(item.tensor_data.chunk.sizes)
        total += numel * item.tensor_data.properties.dtype.itemsize
    return total


def split_items(
    items: list[WriteItem], *, single_file_per_rank: bool, thread_count: int, object_bytes: int
) -> list[list[WriteItem]]:
    """The rank's items split into objects (lists of items, none empty): one per item, or
    (single_file_per_rank) torch's size-balanced split into max(thread_count, tensor bytes /
    object_bytes) objects, at most one per item."""
    if not single_file_per_rank:
        return [[item] for item in items]
    wanted = math.ceil(estimate_bytes(items) / object_bytes)
    bins = max(1, min(max(thread_count, wanted), len(items)))
    return [g for g in _split_by_size_and_type(bins, items) if g]


# The last split, kept while its item list is the one plan caching hands back every save.
_last_split: list = [None, None, None]  # [items (held, so its id stays its own), key, groups]


def cached_split(
    items: list[WriteItem], *, single_file_per_rank: bool, thread_count: int, object_bytes: int
) -> list[list[WriteItem]]:
    """`split_items`, computed once per item list and split options (the cached plan's list)."""
    key = (id(items), len(items), single_file_per_rank, thread_count, object_bytes)
    held, last_key, groups = _last_split
    if held is not items or last_key != key:
        groups = split_items(
            items,
            single_file_per_rank=single_file_per_rank,
            thread_count=thread_count,
            object_bytes=object_bytes,
        )
        _last_split[:] = [items, key, groups]
    return groups
