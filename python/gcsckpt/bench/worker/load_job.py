"""Rank side of the timed rounds: fresh state, fresh reader and planner, barrier, ``dcp.load``.

Per round, outside the timed window: build the case's state with a seed that differs from the
save seed (so values that were not loaded cannot pass as loaded), make a new reader and a new
``counting_planner_for(reader)``, then barrier. Inside it: ``time.time()``, ``dcp.load``,
``time.time()``.
After a second barrier the rank checks its load: every state-dict entry's sha256 equals the one
taken at save time, and the committed tensor bytes equal the bytes the state dict holds.
"""

from __future__ import annotations

import gc
import json
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from gcsckpt.bench.worker import baseline
from gcsckpt.bench.worker.jobs import (
    LoadJob,
    RankLoadResult,
    RankRound,
    checksums_object,
    round_seed,
)
from gcsckpt.bench.worker.planner import counting_planner_for
from gcsckpt.bench.worker.setup_job import rank_device
from gcsckpt.dcp import GCSStorageReader, ObjectStore
from gcsckpt.models.state import expected_bytes, local_checksums
from gcsckpt.parallel.app_state import build_app_state
from gcsckpt.parallel.mesh import build_mesh

_LISTED_KEYS = 20  # mismatching keys kept per rank and round
_ERROR_CHARS = 600  # characters of one rank's error kept in messages


def describe_error(err: BaseException) -> str:
    """One line per failing rank: ``rank R: Type: message`` (DCP's CheckpointException carries
    every rank's exception; its str would be whole tracebacks)."""
    failures = getattr(err, "failures", None)
    if isinstance(err, CheckpointException) and failures:
        parts = []
        for rank, wrapped in sorted(failures.items()):
            exc = wrapped[0] if isinstance(wrapped, tuple) else wrapped
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            parts.append(f"rank {rank}: {text[:_ERROR_CHARS]}")
        return "; ".join(parts)
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return f"rank {dist.get_rank()}: {text[:_ERROR_CHARS]}"


def _saved_checksums(job: LoadJob, rank: int) -> dict[str, Any]:
    store = ObjectStore(job.storage.endpoint)
    try:
        name = checksums_object(job.storage.setup_prefix, rank)
        return json.loads(store.download(job.storage.bucket, name))
    finally:
        store.close()


def _make_reader(job: LoadJob):
    if job.reader == "gcsckpt":
        return GCSStorageReader(job.storage.checkpoint_url, endpoint=job.storage.endpoint)
    return baseline.make_fsspec_reader(job.storage.checkpoint_url, job.storage.endpoint)


def _counters(job: LoadJob, reader: Any, planner: Any) -> dict[str, Any]:
    """RankCounters fields. Requests include the ``.metadata`` GET(s); bytes_fetched does not
    (it is compared with bytes_needed, the bytes the rank's items occupy in storage)."""
    common = {"read_items": planner.read_items, "bytes_needed": planner.storage_bytes_needed}
    if job.reader == "gcsckpt":
        stats = reader.load_stats
        return {
            **common,
            "ranges": stats.ranges,
            "requests": stats.requests + stats.metadata_requests,
            "bytes_fetched": stats.bytes_fetched,
            "retries": stats.retries,
            "fetch_s": stats.fetch_s,
            "deserialize_s": stats.deserialize_s,
            "copy_s": stats.copy_s,
        }
    counts = baseline.take_request_counts()
    return {**common, "requests": counts.requests, "bytes_fetched": counts.data_bytes}


def _compare(saved: dict[str, str], loaded: dict[str, str]) -> tuple[list[str], list[str]]:
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
    saved = _saved_checksums(job, rank)
    dims = job.case.parallel_dims
    mesh = build_mesh(dims, device.type)
    rounds: list[RankRound] = []
    for index in range(job.rounds):
        label = f"{job.reader} round {index + 1}/{job.rounds}"
        report(f"{label}: build state", 0, None)
        state = build_app_state(job.case.model, dims, mesh, seed=round_seed(index), device=device)
        needed = expected_bytes(state)
        reader = _make_reader(job)
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
            return RankLoadResult(rank, tuple(rounds), error=describe_error(err))
        end = time.time()
        dist.barrier()
        report(f"{label}: verify", 0, 1)
        counters = _counters(job, reader, planner)
        differ, missing = _compare(saved["checksums"], local_checksums(state))
        rounds.append(
            RankRound(
                start_unix_s=start,
                end_unix_s=end,
                counters=counters,
                committed_tensor_bytes=planner.committed_tensor_bytes,
                expected_bytes=needed,
                mismatched=tuple(differ[:_LISTED_KEYS]),
                mismatch_count=len(differ),
                missing=tuple(missing[:_LISTED_KEYS]),
            )
        )
        report(f"{label}: verified", 1, 1)
        del state, reader, planner
        gc.collect()
    return RankLoadResult(rank, tuple(rounds))
