"""Runs a top-level function on N gloo CPU ranks, with torch and transformers preloaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcsckpt.testing.gloo_ranks import run_ranks as _run_ranks

_PRELOAD = (
    "torch",
    "torch.distributed.checkpoint",
    "transformers.models.llama.modeling_llama",
    "transformers.models.olmoe.modeling_olmoe",
    "gcsckpt.parallel.app_state",
)


def run_ranks(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    """``fn(rank, *args)`` on ``world_size`` ranks; results by rank (see gloo_ranks.run_ranks)."""
    return _run_ranks(fn, world_size, *args, preload=_PRELOAD)
