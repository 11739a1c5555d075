"""What the runner asks rank processes to do, and what they answer (picklable, no torch).

A job runs on every rank of one case's world (``harness.job.Job``: its ``entry`` names the rank
function in ``setup_job``, ``load_job`` or ``save_job``). ``SetupJob`` builds the case's state
with the save seed and writes the checkpoint plus per-rank checksums; ``LoadJob`` runs the timed
rounds with one reader and verifies each load; ``SaveJob`` runs timed saves with one writer and
verifies each one by loading it back with the stock reader. Every rank returns one result; rank
results are gathered so each rank (and the runner) sees all of them in rank order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ckptbench.record.rank_rounds import RankSave
from ckptbench.roles import READERS, WRITERS
from ckptbench.worker.arms import arm_python

SAVE_SEED = 20240924  # the seed of the saved state (OLMoE-1B-7B-0924's release date)


def round_seed(round_index: int) -> int:
    """Seed of the fresh state a timed round loads into: never the save seed, new each round."""
    return SAVE_SEED + 1 + round_index


def checksums_object(setup_prefix: str, rank: int) -> str:
    """Object name of a rank's checksum file below the case's setup prefix."""
    return f"{setup_prefix}/rank_{rank:05d}.json"


@dataclasses.dataclass(frozen=True)
class Storage:
    """Where a case's objects live.

    Attributes:
      bucket: GCS bucket name.
      checkpoint_prefix: object prefix of the DCP checkpoint (no trailing slash).
      setup_prefix: object prefix of the per-rank checksum files and the manifest.
      endpoint: emulator URL (``http://127.0.0.1:PORT``) or None for real GCS.
      save_prefix: object prefix below which the save phase writes (one folder per writer and
        round, deleted once verified); empty: ``<checkpoint_prefix>-saves``.
    """

    bucket: str
    checkpoint_prefix: str
    setup_prefix: str
    endpoint: str | None = None
    save_prefix: str = ""

    def save_round_prefix(self, writer: str, round_index: int) -> str:
        """Object prefix of one timed save: ``<save_prefix>/<writer>/round<N>``."""
        base = self.save_prefix or f"{self.checkpoint_prefix}-saves"
        return f"{base}/{writer}/round{round_index + 1}"

    @property
    def checkpoint_url(self) -> str:
        """``gs://bucket/checkpoint_prefix``."""
        return f"gs://{self.bucket}/{self.checkpoint_prefix}"


@dataclasses.dataclass(frozen=True)
class SetupJob:
    """Save the case's state (seed ``SAVE_SEED``) and each rank's checksums.

    Attributes:
      case: the ``ckptbench.cases.Case`` (model already at the run's scale).
      storage: where to write.
      device: ``cpu`` or ``cuda``.
    """

    entry: ClassVar[str] = "ckptbench.worker.setup_job:run_setup"
    python: ClassVar[None] = None  # always the runner's interpreter

    case: Any
    storage: Storage
    device: str = "cpu"

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"setup {self.case.name}"

    @property
    def world_size(self) -> int:
        """Ranks the job runs on: the case's."""
        return self.case.world_size


@dataclasses.dataclass(frozen=True)
class LoadJob:
    """Timed load rounds of the case's checkpoint with one reader.

    Attributes:
      case, storage, device: as in SetupJob.
      reader: one of ``roles.READERS``.
      rounds: timed rounds (>= 1).
      first_round: index of the first of them in the case's rounds (its seed and label), so a
        runner that interleaves arms one round per job still gives every round its own seed.
    """

    entry: ClassVar[str] = "ckptbench.worker.load_job:run_load"

    case: Any
    storage: Storage
    reader: str
    rounds: int
    device: str = "cpu"
    first_round: int = 0

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise ValueError(f"reader {self.reader!r} is unknown; known: {', '.join(READERS)}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"load {self.case.name} with {self.reader}"

    @property
    def world_size(self) -> int:
        """Ranks the job runs on: the case's."""
        return self.case.world_size

    @property
    def python(self) -> str | None:
        """The interpreter its ranks run on (None: the runner's; see ``arms.arm_python``)."""
        return arm_python(self.reader)


@dataclasses.dataclass(frozen=True)
class SaveJob:
    """Timed saves of the case's state with one writer, each verified by a stock load.

    Attributes:
      case, storage, device: as in SetupJob.
      writer: one of ``roles.WRITERS``.
      rounds: timed saves (>= 1); each builds a fresh state with ``round_seed(index)``.
      first_round: as in LoadJob.
      verify: verify each save in this job (stock load); False: leave the save in place for a
        ``VerifySaveJob`` on the main interpreter (for arms that run on a venv of their own).
      local_root: for the ``localfs`` reference writer, the folder its saves go below
        (``arms.local_save_root``: ``/dev/shm`` when it has room); None: the job's scratch dir.
    """

    entry: ClassVar[str] = "ckptbench.worker.save_job:run_save"

    case: Any
    storage: Storage
    writer: str
    rounds: int
    device: str = "cpu"
    first_round: int = 0
    verify: bool = True
    local_root: str | None = None

    def __post_init__(self) -> None:
        if self.writer not in WRITERS:
            raise ValueError(f"writer {self.writer!r} is unknown; known: {', '.join(WRITERS)}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"save {self.case.name} with {self.writer}"

    @property
    def world_size(self) -> int:
        """Ranks the job runs on: the case's."""
        return self.case.world_size

    @property
    def python(self) -> str | None:
        """The interpreter its ranks run on (None: the runner's; see ``arms.arm_python``)."""
        return arm_python(self.writer)


@dataclasses.dataclass(frozen=True)
class VerifySaveJob:
    """Verify round ``first_round`` of ``writer``'s save (left by ``SaveJob(verify=False)``) with a
    stock load, on the main interpreter; then delete it.

    Attributes:
      case, storage, device, writer, first_round: as in the SaveJob.
    """

    entry: ClassVar[str] = "ckptbench.worker.save_job:run_verify_save"
    python: ClassVar[None] = None  # always the runner's interpreter

    case: Any
    storage: Storage
    writer: str
    device: str = "cpu"
    first_round: int = 0

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"verify the save of {self.case.name} by {self.writer}"

    @property
    def world_size(self) -> int:
        """Ranks the job runs on: the case's."""
        return self.case.world_size


def with_verification(saved: list[Any], verified: list[Any]) -> list[Any]:
    """Per rank: the save job's timed round joined with the verify job's checks.

    Args:
      saved: gathered RankSaveResults of a one-round ``SaveJob(verify=False)``.
      verified: gathered results of the matching ``VerifySaveJob`` (RankSaveResult or a
        failure record with ``message``).

    Returns:
      Gathered RankSaveResults as a verifying SaveJob would have returned them; a rank whose
      verification failed carries its error and no round.
    """
    joined: list[Any] = []
    for save, check in zip(saved, verified, strict=True):
        error = getattr(check, "error", None) or getattr(check, "message", None)
        if not isinstance(save, RankSaveResult) or save.error:
            joined.append(save)
        elif error or not isinstance(check, RankSaveResult):
            joined.append(RankSaveResult(save.rank, (), error=error or "verification failed"))
        else:
            timed = save.rounds[0]
            done = dataclasses.replace(
                check.rounds[0],
                start_unix_s=timed.start_unix_s,
                end_unix_s=timed.end_unix_s,
                save=timed.save,
            )
            joined.append(RankSaveResult(save.rank, (done,), written_bytes=check.written_bytes))
    return joined


@dataclasses.dataclass(frozen=True)
class RankSetupResult:
    """One rank's setup: checksum count, tensor bytes it holds, seconds to build and to save."""

    rank: int
    entries: int
    expected_bytes: int
    build_s: float
    save_s: float


@dataclasses.dataclass(frozen=True)
class RankRound:
    """One rank's view of one timed round.

    Attributes:
      start_unix_s / end_unix_s: ``time.time()`` right before and after ``dcp.load`` (a save
        job's: ``dcp.save``).
      counters: the reader's counters (names of ``rank_rounds.COUNT_FIELDS`` /
        ``SECONDS_FIELDS``; None values where the reader cannot count).
      committed_tensor_bytes: tensor bytes the planner saw committed.
      expected_bytes: tensor bytes the rank's state dict holds.
      mismatched: state-dict keys whose checksum differs from the save-time one (first 20).
      mismatch_count: how many keys differ (0 = verified).
      missing: keys present at save time but absent after load, or the reverse (first 20).
      save: for a timed save, the rank's own memory and phase measures (RankSave); None for
        loads.
    """

    start_unix_s: float
    end_unix_s: float
    counters: dict[str, Any]
    committed_tensor_bytes: int
    expected_bytes: int
    mismatched: tuple[str, ...] = ()
    mismatch_count: int = 0
    missing: tuple[str, ...] = ()
    save: RankSave | None = None

    @property
    def verified(self) -> bool:
        """Every checksum matched and exactly the expected tensor bytes were committed."""
        return (
            self.mismatch_count == 0
            and not self.missing
            and self.committed_tensor_bytes == self.expected_bytes
        )


@dataclasses.dataclass(frozen=True)
class RankLoadResult:
    """One rank's timed loads; ``error`` is set when a round raised (rounds holds those before
    it)."""

    rank: int
    rounds: tuple[RankRound, ...]
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class RankSaveResult:
    """One rank's timed saves; ``error`` is set when a save or its verification raised (rounds
    holds those before it).

    Each RankRound times one ``dcp.save``; its checksums and committed bytes are those of
    loading the saved checkpoint back with the stock reader into a fresh state, its ``save``
    the rank's own memory and phase measures. ``written_bytes`` (rank 0 only, one per round)
    are the bytes the save left in storage (every object of the round's folder, ``.metadata``
    included).
    """

    rank: int
    rounds: tuple[RankRound, ...]
    error: str | None = None
    written_bytes: tuple[int, ...] = ()


RANK_RESULTS = (RankLoadResult, RankSaveResult)  # what a load or save job's rank answers
