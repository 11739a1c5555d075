"""Rank-side steps of test_replicas.py: an HSDP state (2 replicas x 2 shards) saved, then loaded
with and without read_once, with one rank's range reads sent to a closed port, and without a
process group (no_dist)."""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from states import blank_like, compare, fsdp_state, full_values, tree_map
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from gcsckpt.dcp import GCSLoadPlanner, GCSStorageReader, GCSStorageWriter
from gcsckpt.io import RangeReader, RetryPolicy
from gcsckpt.testing.ports import free_port


class _DeadRangesReader(GCSStorageReader):
    """GCSStorageReader whose range GETs go to a closed port (one attempt): its item ranges fail."""

    def _reader(self) -> RangeReader:
        if self._range_reader is None:
            dead = f"http://127.0.0.1:{free_port()}"
            self._range_reader = RangeReader(dead, retry=RetryPolicy(max_attempts=1))
        return self._range_reader


class _RecordingPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner that keeps the (object, offset, length) of every storage entry its
    rank's plan reads (a TORCH_SAVE item's range is its whole entry)."""

    def create_local_plan(self):
        plan = super().create_local_plan()
        storage = self.metadata.storage_data
        self.ranges = sorted(
            {
                (storage[i.storage_index].relative_path, storage[i.storage_index].offset)
                + (storage[i.storage_index].length,)
                for i in plan.items
            }
        )
        return plan


def _local_digest(state) -> int:
    """CRC-32 of every tensor's local bytes (DTensor: its shard), in key order."""
    crc = 0

    def add(leaf):
        nonlocal crc
        if isinstance(leaf, torch.Tensor):
            local = leaf.to_local() if isinstance(leaf, DTensor) else leaf
            crc = zlib.crc32(local.contiguous().view(-1).view(torch.uint8).numpy().tobytes(), crc)
        return leaf

    tree_map(state, add)
    return crc


def _state():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    return fsdp_state(mesh)


def save_and_load(rank: int, spec: dict, loads: list[dict]) -> list[dict]:
    """Saves the HSDP state to spec["ckpt"], then runs each of `loads` (read_once, planner
    "gcs" or None, fail_rank: the rank whose range reads fail, no_dist, gap: the reader's
    coalesce_gap_bytes) into a blank state. Returns per load: compared, mismatches, stats,
    ranges (the entries this rank's plan reads; without planner "gcs"), digest (of the local
    tensors), error (this rank's own, as text)."""
    state = _state()
    dcp.save(state, storage_writer=GCSStorageWriter(spec["ckpt"], endpoint=spec["endpoint"]))
    expected = full_values(state)
    results = []
    for load in loads:
        blank = blank_like(_state())
        kind = _DeadRangesReader if load.get("fail_rank") == rank else GCSStorageReader
        reader = kind(
            spec["ckpt"],
            endpoint=spec["endpoint"],
            read_once=load["read_once"],
            coalesce_gap_bytes=load.get("gap"),
        )
        planner = GCSLoadPlanner() if load.get("planner") == "gcs" else _RecordingPlanner()
        error = None
        try:
            no_dist = bool(load.get("no_dist"))
            dcp.load(blank, storage_reader=reader, planner=planner, no_dist=no_dist)
        except CheckpointException as e:
            own = e.failures.get(rank)
            error = f"{type(own[0]).__name__}: {own[0]}" if own else "failed elsewhere"
        dist.barrier()
        count, bad = compare(blank, expected)
        results.append(
            dict(
                compared=count,
                mismatches=bad,
                stats=reader.load_stats.as_dict(),
                ranges=getattr(planner, "ranges", None),
                digest=_local_digest(blank),
                error=error,
            )
        )
    return results
