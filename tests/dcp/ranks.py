"""Runs a top-level function on N gloo CPU ranks (separate processes) and returns their results."""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# A forkserver that imported torch and the DCP code once starts ranks far faster than "spawn"
# on 2 cores, and does not inherit the pytest process's threads as plain "fork" would.
_PRELOAD = ["torch", "torch.distributed.checkpoint", "gcsckpt.dcp", "states", "scenarios"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, fn: Callable, world: int, port: int, out: str, args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=90),
    )
    try:
        result = fn(rank, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ranks(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    """`fn(rank, *args)` on `world_size` ranks; results in rank order.

    Raises:
        torch.multiprocessing.ProcessRaisedException: a rank raised (carries its traceback).
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    mp.set_forkserver_preload(_PRELOAD)
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            _rank_main,
            args=(fn, world_size, _free_port(), out, args),
            nprocs=world_size,
            join=True,
            start_method="forkserver",
        )
        return [pickle.loads(Path(out, f"rank{r}.pkl").read_bytes()) for r in range(world_size)]
