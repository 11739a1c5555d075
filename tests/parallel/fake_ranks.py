"""Test helper: a rank of a fake process group (no communication) and case objects."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore


@contextmanager
def fake_rank(rank: int, world_size: int) -> Iterator[None]:
    """Makes this process rank ``rank`` of a ``world_size`` fake process group for the block."""
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def make_case(model: str, strategy: str, world_size: int, **sizes: int) -> SimpleNamespace:
    """A case-like object with the size fields ``gcsckpt.parallel`` reads (others default 1).

    Size keywords: ``dp`` (dp_shard), ``dpr``, ``tp``, ``pp``, ``ep``. ``name`` is the strategy.
    """
    fields = {
        "dp": "data_parallel_size",
        "dpr": "data_parallel_replicate_size",
        "tp": "tensor_parallel_size",
        "pp": "pipeline_parallel_size",
        "ep": "expert_parallel_size",
    }
    values = {field: sizes.pop(short, 1) for short, field in fields.items()}
    if sizes:
        raise TypeError(f"unknown size keywords {sorted(sizes)}")
    return SimpleNamespace(
        name=strategy, model=model, strategy=strategy, world_size=world_size, **values
    )
