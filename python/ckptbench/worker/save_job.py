"""Rank side of the save phase: fresh state, fresh writer, barrier, timed ``dcp.save``, verify.

Per round: build the case's state with ``round_seed(index)`` and take its checksums; rank 0
empties the round's folder; make a new writer of the job's arm; barrier; ``time.time()``,
``dcp.save``, ``time.time()``; barrier. Around the save each rank measures itself
(``save_probe.SaveProbe``: RSS before and peak during, state bytes, the writer's phases, sent as
``RankRound.save``). Outside the timed window the save is verified: loaded back with torch's
stock ``FileSystemReader`` from a byte-exact copy of its objects (``localfs``: from its folder as
it is) into a state built with the setup seed, so values not loaded cannot pass, with every
entry's sha256 and the committed tensor bytes compared. Rank 0 then lists the folder (bytes
written) and deletes it, so saves never pile up. An arm whose ranks run on another interpreter
(dataflux) saves with ``SaveJob(verify=False)`` and ``VerifySaveJob`` checks it on the main
interpreter, so every save is checked with the project's own pinned stack, never the arm's.
Method: docs/design.md, "Benchmark method" (Saves) and "The benchmark's arms".
"""

from __future__ import annotations

import gc
import os
import shutil
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.job import describe_error
from ckptbench.record.rank_rounds import RankSave
from ckptbench.roles import LOCALFS
from ckptbench.worker import arms
from ckptbench.worker.case_jobs import (
    SAVE_SEED,
    RankRound,
    RankSaveResult,
    SaveJob,
    VerifySaveJob,
    round_seed,
)
from ckptbench.worker.load_job import job_scratch_dir, msc_profile
from ckptbench.worker.save_probe import SaveProbe, release_free_memory
from ckptbench.worker.setup_job import rank_device
from ckptbench.worker.verify import copy_to_disk, empty_prefix, load_back, node_local_folder
from ckptbench.workloads.models.state import expected_bytes, local_checksums
from ckptbench.workloads.parallel.app_state import build_app_state
from ckptbench.workloads.parallel.mesh import build_mesh
from gcsckpt.io import ObjectStore


def _folder_bytes(folder: str) -> int:
    """Bytes of every file below ``folder`` (a local save: its ``.distcp`` files and
    ``.metadata``)."""
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def _verify(
    job: SaveJob | VerifySaveJob,
    index: int,
    saved_sums: dict[str, str],
    timed: tuple[float, float],
    mesh: Any,
    device: Any,
    store: ObjectStore | None,
    scratch: str,
    report,
    measures: RankSave | None = None,
    local_folder: str | None = None,
) -> tuple[RankRound | None, int | None, str | None]:
    """Loads round ``index``'s save back with torch's stock ``FileSystemReader`` from a
    byte-exact copy of its objects on this node's disk (a ``localfs`` save: from
    ``local_folder`` itself), into a state built with the setup seed, and compares every entry
    with ``saved_sums``; rank 0 then lists and empties the folder (``localfs``: the node's
    first rank removes it).

    Why a copy: the stock FsspecReader over gcsfs sends one GET per item (~40 s per load of the
    scaled OLMoE ep case here, ~4 min for fsdp), which made verification most of the main job's
    save phase; a copy downloads each object once, and torch's own reader then checks the same
    stored bytes. Each node's first rank (``LOCAL_RANK`` 0, rank 0 under the spawn launcher)
    makes the copy.

    Returns:
      (the round, carrying ``measures``; bytes the save left (rank 0; else None); None) or
      (None, None, error).
    """
    label = f"{job.writer} save {index + 1}"
    prefix = job.storage.save_round_prefix(job.writer, index)
    folder = local_folder or os.path.join(scratch, f"verify-{job.writer}-round{index + 1}")
    copier = os.environ.get("LOCAL_RANK", str(dist.get_rank())) == "0"
    written = None
    report(f"{label}: verify with the stock reader", 0, 1)
    try:
        try:
            if local_folder is not None:
                if dist.get_rank() == 0:
                    written = _folder_bytes(local_folder)
            elif copier:
                copy_store = store or ObjectStore(job.storage.endpoint)
                try:
                    copy_to_disk(copy_store, job.storage.bucket, prefix, folder)
                finally:
                    if copy_store is not store:
                        copy_store.close()
            dist.barrier()
            target = build_app_state(
                job.case.model, job.case.parallel_dims, mesh, seed=SAVE_SEED, device=device
            )
            back = load_back(target, folder, saved_sums)
        except (Exception, CheckpointException) as err:
            if store is not None and local_folder is None:
                empty_prefix(store, job.storage.bucket, prefix)
            return None, None, f"verifying load: {describe_error(err)}"
        dist.barrier()
    finally:
        if copier:
            shutil.rmtree(folder, ignore_errors=True)
    done = RankRound(
        start_unix_s=timed[0],
        end_unix_s=timed[1],
        counters={},
        committed_tensor_bytes=back.committed_bytes,
        expected_bytes=back.expected_bytes,
        mismatched=back.mismatched,
        mismatch_count=back.mismatch_count,
        missing=back.missing,
        save=measures,
    )
    if store is not None and local_folder is None:
        written = empty_prefix(store, job.storage.bucket, prefix)
    dist.barrier()  # nobody builds the next state before the folder is gone
    report(f"{label}: verified", 1, 1)
    del target
    gc.collect()
    return done, written, None


def _round_state(job: SaveJob | VerifySaveJob, index: int, mesh: Any, device: Any):
    """The state round ``index`` saves (seed ``round_seed(index)``: the same on a rebuild)."""
    return build_app_state(
        job.case.model, job.case.parallel_dims, mesh, seed=round_seed(index), device=device
    )


def run_save(job: SaveJob, report) -> RankSaveResult:
    """Runs ``job.rounds`` timed saves on this rank and, with ``job.verify``, verifies each one.

    Args:
      job: the save job.
      report: ``report(phase, completed, total)`` progress callback.

    Returns:
      RankSaveResult (see ``case_jobs.RankSaveResult``); when ``dcp.save`` or
      the verifying load raises, ``error`` says why and ``rounds`` holds the rounds before it.
      Without ``job.verify`` each round is timed only (``VerifySaveJob`` checks it later) and
      the save's objects stay in place.
    """
    rank = dist.get_rank()
    device = rank_device(job.device)
    mesh = build_mesh(job.case.parallel_dims, device.type)
    scratch = job_scratch_dir()
    store = ObjectStore(job.storage.endpoint) if rank == 0 else None
    rounds: list[RankRound] = []
    written: list[int] = []
    try:
        for index in range(job.first_round, job.first_round + job.rounds):
            label = f"{job.writer} save {index + 1}"
            prefix = job.storage.save_round_prefix(job.writer, index)
            report(f"{label}: build state", 0, None)
            state = _round_state(job, index, mesh, device)
            saved_sums = local_checksums(state)
            folder = None
            if job.writer == LOCALFS:
                folder = node_local_folder(job.local_root, scratch, f"{LOCALFS}-round{index + 1}")
                if rank == 0:
                    shutil.rmtree(folder, ignore_errors=True)
            elif store is not None:
                empty_prefix(store, job.storage.bucket, prefix)
            profile = None
            if job.writer == "msc":
                profile = msc_profile(scratch, "msc-writer", index, job.storage, cache=False)
            writer = arms.make_writer(
                job.writer, job.storage.bucket, prefix, job.storage.endpoint, profile, folder
            )
            probe = SaveProbe(writer, expected_bytes(state))
            release_free_memory()  # the start RSS is memory in use (see its docstring)
            dist.barrier()
            report(f"{label}: save", 0, 1)
            try:
                with probe:
                    start = time.time()
                    dcp.save(state, storage_writer=writer)
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    end = time.time()
                measures = probe.result()
            except (Exception, CheckpointException) as err:
                if folder is not None:
                    if rank == 0:
                        shutil.rmtree(folder, ignore_errors=True)
                elif store is not None:
                    empty_prefix(store, job.storage.bucket, prefix)  # a failed save leaves nothing
                return RankSaveResult(rank, tuple(rounds), error=describe_error(err))
            finally:
                if profile is not None:
                    profile.close()
            dist.barrier()
            del state, writer, probe
            gc.collect()
            if not job.verify:
                rounds.append(RankRound(start, end, {}, 0, 0, mismatch_count=-1, save=measures))
                continue
            done, size, error = _verify(
                job,
                index,
                saved_sums,
                (start, end),
                mesh,
                device,
                store,
                scratch,
                report,
                measures=measures,
                local_folder=folder,
            )
            if error is not None:
                return RankSaveResult(rank, tuple(rounds), error=error)
            rounds.append(done)
            if size is not None:
                written.append(size)
    finally:
        if store is not None:
            store.close()
    return RankSaveResult(rank, tuple(rounds), written_bytes=tuple(written))


def run_verify_save(job: VerifySaveJob, report) -> RankSaveResult:
    """Verifies round ``job.first_round`` of a save made by a ``SaveJob(verify=False)``: rebuilds
    the state it saved (same seed), loads the save back with the stock reader and compares.

    Returns:
      RankSaveResult with one round carrying the verification (its times are 0: the save job
      has them; ``jobs.with_verification`` joins the two), or ``error``.
    """
    rank = dist.get_rank()
    device = rank_device(job.device)
    mesh = build_mesh(job.case.parallel_dims, device.type)
    store = ObjectStore(job.storage.endpoint) if rank == 0 else None
    scratch = job_scratch_dir()
    try:
        index = job.first_round
        saved_sums = local_checksums(_round_state(job, index, mesh, device))
        gc.collect()
        done, size, error = _verify(
            job, index, saved_sums, (0.0, 0.0), mesh, device, store, scratch, report
        )
    finally:
        if store is not None:
            store.close()
    if error is not None:
        return RankSaveResult(rank, (), error=error)
    return RankSaveResult(rank, (done,), written_bytes=() if size is None else (size,))
