"""What the runner measured for one (case, arm) pair, the input of ``metrics.case_row``: a
``CaseResult`` for a reader's timed loads, a ``SaveResult`` for a writer's timed saves.

All times are seconds; round start/end stamps are Unix-epoch seconds (``time.time()``) taken by
each rank right before and right after its ``dcp.load`` (a save's: ``dcp.save``), so the round
duration is the last rank's end minus the first rank's start. Byte counts are bytes. Nothing here
talks to GCS or torch.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ckptbench.record.host import HostFacts
from ckptbench.record.resources import ResourceUsage
from ckptbench.workloads.parallel.dims import ParallelDims

if TYPE_CHECKING:
    from ckptbench.cases.catalogue import Case

STATUS_OK = "ok"
STATUS_FAILED = "failed"
SCENARIO_READ = "checkpoint_read"  # a timed dcp.load
SCENARIO_WRITE = "checkpoint_write"  # a timed dcp.save (case id ``save-...``)

# Counter names a reader may report per rank and per load (GCSStorageReader reports all of them;
# the stock FsspecReader baseline only what the runner can count from the outside).
COUNT_FIELDS = ("read_items", "ranges", "requests", "bytes_needed", "bytes_fetched", "retries")
COUNT_FIELDS += ("bytes_verified",)
SECONDS_FIELDS = ("fetch_s", "deserialize_s", "copy_s")


@dataclasses.dataclass(frozen=True)
class CaseInfo:
    """The case's identity and layout, as its result rows record them.

    Attributes:
      name: case name, e.g. ``load-olmoe_1b_7b_0924-ep-dp8ep8-ws8``.
      model_id: model name or config source, e.g. ``olmoe_1b_7b_0924``.
      dims: the layout (strategy, world size, mesh sizes), already checked by ``ParallelDims``;
        ``dims.dp_replicate`` is also the number of times the checkpoint is read per round
        (every replica group reads all of it).
      sweep_axis: catalogue axis that produced the case (``baseline``, ``strategy``, ``model``).
      model_scale: ``full``, ``scaled`` or ``tiny``; None when not applicable.
      saved_layout: for a resharded load, the layout the checkpoint was saved under, as the
        name spells it (``fsdp-ws8``, ``ep-dp8ep8-ws8``); None: saved under ``dims``.

    Raises:
      ValueError: empty name. TypeError: ``dims`` is not a ``ParallelDims``.
    """

    name: str
    model_id: str
    dims: ParallelDims
    sweep_axis: str | None = None
    model_scale: str | None = None
    saved_layout: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("CaseInfo.name must be a non-empty case name")
        if not isinstance(self.dims, ParallelDims):
            raise TypeError(f"case {self.name!r}: dims must be a ParallelDims, got {self.dims!r}")

    @classmethod
    def from_case(cls, case: Case, model_scale: str | None = None) -> CaseInfo:
        """The record of catalogue case ``case``; ``model_scale`` is the run's ``--model_scale``,
        recorded because the case name does not change with it.

        Raises:
          LayoutError: the case's sizes do not fit its strategy (``Case.parallel_dims``).
        """
        return cls(
            name=case.name,
            model_id=case.model_slug,
            dims=case.parallel_dims,
            sweep_axis=case.axis,
            model_scale=model_scale,
            saved_layout=case.saved_layout,
        )


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


def _check_outcome(
    where: str,
    case: CaseInfo,
    status: str,
    error_message: str | None,
    rounds: Sequence[RoundRecord],
    size: int | None,
) -> None:
    """The checks a load and a save result share (``where`` names the case and arm).

    Raises:
      ValueError: a status other than ok/failed, a failed result without a message or an ok one
        with a message or without rounds, a round of another world size, or a size that is not
        an int >= 0.
    """
    if status not in (STATUS_OK, STATUS_FAILED):
        raise ValueError(f"{where}: status must be 'ok' or 'failed', got {status!r}")
    if status == STATUS_FAILED and not error_message:
        raise ValueError(f"{where}: a failed result needs an error_message")
    if status == STATUS_OK and error_message:
        raise ValueError(f"{where}: an ok result cannot carry error {error_message!r}")
    if status == STATUS_OK and not rounds:
        raise ValueError(f"{where}: an ok result needs at least one round")
    for index, record in enumerate(rounds):
        if len(record.rank_start_unix_s) != case.dims.world_size:
            raise ValueError(
                f"{where}: round {index} has {len(record.rank_start_unix_s)} ranks, "
                f"world_size is {case.dims.world_size}"
            )
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ValueError(f"{where}: checkpoint_physical_size_bytes must be an int >= 0")


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """Everything measured for one load case (``load-...``) under one reader: its rounds time
    ``dcp.load``. A save's results are a ``SaveResult``.

    Attributes:
      case: the case.
      reader: reader name (``gcsckpt``, ``fsspec``, ...); becomes ``workload_implementation``.
      rounds: the completed timed rounds, in order.
      status: ``ok`` or ``failed``.
      error_message: why the case failed (required when failed, None when ok).
      checksums_verified: every loaded tensor matched its save-time checksum.
      checkpoint_physical_size_bytes: stored bytes of the checkpoint's objects (.distcp and
        .metadata).
      checkpoint_object_count: number of those objects.
      reader_options: the reader's settings (JSON-serializable values); ``reader_options_json``.
      resources: process-tree CPU/memory/network during the timed rounds.

    Raises:
      ValueError: an empty reader name, or a check of ``_check_outcome`` failed.
    """

    case: CaseInfo
    reader: str
    rounds: Sequence[RoundRecord] = ()
    status: str = STATUS_OK
    error_message: str | None = None
    checksums_verified: bool = False
    checkpoint_physical_size_bytes: int | None = None
    checkpoint_object_count: int | None = None
    reader_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    resources: ResourceUsage | None = None

    scenario: ClassVar[str] = SCENARIO_READ

    def __post_init__(self) -> None:
        if not self.reader:
            raise ValueError(f"case {self.case.name!r}: reader name is empty")
        where = f"case {self.case.name!r} reader {self.reader!r}"
        _check_outcome(
            where,
            self.case,
            self.status,
            self.error_message,
            self.rounds,
            self.checkpoint_physical_size_bytes,
        )

    @property
    def implementation(self) -> str:
        """The arm's name (``workload_implementation``): the reader."""
        return self.reader


@dataclasses.dataclass(frozen=True)
class SaveResult:
    """Everything measured for one save case (``save-...``) under one writer: its rounds time
    ``dcp.save``, each save verified by loading it back with the stock reader.

    Attributes:
      case: the case (named ``save-...``).
      writer: writer name (``gcsckpt``, ``msc``, ``localfs`` ...); becomes
        ``workload_implementation``.
      rounds: the completed timed saves, in order (``RoundRecord.rank_saves``: each rank's
        memory and phase measures).
      status: ``ok`` or ``failed``.
      error_message: why the case failed (required when failed, None when ok).
      checksums_verified: every save loaded back with the checksums of the state it saved.
      checkpoint_physical_size_bytes: bytes one save left in storage (every object of its
        folder, ``.metadata`` included); None when unknown.
      writer_options: the writer's settings (JSON-serializable values); ``writer_options_json``.
      resources: process-tree CPU/memory/network during the timed saves.

    Raises:
      ValueError: an empty writer name, or a check of ``_check_outcome`` failed.
    """

    case: CaseInfo
    writer: str
    rounds: Sequence[RoundRecord] = ()
    status: str = STATUS_OK
    error_message: str | None = None
    checksums_verified: bool = False
    checkpoint_physical_size_bytes: int | None = None
    writer_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    resources: ResourceUsage | None = None

    scenario: ClassVar[str] = SCENARIO_WRITE

    def __post_init__(self) -> None:
        if not self.writer:
            raise ValueError(f"case {self.case.name!r}: writer name is empty")
        where = f"case {self.case.name!r} writer {self.writer!r}"
        _check_outcome(
            where,
            self.case,
            self.status,
            self.error_message,
            self.rounds,
            self.checkpoint_physical_size_bytes,
        )

    @property
    def implementation(self) -> str:
        """The arm's name (``workload_implementation``): the writer."""
        return self.writer


# What the load and save benchmark measures for one (case, arm) pair.
ArmOutcome = CaseResult | SaveResult


@dataclasses.dataclass(frozen=True)
class RunContext:
    """Facts shared by every row of one benchmark invocation.

    Attributes:
      run_id: unique id of the invocation (e.g. its timestamped output folder name).
      started_at: when the invocation started; must be timezone-aware.
      host: host facts (``host.collect_host_facts()``).
      storage_endpoint: ``local`` (embedded emulator + nginx) or ``gcs``.
      gcs_bucket_name: bucket holding the checkpoints.
      distributed_backend: ``gloo`` or ``nccl``.
      compute_accelerator_type: ``cpu`` or ``gpu``.
      endpoint_modelled_latency_ms: first-byte latency added by the modelled remote endpoint.
      endpoint_modelled_stream_mbps: per-stream bandwidth cap of the modelled endpoint, MB/s.

    Raises:
      ValueError: empty run_id or a naive ``started_at``.
    """

    run_id: str
    started_at: datetime.datetime
    host: HostFacts
    storage_endpoint: str = "local"
    gcs_bucket_name: str | None = None
    distributed_backend: str | None = None
    compute_accelerator_type: str | None = None
    endpoint_modelled_latency_ms: float | None = None
    endpoint_modelled_stream_mbps: float | None = None

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("RunContext.run_id must be non-empty")
        if self.started_at.tzinfo is None:
            raise ValueError("RunContext.started_at must be timezone-aware (use UTC)")
