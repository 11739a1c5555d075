"""Runs a top-level function on N gloo CPU ranks, with the DCP test modules preloaded."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gcsckpt.testing.gloo_ranks import run_ranks as _run_ranks

_PRELOAD = ("torch", "torch.distributed.checkpoint", "gcsckpt.dcp", "states", "scenarios")


def run_ranks(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    """`fn(rank, *args)` on `world_size` ranks; results in rank order (see gloo_ranks.run_ranks)."""
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    return _run_ranks(fn, world_size, *args, preload=_PRELOAD, timeout_s=90.0)
