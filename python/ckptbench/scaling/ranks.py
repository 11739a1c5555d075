"""The ranks axis: ``real.measure_real`` on every rank of 1..R real rank processes, one
``harness`` job per (world size, arm), run through ``harness.launch.SpawnLauncher``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # the job stays free of torch; its rank entry imports what it runs
    from ckptbench.scaling.real import RealPoint


@dataclasses.dataclass(frozen=True)
class RanksJob:
    """Save then verified load of ``items`` entries and ``nbytes`` bytes per rank with ``arm`` on
    ``ranks`` gloo ranks, under ``gs://bucket/prefix`` of the endpoint (a ``harness.job.Job``)."""

    entry: ClassVar[str] = "ckptbench.scaling.ranks:run_rank"
    endpoint: str
    bucket: str
    prefix: str
    arm: str
    ranks: int
    items: int
    nbytes: int
    device: str = "cpu"

    @property
    def label(self) -> str:
        return f"scaling {self.arm} x{self.ranks}"

    @property
    def world_size(self) -> int:
        return self.ranks

    @property
    def python(self) -> str | None:
        return None


_WARM_ITEMS, _WARM_BYTES = 30, 1 << 20


def run_rank(job: RanksJob, report: Callable) -> RealPoint:
    """Rank entry: one small untimed save and load (the fresh process's imports and first-call
    set-up), then this rank's timed save and load (``real.measure_real``)."""
    from ckptbench.scaling.real import measure_real

    del report
    warm = f"{job.prefix}/warm"
    measure_real(job.endpoint, job.bucket, warm, job.arm, _WARM_ITEMS, _WARM_BYTES)
    return measure_real(job.endpoint, job.bucket, job.prefix, job.arm, job.items, job.nbytes)
