"""What the training benchmark's runner asks its ranks to do, and what they answer (picklable).

``TrainJob`` is one round of one arm on one layout: build, train ``steps`` steps with a
checkpoint every ``every``, then (``verify``) load every checkpoint back. An arm whose ranks run
on an interpreter of its own (dataflux) trains with ``verify=False`` and ``VerifyTrainJob``
checks its checkpoints on the runner's interpreter, as the save benchmark does. Both are
``harness.job.Job``s whose entries are in ``loop``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ckptbench.train.saving import arm_parts
from ckptbench.worker.arms import arm_python

TRAIN_SEED = 20240925  # the seeded state training starts from
VERIFY_SEED = 20240926  # the state a checkpoint is loaded into (never the trained values)


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """One round of one arm on one layout.

    Attributes:
      arm: one of ``saving.ARMS``.
      layout: ``ep`` or ``fsdp`` (``model.LAYOUTS``).
      world_size: ranks.
      scale: ``model.SCALES`` key.
      steps / every: optimizer steps; a checkpoint after every ``every``-th.
      bucket / endpoint: where GCS arms save (endpoint: emulator URL, None: real GCS).
      prefix: object prefix of the round's checkpoints (``<prefix>/step-NNNNN``).
      local_root: the folder localfs saves below (``/dev/shm``); None: the job's scratch dir.
      round_index: the round (0-based), for labels and the msc profile.
      verify: load every checkpoint back in this job; False: leave them for a VerifyTrainJob.
      device: ``cpu`` only (gloo).
    """

    entry: ClassVar[str] = "ckptbench.train.loop:run_train"

    arm: str
    layout: str
    world_size: int
    scale: str
    steps: int
    every: int
    bucket: str
    endpoint: str | None
    prefix: str
    local_root: str | None = None
    round_index: int = 0
    verify: bool = True
    device: str = "cpu"

    def __post_init__(self) -> None:
        arm_parts(self.arm)  # ValueError on an unknown arm
        if self.steps < 1 or self.every < 1:
            raise ValueError(f"steps and every must be >= 1, got {self.steps}, {self.every}")

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"train {self.layout} with {self.arm}, round {self.round_index + 1}"

    @property
    def python(self) -> str | None:
        """The interpreter its ranks run on (None: the runner's; see ``arms.arm_python``)."""
        writer, _ = arm_parts(self.arm)
        return None if writer is None else arm_python(writer)

    @property
    def checkpoint_steps(self) -> tuple[int, ...]:
        """The steps after which a checkpoint is taken (none for the control)."""
        if arm_parts(self.arm)[0] is None:
            return ()
        return tuple(range(self.every, self.steps + 1, self.every))


@dataclasses.dataclass(frozen=True)
class VerifyTrainJob:
    """Load back every checkpoint a ``TrainJob(verify=False)`` left, on the runner's interpreter.

    Attributes:
      train: that job.
      sums: per rank, per checkpoint: the state's checksums at the checkpoint's step.
    """

    entry: ClassVar[str] = "ckptbench.train.loop:run_verify_train"
    python: ClassVar[None] = None  # always the runner's interpreter
    device: ClassVar[str] = "cpu"

    train: TrainJob
    sums: tuple[tuple[dict[str, str], ...], ...]

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"verify the checkpoints of {self.train.label}"

    @property
    def world_size(self) -> int:
        """Ranks: the training job's."""
        return self.train.world_size


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One rank's view of one checkpoint (seconds, ``time.perf_counter`` differences).

    Attributes:
      step: the optimizer step it holds.
      call_s: in the save call (``get_state_dict`` and ``dcp.save`` / ``dcp.async_save``).
      wait_s: waiting, before this call, for the previous checkpoint still in flight.
      durable_s: from the call to the save being complete (sync: ``call_s``; async: the
        future done, ``.metadata`` committed on the coordinator).
    """

    step: int
    call_s: float
    wait_s: float
    durable_s: float


@dataclasses.dataclass(frozen=True)
class Verified:
    """One checkpoint loaded back with torch's stock FileSystemReader, on one rank.

    Attributes:
      step: the checkpoint's step.
      mismatch_count: entries whose checksum differs from the state's at that step.
      missing_count: entries on one side only.
      committed_bytes / expected_bytes: tensor bytes the load committed / the state holds.
      mismatched: the first differing keys.
    """

    step: int
    mismatch_count: int
    missing_count: int
    committed_bytes: int
    expected_bytes: int
    mismatched: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every entry matched and every tensor byte was loaded."""
        return (
            self.mismatch_count == 0
            and self.missing_count == 0
            and self.committed_bytes == self.expected_bytes
        )


@dataclasses.dataclass(frozen=True)
class RankTrain:
    """One rank's round.

    Attributes:
      rank: the rank.
      wall_s: the loop's seconds (checksum pauses excluded), the last save's wait included.
      step_s: seconds of each step (forward, backward, AdamW), in order.
      in_flight: per step, whether a checkpoint was in flight when it started.
      checkpoints: one per checkpoint taken.
      state_bytes: tensor bytes of the rank's state dict (``models.state.expected_bytes``).
      cpu_s: CPU seconds (user + system) of the rank process and its children (an async
        checkpoint process) over the loop (``record.resources`` sampling).
      rss_start_bytes / rss_peak_bytes: the tree's RSS when the loop started / highest sampled.
      losses: each step's loss.
      sums: per checkpoint, the state's checksums at its step (kept for a VerifyTrainJob).
      verified: per checkpoint, its load-back (empty until verified).
      error: why the round failed (None: it did not).
    """

    rank: int
    wall_s: float = 0.0
    step_s: tuple[float, ...] = ()
    in_flight: tuple[bool, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = ()
    state_bytes: int = 0
    cpu_s: float = 0.0
    rss_start_bytes: int = 0
    rss_peak_bytes: int = 0
    losses: tuple[float, ...] = ()
    sums: tuple[dict[str, str], ...] = ()
    verified: tuple[Verified, ...] = ()
    error: str | None = None
