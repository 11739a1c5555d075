"""CheckpointRanges: the load path's one door to the C++ range reader.

In: byte ranges named by relative object path, as (path, offset, length, destination) with a
writable destination buffer of `length` bytes (bytearray, numpy uint8 view, ...). Out: the same
ranges as `gcsckpt.io.RangeRequest`s of the checkpoint's bucket, read at once (`read`) or
submitted for completion-order consumption (`submit`), each asking for its object's pinned
generation (`generations.Pins`), or, for an object the listing did not pin, the generation
the first completed `read` of it named (so a load without a listing still reads one version
of each object once one read of it is done) and carrying its block checksums where the
checkpoint has them (the range reader then checks every block before the range completes);
`LoadStats.ranges` counts them, `bytes_verified` / `bytes_unverified` their bytes. Failures
surface as `gcsckpt.io.RangeReadError` (`ChecksumMismatchError` for a block that does not
match); `load_errors.LoadErrors` maps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.io import RangeReader, RangeRequest, ReadHandle

Range = tuple[str, int, int, Any]  # (relative path, offset, length in bytes, destination)


class CheckpointRanges:
    """Reads byte ranges of the objects below one checkpoint prefix.

    Args:
        reader: the range reader (a `gcsckpt.io.RangeReader`).
        location: the checkpoint; relative paths become object names below its prefix.
        stats: the load's counters (`ranges` grows by every range handed over).
        generations: relative path -> the generation every GET of that object asks for
            (`generations.Pins.objects`); an object not in it is pinned by its first completed
            `read` (before that, per submit only).
        checksums: relative path -> `gcsckpt.io.BlockSums` of the objects that have them.
    """

    def __init__(
        self,
        reader: RangeReader,
        location: CheckpointLocation,
        stats: LoadStats,
        generations: Mapping[str, int] | None = None,
        checksums: Mapping[str, Any] | None = None,
    ):
        self._reader = reader
        self._location = location
        self._stats = stats
        self._generations = dict(generations or {})
        self._checksums = checksums or {}

    def read(self, ranges: Iterable[Range]) -> None:
        """Fills every destination; returns when all are complete.

        Raises:
            RangeReadError: a range failed for good (after the reader's retries).
        """
        handle = self._reader.submit(self._requests(ranges))
        handle.wait()
        prefix = self._object_prefix()
        for (_, name), generation in handle.generations().items():
            if generation and name.startswith(prefix):
                self._generations.setdefault(name[len(prefix) :], generation)

    def submit(self, ranges: Iterable[Range]) -> ReadHandle:
        """Starts reading; the handle reports completed indices (`next_completed`) and can be
        cancelled. Destinations must stay alive and untouched until reported or cancelled."""
        return self._reader.submit(self._requests(ranges))

    def _requests(self, ranges: Iterable[Range]) -> list[RangeRequest]:
        bucket, prefix = self._location.bucket, self._object_prefix()
        pinned, sums = self._generations, self._checksums
        requests = [
            RangeRequest(
                bucket, prefix + path, offset, length, dest, pinned.get(path), sums.get(path)
            )
            for path, offset, length, dest in ranges
        ]
        stats = self._stats
        stats.ranges += len(requests)
        for r in requests:
            if r.checksums is None:
                stats.bytes_unverified += r.length
            else:
                stats.bytes_verified += r.length
        return requests

    def _object_prefix(self) -> str:
        # Same names as CheckpointLocation.object_name, spelled inline: one per ReadItem.
        prefix = self._location.prefix
        return f"{prefix}/" if prefix else ""
