"""How a rank's WriteItems become data objects, and the split kept across saves of one plan.

With plan caching (`gcsckpt.dcp.GCSSavePlanner`) torch hands every later save the same finished
plan object, so the split of its items (torch's size-balanced `_split_by_size_and_type`) is
computed once and reused while the item list and the split options stay the same.
"""

from __future__ import annotations

import math

from torch.distributed.checkpoint.filesystem import _split_by_size_and_type

from gcsckpt.dcp.upload_pipeline import estimate_bytes


def split_items(writer, items: list) -> list[list]:
    """The rank's items split into objects: one per item, or (single_file_per_rank) torch's
    size-balanced split into max(thread_count, tensor bytes / object_bytes) objects."""
    if not writer.single_file_per_rank:
        return [[item] for item in items]
    wanted = math.ceil(estimate_bytes(items) / writer.object_bytes)
    bins = max(1, min(max(writer.thread_count, wanted), len(items)))
    return [g for g in _split_by_size_and_type(bins, items) if g]


# The last split, kept while its item list is the one plan caching hands back every save.
_last_split: list = [None, None, None]  # [items (held, so its id stays its own), key, groups]


def cached_groups(writer, items: list) -> list[list]:
    """`split_items`, computed once per item list and split options (the cached plan's list)."""
    key = (
        id(items),
        len(items),
        writer.single_file_per_rank,
        writer.thread_count,
        writer.object_bytes,
    )
    held, last_key, groups = _last_split
    if held is not items or last_key != key:
        groups = split_items(writer, items)
        _last_split[:] = [items, key, groups]
    return groups
