"""Every byte range a load fetches lies inside its object, checked before any buffer exists.

In: a rank's ItemRanges (from `plan.plan_item_ranges`), the object sizes the listing showed
(`generations.Pins.sizes`), a `ranges.CheckpointRanges` and a way to ask one object's size.
Out: nothing, or a CheckpointReadError naming rank, object, the item range's offset and length and
the object's size, before `pipeline` allocates a window buffer sized by `.metadata`.

Why: `.metadata` says how long each item is; a crafted or damaged one (a length of 2^40) would
otherwise make the load allocate that much before a GET could fail. Objects the listing sized
are checked without a request. An object without a listed size (no listing) gets one 1-byte
GET at the furthest byte the rank needs, in one batch for all such objects: it proves the
object that long and pins its generation for the data GETs (`ranges`); only when it fails is
the object's size asked for, to name it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gcsckpt.dcp.load.item_ranges import ItemRange
from gcsckpt.dcp.load.load_errors import CheckpointReadError, LoadErrors
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.io import RangeReadError

# What the range reader reports for a GET at or past an object's end.
_PAST_END_CAUSES = frozenset({"beyond_end", "http_416"})


def check_extents(
    item_ranges: Sequence[ItemRange],
    sizes: Mapping[str, int],
    ranges: CheckpointRanges,
    errors: LoadErrors,
    size_of: Callable[[str], int | None],
) -> None:
    """Fails unless every item range's [offset, offset + length) lies inside its object.

    Args:
        sizes: relative path -> object size (bytes), as listed; objects not in it are probed.
        size_of: relative path -> the object's size (bytes) or None, asked only to name the
            size of an object a probe found too short.

    Raises:
        CheckpointReadError: an item range reaches past its object's end (one failure per object,
            for its furthest item range). RangeReadError: a probe failed otherwise (e.g. 404).
    """
    furthest: dict[str, ItemRange] = {}
    for item_range in item_ranges:
        if item_range.length and (
            (seen := furthest.get(item_range.path)) is None
            or item_range.offset + item_range.length > seen.offset + seen.length
        ):
            furthest[item_range.path] = item_range
    failures = [
        _past_end(errors, item_range, sizes[path])
        for path, item_range in furthest.items()
        if path in sizes and item_range.offset + item_range.length > sizes[path]
    ]
    if failures:
        raise _error(errors, failures)
    unsized = [item_range for path, item_range in furthest.items() if path not in sizes]
    if not unsized:
        return
    probes = [(f.path, f.offset + f.length - 1, 1, bytearray(1)) for f in unsized]
    try:
        ranges.read(probes)
    except RangeReadError as e:
        short = {f.get("object") for f in e.failures if f.get("cause") in _PAST_END_CAUSES}
        failures = [
            _past_end(errors, item_range, size_of(item_range.path))
            for item_range in unsized
            if errors.location.object_name(item_range.path) in short
        ]
        if failures:
            raise _error(errors, failures) from e
        raise


def _past_end(errors: LoadErrors, item_range: ItemRange, size: int | None) -> dict:
    """The failure of `item_range`, which ends past its object's `size` (bytes; None: unknown)."""
    end = item_range.offset + item_range.length
    known = f"size {size} bytes" if size is not None else "size unknown"
    cause = (
        f"FQN {item_range.item.storage_index.fqn!r}: offset {item_range.offset}"
        f" + length {item_range.length} = {end} reaches past the end of the object ({known})"
    )
    return errors.at(item_range.path, item_range.offset, item_range.length, cause).failures[0]


def _error(errors: LoadErrors, failures: list[dict]) -> CheckpointReadError:
    return CheckpointReadError(errors.rank, failures)
