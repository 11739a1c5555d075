"""Run a function on N gloo CPU ranks (separate processes) and collect the results, for tests.

Ranks fork from a forkserver that imported ``preload`` once: several times faster than "spawn"
on 2 cores, and unlike plain "fork" it never inherits the calling process's threads. Not
imported by ``gcsckpt.testing`` itself, so importing that package stays torch-free.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gcsckpt.testing.ports import free_port

_RANK_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _rank_main(
    rank: int, fn: Callable, world_size: int, port: int, out: str, timeout_s: float, args: tuple
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        result = fn(rank, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ranks(
    fn: Callable,
    world_size: int,
    *args: Any,
    preload: Sequence[str] = ("torch", "torch.distributed.checkpoint"),
    timeout_s: float = 120.0,
) -> list[Any]:
    """Runs ``fn(rank, *args)`` on ``world_size`` gloo ranks; returns the results by rank.

    Args:
      fn: a function defined at a module's top level (the ranks import it by name).
      world_size: number of rank processes.
      *args: picklable arguments passed to every rank after its rank number.
      preload: modules the forkserver imports once before forking ranks.
      timeout_s: gloo collective timeout, seconds.

    Raises:
      torch.multiprocessing.ProcessRaisedException: a rank raised (carries its traceback).
    """
    saved = {key: os.environ.get(key) for key in _RANK_ENV}
    os.environ.update(_RANK_ENV)
    mp.set_forkserver_preload(list(preload))
    try:
        with tempfile.TemporaryDirectory() as out:
            mp.start_processes(
                _rank_main,
                args=(fn, world_size, free_port(), out, timeout_s, args),
                nprocs=world_size,
                join=True,
                start_method="forkserver",
            )
            return [pickle.loads(Path(out, f"rank{r}.pkl").read_bytes()) for r in range(world_size)]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
