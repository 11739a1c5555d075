"""Rank side of setup: build the case's state with the save seed, save it, write its checksums.

Runs on every rank of the case's world with the default process group already initialized.
The checkpoint goes through ``GCSStorageWriter`` (overwrite on: the runner only sets up when no
complete checkpoint with the same config hash exists). Each rank then writes
``{"expected_bytes": int, "checksums": {key: sha256 hex}}`` as its checksum object; the runner
writes the manifest only after every rank returned, so a half-done setup is never reused.
"""

from __future__ import annotations

import json
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from ckptbench.worker.case_jobs import SAVE_SEED, RankSetupResult, SetupJob, checksums_object
from ckptbench.workloads.models.state import expected_bytes, local_checksums
from ckptbench.workloads.parallel.app_state import build_app_state
from ckptbench.workloads.parallel.mesh import build_mesh
from gcsckpt.dcp import GCSStorageWriter
from gcsckpt.io import ObjectStore


def rank_device(device: str) -> torch.device:
    """``cpu``, or this rank's GPU (``cuda:<LOCAL_RANK>``, set as the current device)."""
    if device == "cpu":
        return torch.device("cpu")
    index = torch.cuda.current_device()
    return torch.device("cuda", index)


def run_setup(job: SetupJob, report) -> RankSetupResult:
    """Saves the case's checkpoint from this rank and uploads this rank's checksums.

    Args:
      job: the setup job.
      report: ``report(phase, completed, total)`` progress callback.

    Returns:
      This rank's RankSetupResult.

    Raises:
      anything the model build, ``dcp.save`` (e.g. ``CheckpointException``) or the upload raises.
    """
    rank = dist.get_rank()
    device = rank_device(job.device)
    report("setup: build state", 0, 1)
    started = time.perf_counter()
    dims = job.case.parallel_dims
    mesh = build_mesh(dims, device.type)
    state = build_app_state(job.case.model, dims, mesh, seed=SAVE_SEED, device=device)
    sums = local_checksums(state)
    needed = expected_bytes(state)
    built = time.perf_counter()
    report("setup: save", 0, 1)
    writer = GCSStorageWriter(
        job.storage.checkpoint_url, endpoint=job.storage.endpoint, overwrite=True
    )
    dcp.save(state, storage_writer=writer)
    body = json.dumps({"expected_bytes": needed, "checksums": sums}, sort_keys=True).encode()
    store = ObjectStore(job.storage.endpoint)
    try:
        store.upload(job.storage.bucket, checksums_object(job.storage.setup_prefix, rank), body)
    finally:
        store.close()
    saved = time.perf_counter()
    report("setup: saved", 1, 1)
    return RankSetupResult(
        rank=rank,
        entries=len(sums),
        expected_bytes=needed,
        build_s=built - started,
        save_s=saved - built,
    )
