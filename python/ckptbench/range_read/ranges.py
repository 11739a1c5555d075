"""Range sets for the range-read benchmark: which byte ranges of the test object each case reads."""

from __future__ import annotations

import dataclasses
import random
import re

_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """ "4KiB" -> 4096, "64MiB" -> 67108864, "512" -> 512 (binary units only).

    Raises:
        ValueError: text is not <number><unit> with unit B/KiB/MiB/GiB.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]iB|B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"size {text!r} is not like 4KiB, 1MiB or 512")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").upper()]


def size_label(n: int) -> str:
    """4096 -> "4KiB", 67108864 -> "64MiB" (largest exact binary unit)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


@dataclasses.dataclass(frozen=True)
class RangeSet:
    """`len(offsets)` ranges of `range_bytes` each, at distinct aligned slots, sorted by offset.

    Sorted because DCP's planner also reads a rank's items in (object, offset) order.
    """

    range_bytes: int
    offsets: tuple[int, ...]

    @property
    def label(self) -> str:
        return size_label(self.range_bytes)

    @property
    def useful_bytes(self) -> int:
        return self.range_bytes * len(self.offsets)

    @property
    def covers_whole_object_of(self) -> int | None:
        """The object size if the ranges tile [0, size) exactly, else None."""
        expected = tuple(range(0, self.useful_bytes, self.range_bytes))
        return self.useful_bytes if self.offsets == expected else None


def make_range_set(
    object_bytes: int, range_bytes: int, byte_budget: int, max_ranges: int, seed: int = 0
) -> RangeSet:
    """Picks min(max_ranges, budget // range_bytes, slots) distinct aligned slots at random,
    where budget = max(byte_budget, 4 * range_bytes): large ranges always come several at a time.

    A range set whose budget covers the whole object tiles it (offsets 0, r, 2r, ...).

    Raises:
        ValueError: range_bytes is not in [1, object_bytes].
    """
    if not 1 <= range_bytes <= object_bytes:
        raise ValueError(f"range size {range_bytes} must be in [1, {object_bytes}] bytes")
    slots = object_bytes // range_bytes
    budget = max(byte_budget, 4 * range_bytes)
    count = max(1, min(max_ranges, budget // range_bytes, slots))
    chosen = random.Random(seed * 1_000_003 + range_bytes).sample(range(slots), count)
    return RangeSet(range_bytes, tuple(sorted(s * range_bytes for s in chosen)))
