"""Rank-side steps of the DCP tests (top-level so local_ranks.run_ranks can pickle them)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from states import _sentinel, blank_like, compare, fsdp_state, full_values, plain_state, tree_map
from torch.distributed.checkpoint.filesystem import SerializationFormat
from torch.distributed.device_mesh import init_device_mesh

from gcsckpt.dcp import GCSLoadPlanner, GCSStorageReader, GCSStorageWriter


def _fsspec():
    """Stock FsspecReader/FsspecWriter over gcsfs, set up for the local endpoint."""
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # before gcsfs is imported
    import gcsfs
    from fsspec.asyn import AsyncFileSystem
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    # FsspecWriter renames `.metadata.tmp`; gcsfs first tries the moveTo API, which the emulator
    # answers 501 to, and retries that for ~30 s before copying. Go straight to copy + delete.
    gcsfs.GCSFileSystem._mv_file = AsyncFileSystem._mv_file
    return FsspecReader, FsspecWriter


def _state(kind: str) -> dict[str, Any]:
    if kind == "plain":
        return plain_state()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return fsdp_state(mesh)


def save(rank: int, spec: dict) -> dict:
    """Builds spec["state"], saves it with spec["writer"] ("gcs"/"fsspec") to spec["ckpt"];
    rank 0 writes the full values to spec["expected"] (local path)."""
    state = _state(spec["state"])
    fmt = SerializationFormat(spec.get("format", "torch_save"))
    if spec["writer"] == "gcs":
        writer = GCSStorageWriter(
            spec["ckpt"],
            endpoint=spec["endpoint"],
            serialization_format=fmt,
            thread_count=spec.get("threads", 2),
        )
    else:
        writer = _fsspec()[1](
            spec["ckpt"], token="anon", endpoint_url=spec["endpoint"], serialization_format=fmt
        )
    dcp.save(state, storage_writer=writer)
    expected = full_values(state)
    if rank == 0:
        torch.save(expected, spec["expected"])
    return {"saved": True}


def load(rank: int, spec: dict) -> dict:
    """Loads spec["ckpt"] into a blank state (spec["mode"]: "fsdp" = same kind of sharded state
    on this world size, "full" = plain full tensors) with spec["reader"] (and GCSLoadPlanner
    when spec["planner"] == "gcs") and compares it with spec["expected"].
    Returns compared/mismatches/stats."""
    dist.barrier()  # the saver's rank 0 writes `expected` after its own save returns
    expected = torch.load(spec["expected"], weights_only=False)
    if spec["mode"] == "full":
        state = tree_map(
            expected, lambda v: torch.zeros_like(v) if isinstance(v, torch.Tensor) else _sentinel(v)
        )
    else:
        state = blank_like(_state(spec["state"]))
    if spec["reader"] == "gcs":
        reader = GCSStorageReader(spec["ckpt"], endpoint=spec["endpoint"])
    else:
        reader = _fsspec()[0](spec["ckpt"], token="anon", endpoint_url=spec["endpoint"])
    planner = GCSLoadPlanner() if spec.get("planner") == "gcs" else None
    dcp.load(state, storage_reader=reader, planner=planner)
    count, bad = compare(state, expected)
    stats = reader.load_stats.as_dict() if spec["reader"] == "gcs" else None
    return {"compared": count, "mismatches": bad, "stats": stats}


def save_and_load(rank: int, save_spec: dict, load_specs: list[dict]) -> list[dict]:
    """`save` then each of `load_specs` in order, all in the same ranks."""
    save(rank, save_spec)
    return [load(rank, spec) for spec in load_specs]
