"""The cold-restart benchmark's jobs (``harness.job.Job``, picklable, no torch): the save that
leaves a checkpoint, and one restart with one arm. Their entries are in ``rank``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar


@dataclasses.dataclass(frozen=True)
class SaveStateJob:
    """Save the seeded state of ``model`` as ``url`` (``.../step-N``), then take the first step
    on it (``rank.save_rank``).

    Attributes:
      model: model spec, e.g. ``olmoe_1b_7b_0924:scaled``.
      world_size: gloo CPU ranks (FSDP2 over all of them).
      url: ``gs://bucket/prefix/step-N``.
      endpoint: emulator URL, or None for real GCS.
      local_dir: the node-local tier to fill too (``GCSCheckpointer(local_dir=)``), or None.
    """

    entry: ClassVar[str] = "ckptbench.resume.rank:save_rank"
    python: ClassVar[None] = None
    device: ClassVar[str] = "cpu"

    model: str
    world_size: int
    url: str
    endpoint: str | None
    local_dir: str | None = None

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"save {self.model} as {self.url}"


@dataclasses.dataclass(frozen=True)
class RestartJob:
    """One cold restart with arm ``reader`` from the newest complete ``step-N`` under
    ``base_url`` (``rank.restart_rank``).

    Attributes:
      reader: ``gcsckpt``, ``fsspec`` or ``gcsckpt-local`` (needs ``local_dir``).
      model, world_size, endpoint, local_dir: as in SaveStateJob.
      base_url: ``gs://bucket/prefix`` holding the ``step-N`` checkpoints.
    """

    entry: ClassVar[str] = "ckptbench.resume.rank:restart_rank"
    python: ClassVar[None] = None
    device: ClassVar[str] = "cpu"

    reader: str
    model: str
    world_size: int
    base_url: str
    endpoint: str | None
    local_dir: str | None = None

    @property
    def label(self) -> str:
        """Short description for progress lines and errors."""
        return f"restart {self.model} with {self.reader} from {self.base_url}"
