"""The checkpoint's data objects as one load sees them: which ones it names, one listing that
pins their generations, the sizes extents are checked against, and their block checksums.

In: the reader's ObjectStore and location, `.metadata`'s storage_data (a dict, or the index's
lazy view, whose path table answers without making a storage entry) and checksum records.
Out: relative paths, `generations.Pins`, sizes (bytes) and `gcsckpt.io.BlockSums`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping

from gcsckpt.dcp import checksums
from gcsckpt.dcp.indexed_metadata import storage_of
from gcsckpt.dcp.load.generations import Pins, pin_generations
from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.dcp.paths import METADATA_NAME, CheckpointLocation
from gcsckpt.io.objects import ObjectStore


def all_paths(storage_data: Mapping) -> set[str]:
    """Relative paths of every data object the checkpoint names (from the index's path table
    when `.metadata` has one: no storage entry is made)."""
    columns = storage_of(storage_data)
    if columns is not None:
        return columns.relative_paths()
    return {info.relative_path for info in storage_data.values()}


def plan_paths(storage_data: Mapping, items: Iterable) -> set[str]:
    """Relative paths of the data objects `items` (ReadItems) read; items without a storage
    entry are left out (the load names them later)."""
    found = (storage_data.get(item.storage_index) for item in items)
    return {info.relative_path for info in found if info is not None}


def list_pins(
    store: ObjectStore,
    location: CheckpointLocation,
    paths: Iterable[str],
    metadata: tuple[str, int | None],
    errors: LoadErrors,
    stats: LoadStats,
    *,
    check_commit_order: bool,
) -> Pins:
    """Pins for `paths` from one listing of the checkpoint prefix (direct children only).

    Args:
        metadata: (name, generation) of the `.metadata` object the load read.

    A listing that fails is warned about and pins nothing; no paths: no LIST.

    Raises:
        CheckpointReadError: "object changed during load" (`generations.pin_generations`).
    """
    paths = set(paths)
    if not paths:
        return Pins(None, {})
    prefix = location.object_name("")
    try:
        listing = store.list_objects(location.bucket, prefix, delimiter="/")
    except (OSError, ValueError) as e:
        warnings.warn(
            f"rank {errors.rank}: cannot list {location.url()} ({e}); each object is read at "
            "the generation its first read names, and its size is checked by a 1-byte GET",
            stacklevel=4,
        )
        return Pins(None, {})
    stats.list_requests += 1
    name, generation = metadata
    return pin_generations(
        listing, prefix, name, generation, paths, errors, check_commit_order=check_commit_order
    )


def known_sizes(pins: Pins, sums: dict) -> dict[str, int]:
    """Object sizes the extents are checked against: the listing's, and where the object has
    block checksums, no more than the size they cover (a shorter object fails there, naming the
    range; bytes beyond it could not be verified). Relative path -> bytes."""
    sizes = dict(pins.sizes)
    for path, block_sums in sums.items():
        listed = sizes.get(path)
        sizes[path] = block_sums.size if listed is None else min(listed, block_sums.size)
    return sizes


def object_size(store: ObjectStore, location: CheckpointLocation, path: str) -> int | None:
    """The size (bytes) of data object `path` (one metadata GET), None if unknown."""
    try:
        return store.size(location.bucket, location.object_name(path))
    except (OSError, ValueError):
        return None


def block_sums(records: dict, paths: set[str], errors: LoadErrors) -> dict:
    """BlockSums of the objects `paths` (relative) that have checksum `records`.

    Raises:
        CheckpointReadError: a malformed record in `.metadata` (names it).
    """
    if not records:
        return {}
    try:
        return checksums.block_sums(records, paths)
    except ValueError as e:
        raise errors.at(METADATA_NAME, 0, 0, str(e)) from None
