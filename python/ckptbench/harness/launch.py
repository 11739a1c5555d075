"""Launchers: how a benchmark gets a job (``harness.job.Job``) run on every rank of its world.

``SpawnLauncher`` (single machine, the default) runs each job on fresh local rank processes
through ``harness.local_ranks`` (the launcher the tests use too: forkserver with torch,
transformers, google-cloud-storage and the worker preloaded, model building warmed up once by
``worker.warm_up``; a free loopback port), relays the ranks' progress messages to the display,
enforces a wall-clock limit and returns rank 0's gathered results.
Fresh processes per job return setup memory before the timed rounds. A job whose arm runs on
another interpreter (``job.python``, e.g. the dataflux arm's venv) gets its ranks started with
"spawn" on that interpreter (no preload there: each rank imports what it needs).

``TorchrunLauncher`` is for processes started by ``torchrun`` (one per rank, any number of
nodes): the group is already formed (``env://``), so every rank calls the job itself.

The load and save benchmark, the training benchmark and the cold restarts all run their jobs
through ``SpawnLauncher`` (the restarts with ``start_method="spawn"``: every rank a new
interpreter, as after a job's restart).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ckptbench.harness.job import Job, rank_main, run_job
from ckptbench.harness.local_ranks import LocalRanks, RankError, backend_for

# Imported once by the forkserver, shared copy-on-write by every rank process it forks: what
# every job's ranks import or set up anyway (google-cloud-storage for the checksums object,
# torch._dynamo through the model build), not what only some arms use (gcsfs, msc: a rank's
# RSS, which the rows record, holds only what its arm loaded). None starts a thread on import
# (the forkserver must fork without).
_PRELOAD = [
    "torch",
    "torch.distributed.checkpoint",
    "transformers",
    "transformers.models.olmoe.modeling_olmoe",
    "transformers.models.llama.modeling_llama",
    "google.cloud.storage",
    "ckptbench.harness.job",
    "ckptbench.worker.warm_up",
]
_QUEUE_SIZE = 10_000
_GRACE_S = 60.0  # past the collective timeout: a hung collective raises inside the ranks first


class JobError(RuntimeError):
    """A job did not produce results: a rank process died, or the job ran past its time limit."""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


class SpawnLauncher:
    """Runs jobs on ``job.world_size`` local rank processes.

    Args:
      timeout_s: wall-clock limit of one job, seconds; also the process group's collective
        timeout, so a hung collective raises inside the ranks first.
      start_method: ``forkserver`` (default) or ``spawn``.
    """

    is_leader = True
    ranks_are_children = True  # the runner itself does none of a job's work

    def __init__(self, timeout_s: float = 1800.0, start_method: str = "forkserver") -> None:
        self.timeout_s = timeout_s
        self.start_method = start_method
        preload = _PRELOAD if start_method == "forkserver" else ()
        self._ranks = LocalRanks(preload, start_method=start_method, timeout_s=timeout_s)
        self._foreign: dict[str, LocalRanks] = {}

    def _ranks_for(self, job: Job) -> LocalRanks:
        executable = job.python
        if executable is None:
            return self._ranks
        if executable not in self._foreign:
            self._foreign[executable] = LocalRanks(timeout_s=self.timeout_s, executable=executable)
        return self._foreign[executable]

    def agree(self, value: Any) -> Any:
        """One process decides everything here: the value is already agreed."""
        return value

    def run(self, job: Job, on_progress: Callable[[Any], None] | None = None) -> list[Any]:
        """Runs ``job`` on fresh rank processes; returns rank 0's gathered per-rank results
        (``harness.job.run_job``: one per rank, a RankFailure where the rank's entry raised).

        Args:
          job: any ``harness.job.Job``.
          on_progress: called with the progress queue between polls (e.g.
            ``ProgressDisplay.drain``); None to ignore progress.

        Raises:
          JobError: a rank process raised or exited (the message names the rank and the
            error's last line), the job exceeded ``timeout_s``, or rank 0 left no results.
          FileNotFoundError: the job's arm interpreter is missing.
        """
        ranks = self._ranks_for(job)
        queue = ranks.queue(_QUEUE_SIZE)
        world = job.world_size
        poll = None if on_progress is None else (lambda: on_progress(queue))
        try:
            per_rank = ranks.run(
                rank_main,
                world,
                job,
                queue,
                device=job.device,
                on_poll=poll,
                wall_limit_s=self.timeout_s + _GRACE_S,
            )
        except RankError as err:
            if err.rank is None:
                raise JobError(
                    f"{job.label}: no result after {self.timeout_s:.0f} s on {world} ranks"
                ) from err
            if err.traceback is not None:  # its last line says what was raised
                raise JobError(
                    f"{job.label}: rank {err.rank} failed: {_last_line(err.traceback)}"
                ) from err
            raise JobError(f"{job.label}: {err}") from err
        finally:
            queue.close()
        return per_rank[0]


class TorchrunLauncher:
    """Runs jobs in the current ``torchrun`` rank process (group already initialized).

    Every rank walks the same cases; ``agree`` makes rank 0's decisions everyone's.
    """

    ranks_are_children = False  # this process is a rank

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.is_leader = self.rank == 0

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (``broadcast_object_list``)."""
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def run(self, job: Job, on_progress: Callable[[Any], None] | None = None) -> list[Any]:
        """Runs ``job`` in this process; every rank returns all ranks' results.

        Raises:
          JobError: the job's world size differs from torchrun's.
        """
        if job.world_size != self.world_size:
            raise JobError(
                f"{job.label}: case needs world_size {job.world_size} but torchrun started "
                f"{self.world_size} processes (use --world_size_override={self.world_size})"
            )
        return run_job(job)


def init_from_env(device: str, timeout_s: float) -> None:
    """Joins the process group ``torchrun`` describes in the environment (``env://``), for a
    ``TorchrunLauncher``.

    Raises:
      RuntimeError: the torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are
        missing.
    """
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise RuntimeError(f"not started by torchrun: {', '.join(missing)} unset")
    torch.set_num_threads(1)  # 2 cores here, many ranks: intra-op threads would only contend
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(
            backend_for(device), init_method="env://", timeout=timedelta(seconds=timeout_s)
        )
