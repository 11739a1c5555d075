"""The rank entry: join the process group, run one job, gather every rank's result.

The same code serves both launchers: ``spawned_rank_main`` is what the single-machine runner
runs on every rank through ``ckptbench.harness.local_ranks`` (which joins the group over a free
loopback port), and ``init_from_env`` joins a group started by ``torchrun`` (``env://``
rendezvous: RANK, WORLD_SIZE, MASTER_ADDR, ...), after which the runner calls ``run_job`` in
every rank process itself.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.local_ranks import backend_for
from ckptbench.record.progress import rank_reporter
from ckptbench.worker.jobs import LoadJob, SaveJob, SetupJob, VerifySaveJob
from ckptbench.worker.load_job import describe_error, run_load
from ckptbench.worker.save_job import run_save, run_verify_save
from ckptbench.worker.setup_job import run_setup


@dataclasses.dataclass(frozen=True)
class RankFailure:
    """A rank whose job raised; ``message`` names the rank and the error."""

    rank: int
    message: str


def _use_device(device: str, local_rank: int) -> None:
    torch.set_num_threads(1)  # 2 cores here, many ranks: intra-op threads would only contend
    if device == "cuda":
        torch.cuda.set_device(local_rank)


def run_job(job: SetupJob | LoadJob | SaveJob | VerifySaveJob, queue: Any = None) -> list[Any]:
    """Runs ``job`` on this rank (process group initialized) and gathers all ranks' results.

    Returns:
      One entry per rank, in rank order: the job's rank result (RankSetupResult /
      RankLoadResult, also for a SaveJob) or a RankFailure when that rank's job raised.
    """
    rank = dist.get_rank()
    report = rank_reporter(queue, rank)
    try:
        if isinstance(job, SetupJob):
            mine: Any = run_setup(job, report)
        elif isinstance(job, SaveJob):
            mine = run_save(job, report)
        elif isinstance(job, VerifySaveJob):
            mine = run_verify_save(job, report)
        else:
            mine = run_load(job, report)
    except (Exception, CheckpointException) as err:
        mine = RankFailure(rank, describe_error(err))
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered


def spawned_rank_main(rank: int, job: SetupJob | LoadJob | SaveJob, queue: Any) -> list[Any] | None:
    """Entry of one rank that ``SpawnLauncher`` started (group already joined): runs the job.

    Returns:
      On rank 0 the gathered results (see ``run_job``); None on the other ranks.
    """
    gathered = run_job(job, queue)
    return gathered if rank == 0 else None


def init_from_env(device: str, timeout_s: float) -> None:
    """Joins the process group ``torchrun`` describes in the environment (``env://``).

    Raises:
      RuntimeError: the torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are
        missing.
    """
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise RuntimeError(f"not started by torchrun: {', '.join(missing)} unset")
    _use_device(device, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(
            backend_for(device), init_method="env://", timeout=timedelta(seconds=timeout_s)
        )
