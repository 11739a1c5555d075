"""Rank side of the timed rounds: fresh state, fresh reader and planner, barrier, ``dcp.load``.

Per round, outside the timed window: build the case's state with a seed that differs from the
save seed (so values that were not loaded cannot pass as loaded), make a new reader and a new
``counting_planner_for(reader)``, then barrier. Inside it: ``time.time()``, ``dcp.load``,
``time.time()``.
After a second barrier the rank checks its load: every state-dict entry's sha256 equals the one
taken at save time (a resharded load: that of the save seed's state built in the load layout),
and the committed tensor bytes equal the bytes the state dict holds.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
import uuid
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.job import describe_error
from ckptbench.roles import CANDIDATES
from ckptbench.worker import arms, baseline
from ckptbench.worker.case_jobs import (
    SAVE_SEED,
    LoadJob,
    RankLoadResult,
    RankRound,
    checksums_object,
    round_seed,
)
from ckptbench.worker.counting_planner import counting_planner_for
from ckptbench.worker.setup_job import rank_device
from ckptbench.workloads.models.state import expected_bytes, local_checksums
from ckptbench.workloads.parallel.app_state import build_app_state
from ckptbench.workloads.parallel.mesh import build_mesh
from gcsckpt.io import ObjectStore

LISTED_KEYS = 20  # mismatching keys kept per rank and round


def _expected_checksums(job: LoadJob, rank: int, mesh: Any, device: torch.device) -> dict[str, str]:
    """This rank's expected ``{key: sha256}``: the save-time checksums the setup job stored, or
    for a resharded load (``case.saved_from``) those of a ``SAVE_SEED`` state built in the load
    layout (the same seed gives the same global values under every layout)."""
    if job.case.saved_from is None:
        return _saved_checksums(job, rank)["checksums"]
    state = build_app_state(
        job.case.model, job.case.parallel_dims, mesh, seed=SAVE_SEED, device=device
    )
    sums = local_checksums(state)
    del state
    gc.collect()
    return sums


def _saved_checksums(job: LoadJob, rank: int) -> dict[str, Any]:
    store = ObjectStore(job.storage.endpoint)
    try:
        name = checksums_object(job.storage.setup_prefix, rank)
        return json.loads(store.download(job.storage.bucket, name))
    finally:
        store.close()


def job_scratch_dir() -> str:
    """A folder name agreed by every rank (rank 0's uuid, broadcast) for per-round scratch files
    such as MSC's config and node-local cache; on each node under its temp folder."""
    box = [uuid.uuid4().hex[:12] if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return os.path.join(tempfile.gettempdir(), "gcsckpt-bench", box[0])


def msc_profile(scratch: str, arm: str, index: int, storage: Any, cache: bool):
    """The round's MSCProfile (fresh profile name and folder per round)."""
    return arms.MSCProfile(
        os.path.join(scratch, f"{arm}-round{index + 1}"),
        f"bench-{arm}-round{index + 1}-{os.path.basename(scratch)}",
        storage.bucket,
        storage.endpoint,
        cache=cache,
    )


def _counters(job: LoadJob, reader: Any, planner: Any) -> dict[str, Any]:
    """RankCounters fields. Requests include the ``.metadata`` GET(s); bytes_fetched does not
    (it is compared with bytes_needed, the bytes the rank's items occupy in storage)."""
    common = {"read_items": planner.read_items, "bytes_needed": planner.storage_bytes_needed}
    if job.reader in CANDIDATES:
        stats = reader.load_stats
        return {
            **common,
            "ranges": stats.ranges,
            "requests": stats.requests + stats.metadata_requests,
            "bytes_fetched": stats.bytes_fetched,
            "retries": stats.retries,
            "bytes_verified": stats.bytes_verified,
            "fetch_s": stats.fetch_s,
            "deserialize_s": stats.deserialize_s,
            "copy_s": stats.copy_s,
        }
    if job.reader == "fsspec":
        counts = baseline.take_request_counts()
        return {**common, "requests": counts.requests, "bytes_fetched": counts.data_bytes}
    return common  # msc: its requests are not counted from the outside


def compare_checksums(saved: dict[str, str], loaded: dict[str, str]) -> tuple[list[str], list[str]]:
    """(keys whose checksum differs, keys present on only one side)."""
    differ = [key for key, digest in saved.items() if key in loaded and loaded[key] != digest]
    missing = sorted(set(saved) ^ set(loaded))
    return differ, missing


def run_load(job: LoadJob, report) -> RankLoadResult:
    """Runs ``job.rounds`` timed loads on this rank and verifies each one.

    Args:
      job: the load job.
      report: ``report(phase, completed, total)`` progress callback.

    Returns:
      RankLoadResult; when ``dcp.load`` raises, ``error`` says why (every rank names the same
      failure, since DCP gathers exceptions) and ``rounds`` holds the rounds before it.
    """
    rank = dist.get_rank()
    device = rank_device(job.device)
    dims = job.case.parallel_dims
    mesh = build_mesh(dims, device.type)
    saved = _expected_checksums(job, rank, mesh, device)
    scratch = job_scratch_dir()
    rounds: list[RankRound] = []
    for index in range(job.first_round, job.first_round + job.rounds):
        label = f"{job.reader} round {index + 1}"
        report(f"{label}: build state", 0, None)
        state = build_app_state(job.case.model, dims, mesh, seed=round_seed(index), device=device)
        needed = expected_bytes(state)
        profile = None
        if job.reader == "msc":
            profile = msc_profile(scratch, "msc", index, job.storage, cache=True)
        reader = arms.make_reader(
            job.reader,
            job.storage.bucket,
            job.storage.checkpoint_prefix,
            job.storage.endpoint,
            profile,
        )
        planner = counting_planner_for(
            job.reader,
            progress=lambda done, total, label=label: report(f"{label}: load", done, total),
        )
        if job.reader == "fsspec":
            baseline.take_request_counts()  # drop what setting up the reader sent
        dist.barrier()
        start = time.time()
        try:
            # No checkpoint_id: FsspecReader.reset(id) would rebuild its filesystem without
            # the storage options (endpoint, credentials) it was made with.
            dcp.load(state, storage_reader=reader, planner=planner)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except (Exception, CheckpointException) as err:
            if profile is not None:
                profile.close()
            return RankLoadResult(rank, tuple(rounds), error=describe_error(err))
        end = time.time()
        dist.barrier()
        if profile is not None:
            profile.close()  # every rank is done with the round's cache
        report(f"{label}: verify", 0, 1)
        counters = _counters(job, reader, planner)
        differ, missing = compare_checksums(saved, local_checksums(state))
        rounds.append(
            RankRound(
                start_unix_s=start,
                end_unix_s=end,
                counters=counters,
                committed_tensor_bytes=planner.committed_tensor_bytes,
                expected_bytes=needed,
                mismatched=tuple(differ[:LISTED_KEYS]),
                mismatch_count=len(differ),
                missing=tuple(missing[:LISTED_KEYS]),
            )
        )
        report(f"{label}: verified", 1, 1)
        del state, reader, planner
        gc.collect()
    return RankLoadResult(rank, tuple(rounds))
