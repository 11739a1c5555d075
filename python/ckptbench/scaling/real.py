"""Saves and verified loads on this machine: one rank's state of ``items`` entries and ``nbytes``
tensor bytes, gcsckpt (GCSStorageWriter / GCSStorageReader, verify on, GCSLoadPlanner) and stock
(torch's FsspecWriter / FsspecReader over gcsfs, ``worker.baseline``) against one LocalGCS.

The state has the optimizer's shape: per parameter one small float32 tensor and one dict
``{"step": k, "lr": 1e-3}`` (two BYTE_IO items), so ``items`` = 3 x parameters. Works without a
process group (``no_dist``) and on every rank of one (each rank saves its own keys ``r<rank>.``).
Every load goes into a state seeded otherwise and is compared value for value with the saved one.
"""

from __future__ import annotations

import dataclasses
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from ckptbench.scaling.simulated import GCSCKPT, STOCK
from ckptbench.worker.baseline import make_fsspec_reader, make_fsspec_writer
from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.testing.clients import storage_client

ARMS = (GCSCKPT, STOCK)


@dataclasses.dataclass(frozen=True)
class RealPoint:
    """One arm's save and load of one state on one rank.

    Attributes:
      arm: ``gcsckpt`` or ``stock``.
      items: storage items of the rank (tensors + BYTE_IO values).
      nbytes: tensor bytes of the rank.
      ranks: world size.
      save_cpu_s / load_cpu_s: process CPU seconds (all threads) of ``dcp.save`` / ``dcp.load``.
      save_s / load_s: wall seconds.
      metadata_bytes: size of the ``.metadata`` object.
    """

    arm: str
    items: int
    nbytes: int
    ranks: int
    save_cpu_s: float
    load_cpu_s: float
    save_s: float
    load_s: float
    metadata_bytes: int


def build_state(items: int, nbytes: int, prefix: str = "", seed: int = 0) -> dict:
    """``items // 3`` parameters (at least 1): float32 tensors of ``nbytes`` together (at least
    one element each) and ``{"step", "lr"}`` dicts under ``groups``; values from ``seed``.

    Raises:
      ValueError: ``items`` < 3.
    """
    if items < 3:
        raise ValueError(f"items must be >= 3 (a tensor and two BYTE_IO values), got {items}")
    params = items // 3
    numel = max(1, nbytes // 4 // params)
    generator = torch.Generator().manual_seed(seed)
    tensors = {f"{prefix}p{k}": torch.rand(numel, generator=generator) for k in range(params)}
    groups = {f"{prefix}p{k}": {"step": k + seed, "lr": 1e-3 * (1 + seed)} for k in range(params)}
    return {"params": tensors, "groups": groups}


def assert_same(loaded: dict, saved: dict, where: str) -> None:
    """Raises AssertionError naming ``where`` and the key of the first value that differs."""
    for name, tensor in saved["params"].items():
        if not torch.equal(loaded["params"][name], tensor):
            raise AssertionError(f"{where}: tensor {name} differs from the saved one")
    if loaded["groups"] != saved["groups"]:
        raise AssertionError(f"{where}: param group values differ from the saved ones")


def _metadata_bytes(endpoint: str, bucket: str, prefix: str) -> int:
    blob = storage_client(endpoint).bucket(bucket).get_blob(f"{prefix}/.metadata")
    return blob.size


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def measure_real(
    endpoint: str, bucket: str, prefix: str, arm: str, items: int, nbytes: int
) -> RealPoint:
    """Saves then loads (verified) one state with ``arm`` under ``gs://bucket/prefix``.

    Args:
      endpoint: the LocalGCS endpoint URL (``http://127.0.0.1:PORT``).
      items, nbytes: the rank's state (``build_state``).

    Raises:
      AssertionError: a loaded value differs from the saved one.
      ValueError: unknown ``arm``.
    """
    distributed = dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    url = f"gs://{bucket}/{prefix}"
    saved = build_state(items, nbytes, prefix=f"r{rank}.", seed=1)
    target = build_state(items, nbytes, prefix=f"r{rank}.", seed=2)
    if arm == GCSCKPT:
        writer = GCSStorageWriter(url, endpoint=endpoint)
        reader, planner = GCSStorageReader(url, endpoint=endpoint), GCSLoadPlanner()
    elif arm == STOCK:
        writer, reader, planner = make_fsspec_writer(url, endpoint), None, None
    else:
        raise ValueError(f"unknown arm {arm!r} (one of {ARMS})")
    no_dist = not distributed
    save_cpu, save_s = _timed(lambda: dcp.save(saved, storage_writer=writer, no_dist=no_dist))
    if reader is None:
        reader = make_fsspec_reader(url, endpoint)
    load_cpu, load_s = _timed(
        lambda: dcp.load(target, storage_reader=reader, planner=planner, no_dist=no_dist)
    )
    assert_same(target, saved, f"{arm} load of {url} on rank {rank}")
    size = _metadata_bytes(endpoint, bucket, prefix)
    return RealPoint(arm, 3 * (items // 3), nbytes, world, save_cpu, load_cpu, save_s, load_s, size)
