"""Test helper: a rank of a fake process group (no communication) and test cases (model + dims)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from ckptbench.workloads.parallel.dims import ParallelDims


@contextmanager
def fake_rank(rank: int, world_size: int) -> Iterator[None]:
    """Makes this process rank ``rank`` of a ``world_size`` fake process group for the block."""
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def make_case(model: str, strategy: str, world_size: int, **sizes: int) -> SimpleNamespace:
    """A test case: ``model`` (spec), ``dims`` (its ``ParallelDims``), ``name`` (the strategy),
    ``strategy`` and ``world_size``; settable extra attributes are ignored by
    ``ckptbench.workloads.parallel``.

    Size keywords: ``dp`` (dp_shard), ``dpr``, ``tp``, ``pp``, ``ep`` (others default 1).

    Raises:
      LayoutError: the sizes do not fit the strategy. TypeError: an unknown size keyword.
    """
    fields = {"dp": "dp_shard", "dpr": "dp_replicate", "tp": "tp", "pp": "pp", "ep": "ep"}
    values = {field: sizes.pop(short, 1) for short, field in fields.items()}
    if sizes:
        raise TypeError(f"unknown size keywords {sorted(sizes)}")
    dims = ParallelDims(strategy=strategy, world_size=world_size, **values)
    return SimpleNamespace(
        name=strategy, model=model, strategy=strategy, world_size=world_size, dims=dims
    )
