"""Launchers: how the runner gets a job run on every rank of a case's world.

``SpawnLauncher`` (single machine, the default) starts one process per rank with
``torch.multiprocessing.start_processes`` on a free loopback port, relays their progress messages
to the display, enforces a wall-clock limit and returns rank 0's gathered results. Rank
processes come from a forkserver that imported torch, transformers and the worker once: on 2
cores that saves ~2 CPU-seconds per rank and job over plain ``spawn``, and, unlike ``fork``, the
ranks do not inherit the runner's threads (resource sampler, LocalGCS). Each job gets fresh
processes, so setup memory is returned before the timed rounds.

``TorchrunLauncher`` is for processes started by ``torchrun`` (one per rank, any number of
nodes): the group is already formed (``env://``), so every rank calls the job itself.
"""

from __future__ import annotations

import pickle
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

from gcsckpt.bench.worker.rank import RESULT_FILE, run_job, spawned_rank_main
from gcsckpt.testing.ports import free_port

# Imported once by the forkserver, shared copy-on-write by every rank process it forks.
_PRELOAD = [
    "torch",
    "torch.distributed.checkpoint",
    "transformers",
    "transformers.models.olmoe.modeling_olmoe",
    "transformers.models.llama.modeling_llama",
    "gcsckpt.bench.worker.rank",
]
_POLL_S = 0.2
_QUEUE_SIZE = 10_000


class JobError(RuntimeError):
    """A job did not produce results: a rank process died, or the job ran past its time limit."""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


class SpawnLauncher:
    """Runs jobs on ``job.case.world_size`` local rank processes.

    Args:
      timeout_s: wall-clock limit of one job, seconds; also the process group's collective
        timeout, so a hung collective raises inside the ranks first.
      start_method: ``forkserver`` (default) or ``spawn``.
    """

    is_leader = True

    def __init__(self, timeout_s: float = 1800.0, start_method: str = "forkserver") -> None:
        self.timeout_s = timeout_s
        self.start_method = start_method
        self._context = mp.get_context(start_method)
        if start_method == "forkserver":
            self._context.set_forkserver_preload(_PRELOAD)

    def agree(self, value: Any) -> Any:
        """One process decides everything here: the value is already agreed."""
        return value

    def run(self, job: Any, on_progress: Callable[[Any], None] | None = None) -> list[Any]:
        """Runs ``job`` on fresh rank processes; returns rank 0's gathered per-rank results.

        Args:
          job: a ``SetupJob`` or ``LoadJob``.
          on_progress: called with the progress queue between polls (e.g.
            ``ProgressDisplay.drain``); None to ignore progress.

        Raises:
          JobError: a rank process raised or exited (the message names the rank and the
            error's last line), the job exceeded ``timeout_s``, or rank 0 left no results.
        """
        queue = self._context.Queue(_QUEUE_SIZE)
        world = job.case.world_size
        with tempfile.TemporaryDirectory(prefix="gcsckpt-job-") as result_dir:
            args = (job, free_port(), result_dir, queue, self.timeout_s)
            context = mp.start_processes(
                spawned_rank_main,
                args=args,
                nprocs=world,
                join=False,
                start_method=self.start_method,
            )
            deadline = time.monotonic() + self.timeout_s + 60.0  # collectives time out first
            try:
                while not context.join(timeout=_POLL_S):
                    if on_progress is not None:
                        on_progress(queue)
                    if time.monotonic() > deadline:
                        raise JobError(
                            f"{job.label}: no result after {self.timeout_s:.0f} s on {world} ranks"
                        )
            except mp.ProcessRaisedException as err:
                raise JobError(
                    f"{job.label}: rank {err.error_index} failed: {_last_line(str(err))}"
                ) from err
            except mp.ProcessExitedException as err:
                raise JobError(
                    f"{job.label}: rank {err.error_index} exited with code {err.exit_code}"
                ) from err
            finally:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
                        process.join(5)
                if on_progress is not None:
                    on_progress(queue)
                queue.close()
            path = Path(result_dir, RESULT_FILE)
            if not path.exists():
                raise JobError(f"{job.label}: rank 0 exited without writing results")
            return pickle.loads(path.read_bytes())


class TorchrunLauncher:
    """Runs jobs in the current ``torchrun`` rank process (group already initialized).

    Every rank walks the same cases; ``agree`` makes rank 0's decisions everyone's.
    """

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.is_leader = self.rank == 0

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (``broadcast_object_list``)."""
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def run(self, job: Any, on_progress: Callable[[Any], None] | None = None) -> list[Any]:
        """Runs ``job`` in this process; every rank returns all ranks' results.

        Raises:
          JobError: the case's world size differs from torchrun's.
        """
        if job.case.world_size != self.world_size:
            raise JobError(
                f"{job.label}: case needs world_size {job.case.world_size} but torchrun started "
                f"{self.world_size} processes (use --world_size_override={self.world_size})"
            )
        return run_job(job)
