"""Rank-side steps of test_checkpointer.py: GCSCheckpointer's modes, plan cache and clients.

Values are checked exactly: every checkpoint is loaded back and compared with a copy of the
state taken at its step, and the state is changed right after each async call returned, so a
save that read the tensors after the call (no real staging copy) fails the comparison.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

import psutil
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from async_ranks import BUCKET, Trainer, load_local, local_values, mismatches
from torch.distributed.checkpoint import _async_process_executor as torch_process
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from torch.distributed.tensor import DTensor

from gcsckpt.dcp import (
    GCSCheckpointer,
    GCSSavePlanner,
    GCSStorageReader,
    GCSStorageWriter,
    client_cache,
)
from gcsckpt.io.objects import ObjectStore


def _bump(state: Any) -> None:
    """Adds 1000 in place to every tensor of `state` (DTensors: the local shard)."""
    for value in state.values():
        if isinstance(value, dict):
            _bump(value)
        elif isinstance(value, DTensor):
            value.to_local().add_(1000)
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            value.add_(1000)


def modes(rank: int, endpoint: str, mode: str) -> dict[str, Any]:
    """Two saves in `mode` with training in between; the state is changed right after each
    call returned. Returns the mismatches of each checkpoint against its step's copy."""
    trainer = Trainer()
    ckpt = GCSCheckpointer(mode, endpoint=endpoint, thread_count=1)
    snapshots, prefixes = [], []
    for i in range(2):
        trainer.step()
        state = trainer.state()
        snapshots.append(local_values(state))
        prefixes.append(f"modes/{mode}/{i}")
        ckpt.save(state, f"gs://{BUCKET}/{prefixes[-1]}")
        _bump(state)  # the model itself: its parameters and AdamW state share these storages
        trainer.step()
    ckpt.close()
    dist.barrier()
    return {
        "mismatches": [
            mismatches(load_local(endpoint, p), s) for p, s in zip(prefixes, snapshots, strict=True)
        ],
        "snapshots_differ": bool(mismatches(snapshots[0], snapshots[1])),
    }


def _plain(rank: int, keys: dict[str, tuple]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(rank)
    return {f"r{rank}.{k}": torch.randn(*shape, generator=gen) for k, shape in keys.items()}


def plan_cache(rank: int, endpoint: str) -> dict[str, Any]:
    """Sync saves: same layout twice, then a new key, a removed key, a changed shape, a
    changed dtype. Returns per save whether the cached plan was reused, and the loads."""
    layouts = [
        {"a": (4, 8), "b": (16,)},
        {"a": (4, 8), "b": (16,)},
        {"a": (4, 8), "b": (16,), "c": (3,)},
        {"a": (4, 8)},
        {"a": (5, 8)},
        {"a": (5, 8)},
    ]
    ckpt = GCSCheckpointer("sync", endpoint=endpoint, thread_count=1)
    reused, loaded_ok, tags = [], [], []
    for i, keys in enumerate(layouts):
        state = _plain(rank, keys)
        if i == 5:
            state = {k: v.double() for k, v in state.items()}
        before = GCSSavePlanner.plans_reused
        ckpt.save(state, f"gs://{BUCKET}/plans/{i}")
        reused.append(GCSSavePlanner.plans_reused - before)
        blank = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(
            blank, storage_reader=GCSStorageReader(f"gs://{BUCKET}/plans/{i}", endpoint=endpoint)
        )
        loaded_ok.append(all(torch.equal(blank[k], state[k]) for k in state))
        names = ObjectStore(endpoint).list(BUCKET, f"plans/{i}/__{rank}_")
        tags += sorted({re.sub(r".*/__\d+_([0-9a-f]{16})_\d+\.distcp$", r"\1", n) for n in names})
    ckpt.close()
    return {"reused": reused, "loaded_ok": loaded_ok, "tags": tags}


class RecordingWriter(GCSStorageWriter):
    """Appends (pid, clients built in this process so far, id of the uploader) to `log` after
    each rank's data upload, from whichever process runs the save."""

    def __init__(self, *args: Any, log: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = log

    def write_data(self, plan, planner):
        result = super().write_data(plan, planner)
        entry = {
            "pid": os.getpid(),
            "builds": dict(client_cache.builds),
            "uploader": id(self._uploader),
        }
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        return result


def process_reuse(rank: int, endpoint: str, log_dir: str) -> dict[str, Any]:
    """Three PROCESS-mode async saves, a new writer each (as torch users do); returns what the
    writers recorded in the checkpoint process, and the loads."""
    trainer = Trainer()
    group = dist.new_group(backend="gloo")
    log = os.path.join(log_dir, f"rank{rank}.jsonl")
    snapshots = []
    for i in range(3):
        trainer.step()
        snapshots.append(local_values(trainer.state()))
        writer = RecordingWriter(f"gs://{BUCKET}/reuse/{i}", endpoint=endpoint, log=log)
        dcp.async_save(
            trainer.state(),
            storage_writer=writer,
            process_group=group,
            async_checkpointer_type=AsyncCheckpointerType.PROCESS,
        ).result()
    dist.barrier()
    with open(log) as f:
        entries = [json.loads(line) for line in f]
    return {
        "entries": entries,
        "own_pid": os.getpid(),
        "mismatches": [
            mismatches(load_local(endpoint, f"reuse/{i}"), s) for i, s in enumerate(snapshots)
        ],
    }


def run_steps(rank: int, endpoint: str, local_dir: str) -> dict[str, Any]:
    """FSDP2 on every rank: thread-mode saves at steps 1..4 under a root with keep_latest=2 and
    a local tier, then loads into a fresh model: from the local tier, then (tier removed on one
    rank) from GCS, and an explicit older step. Returns steps, sources and mismatches."""
    root = f"gs://{BUCKET}/run-steps"
    trainer = Trainer()
    ckpt = GCSCheckpointer(
        "thread", root=root, keep_latest=2, local_dir=local_dir, endpoint=endpoint
    )
    snapshots = {}
    for step in range(1, 5):
        trainer.step()
        state = trainer.state()
        snapshots[step] = local_values(state)
        ckpt.save(state, step=step)
        _bump(state)  # staging really copied: the checkpoint keeps the values at the call
        trainer.step()
    ckpt.close()
    dist.barrier()
    report: dict[str, Any] = {"steps": ckpt.steps()}
    fresh = Trainer(seed=7)
    fresh.step()
    again = GCSCheckpointer(
        "thread", root=root, keep_latest=2, local_dir=local_dir, endpoint=endpoint
    )
    state = fresh.state()
    report["local"] = (again.load(state), again.last_load["source"])
    report["local_mismatches"] = mismatches(local_values(state), snapshots[4])
    if rank == 1:
        again._tier.discard()  # one rank without its copy: every rank reads GCS
    state = fresh.state()
    report["gcs"] = (again.load(state), again.last_load["source"])
    report["gcs_mismatches"] = mismatches(local_values(state), snapshots[4])
    state = fresh.state()
    report["older"] = (again.load(state, step=3), again.last_load["source"])
    report["older_mismatches"] = mismatches(local_values(state), snapshots[3])
    again.close()
    return report


def _spawned_children() -> set[int]:
    """Pids of this rank's multiprocessing "spawn" children (torch's checkpoint process is
    one; the resource tracker is not)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def _running(pid: int | None) -> bool:
    if pid is None or not psutil.pid_exists(pid):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _torch_pid() -> int | None:
    proc = torch_process._CHECKPOINT_PROCESS
    return None if proc is None else proc._save_process.pid


def process_lifecycle(
    rank: int, endpoint: str, while_shared: Callable[[], None] | None = None
) -> dict[str, Any]:
    """GCSCheckpointer("process"): its checkpoint process runs once the checkpointer is made,
    before any save; two saves use it (no new process); a second checkpointer shares it; the
    last close() stops it. `while_shared` runs while both are open (other checkpointers of the
    rank then share the process too). Returns pids, liveness and the loads' mismatches."""
    trainer = Trainer()
    before = _spawned_children()
    ckpt = GCSCheckpointer("process", endpoint=endpoint, thread_count=1)
    pid = ckpt.checkpoint_pid()
    report: dict[str, Any] = {
        "new_at_construction": sorted(_spawned_children() - before) == [pid],
        "parent_is_rank": psutil.Process(pid).ppid() == os.getpid(),
        "running_before_save": _running(pid),
        "torch_uses_it": _torch_pid() == pid,
    }
    constructed = _spawned_children()
    snapshots = []
    for i in range(2):
        trainer.step()
        state = trainer.state()
        snapshots.append(local_values(state))
        ckpt.save(state, f"gs://{BUCKET}/lifecycle/{i}").result()
        _bump(state)
    report["new_at_saves"] = sorted(_spawned_children() - constructed)
    report["torch_uses_it_after_saves"] = _torch_pid() == pid
    other = GCSCheckpointer("process", endpoint=endpoint, thread_count=1)
    report["shared"] = other.checkpoint_pid() == pid
    if while_shared is not None:
        while_shared()
    ckpt.close()
    report["running_after_first_close"] = _running(pid)
    other.close()
    report["running_after_last_close"] = _running(pid)
    report["torch_global_after_close"] = _torch_pid()
    report["children_after_close"] = sorted(_spawned_children() - before)
    dist.barrier()
    report["mismatches"] = [
        mismatches(load_local(endpoint, f"lifecycle/{i}"), s) for i, s in enumerate(snapshots)
    ]
    return report


def process_mode(rank: int, endpoint: str, log_dir: str) -> dict[str, Any]:
    """Every PROCESS-mode check in one rank job, so each rank spawns two checkpoint processes,
    not three: `process_lifecycle`, with `modes(.., "process")` run while its checkpointers hold
    the checkpoint process (a third one sharing it, closed before theirs); then, that process
    stopped, `process_reuse` (torch's own `dcp.async_save`, which starts a fresh one). Returns
    {"lifecycle": .., "modes": .., "reuse": ..}: each step's own report."""
    during = {}
    lifecycle = process_lifecycle(
        rank, endpoint, while_shared=lambda: during.update(modes(rank, endpoint, "process"))
    )
    reuse = process_reuse(rank, endpoint, log_dir)
    return {"lifecycle": lifecycle, "modes": during, "reuse": reuse}
