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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ckptbench.record.host import HostFacts
from ckptbench.record.rank_rounds import RoundRecord
from ckptbench.record.resources import ResourceUsage
from ckptbench.workloads.parallel.dims import ParallelDims

if TYPE_CHECKING:
    from ckptbench.cases.catalogue import Case

STATUS_OK = "ok"
STATUS_FAILED = "failed"
SCENARIO_READ = "checkpoint_read"  # a timed dcp.load
SCENARIO_WRITE = "checkpoint_write"  # a timed dcp.save (case id ``save-...``)


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
