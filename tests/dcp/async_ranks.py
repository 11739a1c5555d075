"""Rank-side steps of test_async_save.py: FSDP2 training on gloo ranks around dcp.async_save.

Each save gets its own gloo process group: the upload thread's collectives (plan gather,
barrier) must not interleave with the training loop's FSDP collectives on the default group, nor
with another save's. GatedWriter holds an upload at a known point, so "training continues while
the upload runs" and "the future is not done before .metadata is committed" are observed
deterministically, not by timing.
"""

from __future__ import annotations

import fnmatch
import threading
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore, RetryPolicy
from gcsckpt.testing import json_api

BUCKET = "async"
WAIT_S = 120.0  # how long a gate may stay closed before the step fails (a hang guard, not a timing)


class GatedWriter(GCSStorageWriter):
    """GCSStorageWriter whose data upload waits for `data_gate` and whose `.metadata` upload (the
    coordinator's finish) first sets `in_finish`, then waits for `finish_gate`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.data_gate = threading.Event()
        self.finish_gate = threading.Event()
        self.in_finish = threading.Event()

    def write_data(self, plan, planner):
        if not self.data_gate.wait(WAIT_S):
            raise TimeoutError("data_gate was never opened")
        return super().write_data(plan, planner)

    def finish(self, metadata, results) -> None:
        self.in_finish.set()
        if not self.finish_gate.wait(WAIT_S):
            raise TimeoutError("finish_gate was never opened")
        super().finish(metadata, results)


class Trainer:
    """A 2-layer MLP under FSDP2 (Shard(0) over all ranks) with AdamW and fixed batches."""

    def __init__(self, seed: int = 0) -> None:
        self.mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        for layer in self.model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=self.mesh)
        fully_shard(self.model, mesh=self.mesh)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.steps = 0

    def step(self) -> float:
        gen = torch.Generator().manual_seed(1000 + self.steps)
        x, y = torch.randn(8, 32, generator=gen), torch.randn(8, 4, generator=gen)
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optim.step()
        self.optim.zero_grad()
        self.steps += 1
        return loss.item()

    def state(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optim)
        return {"model": model_sd, "optim": optim_sd}


def local_values(state: Any) -> Any:
    """A detached copy of every tensor (DTensors: this rank's shard), same nesting."""
    if isinstance(state, dict):
        return {k: local_values(v) for k, v in state.items()}
    if isinstance(state, list):
        return [local_values(v) for v in state]
    if isinstance(state, DTensor):
        return state.to_local().detach().clone()
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    return state


def mismatches(got: Any, want: Any, path: str = "") -> list[str]:
    """Paths whose values differ (exact tensor equality)."""
    if isinstance(want, dict):
        return [m for k in want for m in mismatches(got.get(k), want[k], f"{path}/{k}")]
    if isinstance(want, list):
        return [m for i, w in enumerate(want) for m in mismatches(got[i], w, f"{path}[{i}]")]
    if isinstance(want, torch.Tensor):
        return [] if isinstance(got, torch.Tensor) and torch.equal(got, want) else [path]
    return [] if got == want else [path]


def exists(endpoint: str, name: str) -> bool:
    try:
        json_api.download(endpoint, BUCKET, name)
    except FileNotFoundError:
        return False
    return True


def load_local(endpoint: str, prefix: str) -> Any:
    """This rank's shard values of the checkpoint at gs://BUCKET/prefix (into a seed-7 model)."""
    trainer = Trainer(seed=7)
    trainer.step()  # AdamW state exists, so the optimizer entries have somewhere to go
    state = trainer.state()
    dcp.load(state, storage_reader=GCSStorageReader(f"gs://{BUCKET}/{prefix}", endpoint=endpoint))
    return local_values(state)


def overlap(rank: int, endpoint: str, prefix: str) -> dict[str, Any]:
    """Training steps run while the upload is held; the future finishes only after .metadata."""
    trainer = Trainer()
    trainer.step()
    snapshot = local_values(trainer.state())
    writer = GatedWriter(f"gs://{BUCKET}/{prefix}", endpoint=endpoint, thread_count=1)
    future = dcp.async_save(
        trainer.state(), storage_writer=writer, process_group=dist.new_group(backend="gloo")
    )
    losses = [trainer.step() for _ in range(3)]  # upload held at write_data: these overlap it
    done_while_training = future.done()
    writer.data_gate.set()
    report: dict[str, Any] = {"losses": losses, "done_while_training": done_while_training}
    if rank == 0:  # the coordinator commits .metadata
        if not writer.in_finish.wait(WAIT_S):
            raise TimeoutError("coordinator never reached finish")
        names = ObjectStore(endpoint).list(BUCKET, f"{prefix}/")
        report["data_objects_before_finish"] = [  # `__{rank}_{save}_{i}.distcp`
            any(fnmatch.fnmatchcase(n, f"{prefix}/__{r}_*_0.distcp") for n in names) for r in (0, 1)
        ]
        report["metadata_before_finish"] = exists(endpoint, f"{prefix}/.metadata")
        report["done_before_finish"] = future.done()
        writer.finish_gate.set()
    else:
        writer.finish_gate.set()
    future.result(timeout=WAIT_S)
    report["metadata_after_result"] = exists(endpoint, f"{prefix}/.metadata")
    dist.barrier()
    report["mismatches"] = mismatches(load_local(endpoint, prefix), snapshot)
    report["steps_after"] = trainer.steps
    return report


def failing(rank: int, endpoint: str, prefix: str) -> dict[str, Any]:
    """An upload that fails for good (`endpoint` is a FaultProxy refusing rank 1's object)."""
    trainer = Trainer()
    trainer.step()
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.02)
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/{prefix}", endpoint=endpoint, thread_count=1, retry=retry
    )
    future = dcp.async_save(
        trainer.state(), storage_writer=writer, process_group=dist.new_group(backend="gloo")
    )
    trainer.step()
    error = future.exception(timeout=WAIT_S)
    dist.barrier()
    return {
        "type": type(error).__name__,
        "message": str(error),
        "failed_ranks": sorted(getattr(error, "failures", {})),
        "metadata": exists(endpoint, f"{prefix}/.metadata"),
    }


def two_saves(rank: int, endpoint: str, prefixes: tuple[str, str]) -> dict[str, Any]:
    """Two async saves to different prefixes in flight at once, each on its own process group."""
    trainer = Trainer()
    futures, writers, snapshots = [], [], []
    for prefix in prefixes:
        trainer.step()
        snapshots.append(local_values(trainer.state()))
        writer = GatedWriter(f"gs://{BUCKET}/{prefix}", endpoint=endpoint, thread_count=1)
        writer.finish_gate.set()
        writers.append(writer)
        futures.append(
            dcp.async_save(
                trainer.state(), storage_writer=writer, process_group=dist.new_group(backend="gloo")
            )
        )
    both_pending = [not f.done() for f in futures]  # both held at write_data
    for writer in writers:
        writer.data_gate.set()
    for future in futures:
        future.result(timeout=WAIT_S)
    dist.barrier()
    return {
        "both_pending": both_pending,
        "metadata": [exists(endpoint, f"{p}/.metadata") for p in prefixes],
        "mismatches": [
            mismatches(load_local(endpoint, p), s) for p, s in zip(prefixes, snapshots, strict=True)
        ],
        "snapshots_differ": bool(mismatches(snapshots[0], snapshots[1])),
    }
