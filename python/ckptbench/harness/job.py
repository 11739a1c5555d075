"""The one job protocol of every rank process the benchmark starts, and its rank side.

A job is a picklable description (no torch) of work that every rank of a world does: a load, a
save, a training round, a cold restart. It names its rank entry as ``"module:function"``
(``Job.entry``), a module-level function ``fn(job, report) -> result`` that runs on each rank
with the process group joined (``report(phase, completed, total)`` sends progress lines to the
launcher, see ``harness.rank_progress``). Naming it keeps the job modules free of torch and of the
modules that run them (no import circle between a job and its rank code).

``run_job`` runs a job's entry on this rank, turns a raised error into a ``RankFailure`` and
gathers every rank's result; ``rank_main`` is what ``LocalRanks`` starts on every rank.
"""

from __future__ import annotations

import dataclasses
import importlib
import traceback
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.rank_progress import rank_reporter

_ERROR_CHARS = 600  # characters of one rank's error kept in messages


class Job(Protocol):
    """What a launcher needs of a job (``harness.launch``).

    Attributes:
      entry: ``"package.module:function"``, the rank entry ``fn(job, report) -> result``.
      label: short description for progress lines and errors.
      world_size: ranks the job runs on.
      device: ``cpu`` (gloo) or ``cuda`` (nccl).
      python: the interpreter its ranks run on (None: the launcher's own).
    """

    entry: ClassVar[str]
    device: str

    @property
    def label(self) -> str: ...

    @property
    def world_size(self) -> int: ...

    @property
    def python(self) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class RankFailure:
    """A rank whose job raised; ``message`` names the rank and the error."""

    rank: int
    message: str


def describe_error(err: BaseException) -> str:
    """One line per failing rank: ``rank R: Type: message`` (DCP's CheckpointException carries
    every rank's exception; its str would be whole tracebacks)."""
    failures = getattr(err, "failures", None)
    if isinstance(err, CheckpointException) and failures:
        parts = []
        for rank, wrapped in sorted(failures.items()):
            exc = wrapped[0] if isinstance(wrapped, tuple) else wrapped
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            parts.append(f"rank {rank}: {text[:_ERROR_CHARS]}")
        return "; ".join(parts)
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return f"rank {dist.get_rank()}: {text[:_ERROR_CHARS]}"


def entry_of(job: Job) -> Callable[[Any, Callable], Any]:
    """The module-level function ``job.entry`` names (imported here).

    Raises:
      ValueError: ``job.entry`` is not ``"module:function"``.
      ImportError / AttributeError: the module or the function does not exist.
    """
    module, sep, name = job.entry.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"{job.label}: entry {job.entry!r} is not 'module:function'")
    return getattr(importlib.import_module(module), name)


def run_job(job: Job, queue: Any = None) -> list[Any]:
    """Runs ``job``'s entry on this rank (process group initialized) and gathers all ranks'
    results.

    Returns:
      One entry per rank, in rank order: what the entry returned, or a RankFailure when that
      rank's entry raised.
    """
    rank = dist.get_rank()
    try:
        mine: Any = entry_of(job)(job, rank_reporter(queue, rank))
    except (Exception, CheckpointException) as err:
        mine = RankFailure(rank, describe_error(err))
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered


def rank_main(rank: int, job: Job, queue: Any) -> list[Any] | None:
    """Entry of one rank that ``LocalRanks`` started (group already joined): runs the job.

    Returns:
      On rank 0 the gathered results (see ``run_job``); None on the other ranks.
    """
    gathered = run_job(job, queue)
    return gathered if rank == 0 else None
