"""What each rank measured in one timed round, the per-rank input of a ``CaseResult`` or
``SaveResult`` (``record.case_result``): a reader's counters (``RankCounters``), a writer's
memory and phases (``RankSave``), and the round's per-rank start/end stamps (``RoundRecord``).

Stamps are Unix-epoch seconds (``time.time()``), durations seconds, counts bytes or items.
Nothing here talks to GCS or torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Counter names a reader may report per rank and per load (GCSStorageReader reports all of them;
# the stock FsspecReader baseline only what the runner can count from the outside).
COUNT_FIELDS = ("read_items", "ranges", "requests", "bytes_needed", "bytes_fetched", "retries")
COUNT_FIELDS += ("bytes_verified",)
SECONDS_FIELDS = ("fetch_s", "deserialize_s", "copy_s")


@dataclasses.dataclass(frozen=True)
class RankCounters:
    """One rank's reader counters for one load; None means the reader could not count it.

    Attributes:
      read_items: DCP ReadItems handled by the rank.
      ranges: byte ranges after coalescing/splitting.
      requests: HTTP requests sent (ranged GETs, metadata GETs, retries included).
      bytes_needed: bytes the rank's ReadItems cover.
      bytes_fetched: bytes received from storage.
      retries: requests repeated after a transient error.
      bytes_verified: bytes read whose block CRC-32C was checked before they were committed.
      fetch_s, deserialize_s, copy_s: seconds spent in each stage (summed over threads).
    """

    read_items: int | None = None
    ranges: int | None = None
    requests: int | None = None
    bytes_needed: int | None = None
    bytes_fetched: int | None = None
    retries: int | None = None
    bytes_verified: int | None = None
    fetch_s: float | None = None
    deserialize_s: float | None = None
    copy_s: float | None = None

    def __post_init__(self) -> None:
        for field in COUNT_FIELDS:
            value = getattr(self, field)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(
                    f"counter {field} must be a non-negative int or None, got {value!r}"
                )
        for field in SECONDS_FIELDS:
            value = getattr(self, field)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"counter {field} must be finite seconds >= 0 or None, got {value!r}"
                )

    @classmethod
    def from_mapping(cls, counters: Mapping[str, Any], rank: int) -> RankCounters:
        """Builds counters from a reader's dict; unknown keys raise ValueError naming the rank."""
        unknown = sorted(set(counters) - set(COUNT_FIELDS) - set(SECONDS_FIELDS))
        if unknown:
            raise ValueError(f"rank {rank}: unknown reader counters {unknown}")
        try:
            return cls(**dict(counters))
        except ValueError as err:
            raise ValueError(f"rank {rank}: {err}") from err

    def as_dict(self) -> dict[str, int | float | None]:
        """The counters as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


MiB = 1 << 20
# The memory target for a save: peak RSS per rank <= 1.1 x its state bytes + 256 MiB.
RSS_BOUND_STATE_FACTOR = 1.1
RSS_BOUND_SLACK_BYTES = 256 * MiB


def rss_bound_bytes(state_bytes: int) -> int:
    """The save-time RSS bound of a rank holding ``state_bytes`` tensor bytes:
    ``1.1 x state_bytes + 256 MiB`` (bytes, rounded down)."""
    return int(RSS_BOUND_STATE_FACTOR * state_bytes) + RSS_BOUND_SLACK_BYTES


@dataclasses.dataclass(frozen=True)
class RankSave:
    """One rank's own view of one timed ``dcp.save``, measured inside its process.

    Memory: the rank process's resident set size (psutil), sampled right before ``dcp.save``
    (the save job first collects garbage and returns the C heap's free pages, so the start is
    memory in use) and every few milliseconds on a daemon thread until it returns. Absolute RSS
    includes torch's own libraries and runtime (docs/measurements.md, "The start RSS of a save")
    and the state being saved, so ``rss_peak_bytes - rss_start_bytes`` is what the save added.

    Phases, as the writer sees them (its methods timed from the outside, the writer unchanged):
    ``plan_s`` is time inside its ``prepare_local_plan`` (and ``prepare_global_plan`` on the
    coordinator); the data phase runs from the ``write_data`` call until its future's value is
    ready (serializing and storing the rank's items); ``finish_s`` is the coordinator's
    ``finish`` (writing ``.metadata``, the commit). The rest of a save's wall time is DCP's own
    work: its planners, pickling plans and metadata, and the collectives between the phases.

    Attributes:
      state_bytes: tensor bytes of the rank's state dict (``models.state.expected_bytes``).
      rss_start_bytes: RSS right before ``dcp.save``, bytes.
      rss_peak_bytes: highest RSS sampled during the save (the start and end samples included).
      rss_sample_count: samples behind ``rss_peak_bytes``.
      plan_s: seconds in the writer's planning methods.
      data_start_unix_s / data_end_unix_s: ``time.time()`` at the ``write_data`` call and when
        its future's value was ready.
      finish_s: seconds in the writer's ``finish``; None on ranks other than the coordinator.

    Raises:
      ValueError: a negative or non-int byte count, a peak below the start RSS, non-finite or
        negative seconds, or a data phase that ends before it starts.
    """

    state_bytes: int
    rss_start_bytes: int
    rss_peak_bytes: int
    rss_sample_count: int
    plan_s: float
    data_start_unix_s: float
    data_end_unix_s: float
    finish_s: float | None = None

    def __post_init__(self) -> None:
        for field in ("state_bytes", "rss_start_bytes", "rss_peak_bytes", "rss_sample_count"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"save measure {field} must be an int >= 0, got {value!r}")
        if self.rss_peak_bytes < self.rss_start_bytes:
            raise ValueError(
                f"peak RSS {self.rss_peak_bytes} is below the start RSS {self.rss_start_bytes}"
            )
        for field in ("plan_s", "data_start_unix_s", "data_end_unix_s", "finish_s"):
            value = getattr(self, field)
            if value is None and field == "finish_s":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"save measure {field} must be seconds, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"save measure {field} must be finite and >= 0, got {value!r}")
        if self.data_end_unix_s < self.data_start_unix_s:
            raise ValueError(
                f"data phase ends ({self.data_end_unix_s}) before it starts "
                f"({self.data_start_unix_s})"
            )

    @property
    def data_s(self) -> float:
        """Seconds of the data phase (``write_data`` until its future's value was ready)."""
        return self.data_end_unix_s - self.data_start_unix_s

    @property
    def rss_increase_bytes(self) -> int:
        """What the save added to the rank's RSS at its peak, bytes."""
        return self.rss_peak_bytes - self.rss_start_bytes

    @property
    def rss_bound_bytes(self) -> int:
        """This rank's bound, ``1.1 x state_bytes + 256 MiB`` (see :func:`rss_bound_bytes`)."""
        return rss_bound_bytes(self.state_bytes)

    def as_dict(self) -> dict[str, int | float | None]:
        """The measures as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RoundRecord:
    """One timed round: per-rank start/end stamps (Unix seconds), optional per-rank counters and,
    for a save, optional per-rank save measures (memory and phases, see RankSave).

    Raises:
      ValueError: lists of different lengths, empty lists, non-finite stamps, or an end before
        its start (the message names the rank).
    """

    rank_start_unix_s: Sequence[float]
    rank_end_unix_s: Sequence[float]
    rank_counters: Sequence[RankCounters] | None = None
    rank_saves: Sequence[RankSave] | None = None

    def __post_init__(self) -> None:
        starts, ends = self.rank_start_unix_s, self.rank_end_unix_s
        if not starts or len(starts) != len(ends):
            raise ValueError(
                f"round needs one start and one end per rank, got {len(starts)} starts and "
                f"{len(ends)} ends"
            )
        if self.rank_counters is not None and len(self.rank_counters) != len(starts):
            raise ValueError(
                f"round has counters for {len(self.rank_counters)} ranks but timings for "
                f"{len(starts)}"
            )
        if self.rank_saves is not None and len(self.rank_saves) != len(starts):
            raise ValueError(
                f"round has save measures for {len(self.rank_saves)} ranks but timings for "
                f"{len(starts)}"
            )
        for rank, (start, end) in enumerate(zip(starts, ends, strict=True)):
            if not (math.isfinite(start) and math.isfinite(end)) or end < start:
                raise ValueError(f"rank {rank}: bad round stamps start={start!r} end={end!r}")

    @property
    def duration_s(self) -> float:
        """Seconds from the first rank's start to the last rank's end."""
        return max(self.rank_end_unix_s) - min(self.rank_start_unix_s)

    @property
    def data_phase_s(self) -> float | None:
        """A save's data phase: the longest rank's (``RankSave.data_s``); None without measures."""
        if self.rank_saves is None:
            return None
        return max(save.data_s for save in self.rank_saves)
