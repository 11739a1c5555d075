"""Rank-side functions of the launcher tests (top level, so the ranks can import them)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist


def rank_sum(rank: int, scale: int) -> tuple[int, int, int, str]:
    """(rank, world size, all-reduced sum of scale * (rank + 1), OMP_NUM_THREADS)."""
    value = torch.tensor([scale * (rank + 1)])
    dist.all_reduce(value)
    return rank, dist.get_world_size(), int(value.item()), os.environ["OMP_NUM_THREADS"]


def fail_on_rank_one(rank: int) -> int:
    """Rank 1 raises a ValueError naming itself; the others return their rank."""
    if rank == 1:
        raise ValueError(f"rank {rank} refuses")
    return rank


def sleep_forever(rank: int) -> None:
    """Never returns (for the wall-clock limit)."""
    while True:
        time.sleep(1)


def put_progress(rank: int, queue) -> int:
    """Puts (rank, "hello") on the launcher's queue."""
    queue.put((rank, "hello"))
    return rank
