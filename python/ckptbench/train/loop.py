"""Rank side of the training benchmark: the timed loop with one arm, then the load-back.

Per round on fresh ranks: build the layout's model and seeded AdamW state, then ``steps``
optimizer steps (a fixed batch per (step, rank)); after every ``every``-th the checkpoint: wait
for the one still in flight (one at a time), ``get_state_dict``, the state's checksums (a
pause: off the clock, in every arm alike), then the arm's save call on a gloo group of its own
(its collectives never interleave with FSDP's). The loop's wall, each step's time, the calls and
the time to durable are the rank's own ``time.perf_counter``; CPU and RSS come from sampling
the rank's process tree (``record.resources``). Afterwards every checkpoint is loaded back with
torch's stock FileSystemReader (a GCS save from a byte-exact copy of its objects) and compared
with the checksums taken at its step: the loop changes parameters and moments in place, so a
writer that reads a tensor after its call returned fails here. The local-tier arm's node copy of
its last checkpoint is checked the same way (the tier's manifest, then torch's
FileSystemReader). Then the round's objects and folders go.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import psutil
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.job import describe_error
from ckptbench.record.resources import ResourceSampler
from ckptbench.roles import LOCAL_TIER, LOCALFS
from ckptbench.train import saving
from ckptbench.train.model import build_trainer, layout_dims, model_config, train_step
from ckptbench.train.train_jobs import (
    TRAIN_SEED,
    VERIFY_SEED,
    Checkpoint,
    RankTrain,
    TrainJob,
    Verified,
    VerifyTrainJob,
)
from ckptbench.worker.load_job import LISTED_KEYS, job_scratch_dir, msc_profile
from ckptbench.worker.save_probe import release_free_memory
from ckptbench.worker.verify import copy_to_disk, empty_prefix, load_back, node_local_folder
from ckptbench.workloads.models.state import app_state_dict, expected_bytes, local_checksums
from ckptbench.workloads.parallel.mesh import build_mesh
from gcsckpt.dcp.local_tier import LocalTier
from gcsckpt.dcp.steps import parse_root
from gcsckpt.io import ObjectStore

SAMPLE_INTERVAL_S = 0.05  # the rank tree's CPU and RSS every 50 ms


def checkpoint_prefix(job: TrainJob, step: int) -> str:
    """Object prefix (GCS arms) or folder name (localfs) of the checkpoint of ``step``; the
    local-tier arm's are GCSCheckpointer's own ``<prefix>/step-N``."""
    if saving.arm_parts(job.arm)[0] == LOCAL_TIER:
        return f"{job.prefix}/step-{step}"
    return f"{job.prefix}/step-{step:05d}"


def _tier_folder(job: TrainJob, scratch: str) -> str:
    """The local-tier arm's ``local_dir``: below ``job.local_root`` (tmpfs) or the scratch dir."""
    return node_local_folder(job.local_root, scratch, "tier")


def _local_folder(job: TrainJob, scratch: str, step: int) -> str:
    """The localfs checkpoint folder of ``step``: below ``job.local_root`` or the scratch dir."""
    return node_local_folder(
        job.local_root, scratch, checkpoint_prefix(job, step).replace("/", "-")
    )


class _Done:
    """Records when a save's future completed (``perf_counter``), from its callback."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, _future: Any) -> None:
        self.at = time.perf_counter()


def _tree_rss() -> int:
    """RSS of this process and its children, bytes."""
    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def _loop(job: TrainJob, trainer: Any, config: dict, scratch: str, start: Callable) -> RankTrain:
    """The timed loop (see the module docstring); returns the rank's measures, unverified."""
    rank = dist.get_rank()
    writer, _ = saving.arm_parts(job.arm)
    group = dist.new_group(backend="gloo") if writer is not None else None
    profile = None
    if writer == "msc":
        profile = msc_profile(scratch, "msc-writer", job.round_index, job, cache=False)
    steps, in_flight, checkpoints, sums, losses = [], [], [], [], []
    pending: tuple[Any, float, _Done, int, float, float] | None = None
    paused = 0.0

    def settle(pending) -> float:
        """Waits for the save in flight; records its checkpoint; returns the seconds waited."""
        future, called, done, step, call_s, wait_s = pending
        began = time.perf_counter()
        future.result()
        ended = time.perf_counter()
        durable = (done.at or ended) - called
        checkpoints.append(Checkpoint(step, call_s, wait_s, max(durable, call_s)))
        return ended - began

    # gcsckpt's checkpointer is made before the clock starts, as a job makes it at its start
    # ("process": its checkpoint process running; docs/measurements.md has the start's cost).
    saving.prepare_saver(
        job.arm, job.endpoint, group, f"gs://{job.bucket}/{job.prefix}", _tier_folder(job, scratch)
    )
    release_free_memory()
    dist.barrier()
    rss_start = _tree_rss()
    sampler = ResourceSampler(interval_s=SAMPLE_INTERVAL_S)
    sampler.start()
    try:
        began = time.perf_counter()
        for step in range(1, job.steps + 1):
            step_began = time.perf_counter()
            in_flight.append(pending is not None and not pending[0].done())
            losses.append(train_step(trainer, step, rank, config["vocab_size"]))
            steps.append(time.perf_counter() - step_began)
            if step not in job.checkpoint_steps:
                continue
            wait_s = settle(pending) if pending is not None else 0.0
            pending = None
            called = time.perf_counter()
            state = app_state_dict(trainer.model, trainer.optimizer)
            paused_at = time.perf_counter()
            sums.append(local_checksums(state))  # the state at this step, off the clock
            paused += time.perf_counter() - paused_at
            resumed = time.perf_counter()
            prefix = checkpoint_prefix(job, step)
            folder = _local_folder(job, scratch, step) if writer == LOCALFS else None
            if writer == LOCAL_TIER:
                folder = _tier_folder(job, scratch)
            url = f"gs://{job.bucket}/{prefix}"
            future = start(job.arm, state, url, folder, job.endpoint, group, profile)
            call_s = (paused_at - called) + (time.perf_counter() - resumed)
            if future is None:
                checkpoints.append(Checkpoint(step, call_s, wait_s, call_s))
            else:
                done = _Done()
                future.add_done_callback(done)
                pending = (future, called, done, step, call_s, wait_s)
            del state
        if pending is not None:
            settle(pending)
        wall = time.perf_counter() - began - paused
    finally:
        usage = sampler.stop()
        saving.close_savers()
        if profile is not None:
            profile.close()
    return RankTrain(
        rank=rank,
        wall_s=wall,
        step_s=tuple(steps),
        in_flight=tuple(in_flight),
        checkpoints=tuple(checkpoints),
        state_bytes=expected_bytes(trainer.state_dict),
        cpu_s=usage.cpu_mean_cores * usage.duration_s,
        rss_start_bytes=rss_start,
        rss_peak_bytes=max(usage.memory_peak_bytes, rss_start),
        losses=tuple(losses),
        sums=tuple(sums),
    )


def _verify(job: TrainJob, target: dict, sums: tuple, scratch: str) -> tuple[Verified, ...]:
    """Loads every checkpoint of ``job`` into ``target`` with the stock FileSystemReader and
    compares it with ``sums`` (this rank's, per checkpoint); removes each afterwards."""
    rank = dist.get_rank()
    writer, _ = saving.arm_parts(job.arm)
    copier = os.environ.get("LOCAL_RANK", str(rank)) == "0"
    store = ObjectStore(job.endpoint) if copier and writer != LOCALFS else None
    out = []
    try:
        for step, saved in zip(job.checkpoint_steps, sums, strict=True):
            prefix = checkpoint_prefix(job, step)
            local = writer == LOCALFS
            folder = _local_folder(job, scratch, step) if local else os.path.join(scratch, prefix)
            if store is not None:
                copy_to_disk(store, job.bucket, prefix, folder)
            dist.barrier()
            back = load_back(target, folder, saved)
            dist.barrier()
            out.append(
                Verified(
                    step,
                    back.mismatch_count,
                    back.missing_count,
                    back.committed_bytes,
                    back.expected_bytes,
                    back.mismatched,
                )
            )
            if copier:
                shutil.rmtree(folder, ignore_errors=True)
                if store is not None and rank == 0:
                    empty_prefix(store, job.bucket, prefix)
            dist.barrier()
        if writer == LOCAL_TIER and out:
            out[-1] = _verify_tier(job, target, sums[-1], scratch, out[-1])
            dist.barrier()
            if copier:
                shutil.rmtree(_tier_folder(job, scratch), ignore_errors=True)
    finally:
        if store is not None:
            store.close()
    return tuple(out)


def _verify_tier(job: TrainJob, target: dict, saved: dict, scratch: str, gcs: Verified) -> Verified:
    """The last checkpoint's Verified with this rank's copy in the node-local tier checked too:
    the tier holds that step, its manifest's sizes and CRC-32Cs hold, and torch's
    FileSystemReader loads it equal to ``saved`` (the state's checksums at that step)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    root = parse_root(f"gs://{job.bucket}/{job.prefix}")
    tier = LocalTier(_tier_folder(job, scratch), root, rank, world)
    problem = ""
    if tier.newest() != gcs.step:
        problem = f"the local tier holds step {tier.newest()}, not step {gcs.step}"
    else:
        problem = tier.verify(gcs.step, None)
    if problem:
        return dataclasses.replace(
            gcs, missing_count=gcs.missing_count + 1, mismatched=(*gcs.mismatched, problem)
        )
    back = load_back(target, tier.folder(gcs.step), saved)
    return Verified(
        gcs.step,
        gcs.mismatch_count + back.mismatch_count,
        gcs.missing_count + back.missing_count,
        min(gcs.committed_bytes, back.committed_bytes),
        gcs.expected_bytes,
        tuple([*gcs.mismatched, *(f"local tier: {k}" for k in back.mismatched)][:LISTED_KEYS]),
    )


def _remove(job: TrainJob, scratch: str) -> None:
    """Rank 0 removes every checkpoint of the round (after a failure)."""
    if dist.get_rank() != 0:
        return
    writer, _ = saving.arm_parts(job.arm)
    if writer == LOCAL_TIER:
        shutil.rmtree(_tier_folder(job, scratch), ignore_errors=True)
    for step in job.checkpoint_steps:
        if writer == LOCALFS:
            shutil.rmtree(_local_folder(job, scratch, step), ignore_errors=True)
        elif writer is not None:
            store = ObjectStore(job.endpoint)
            try:
                empty_prefix(store, job.bucket, checkpoint_prefix(job, step))
            finally:
                store.close()


def run_train(job: TrainJob, report: Any = None, start: Callable = saving.start_save) -> RankTrain:
    """One round of ``job`` on this rank (process group initialized; ``TrainJob.entry``): the
    loop, then, with ``job.verify``, every checkpoint loaded back.

    Args:
      job: the round.
      report: the harness's progress callback (unused: one round is a few seconds).
      start: starts one checkpoint (``saving.start_save``'s signature; tests pass others).

    Returns:
      The rank's RankTrain; ``error`` says why when the loop, a save or a load raised.
    """
    rank = dist.get_rank()
    config = model_config(job.scale)
    dims = layout_dims(job.layout, dist.get_world_size())
    mesh = build_mesh(dims)
    scratch = job_scratch_dir()
    trainer = build_trainer(config, dims, mesh, TRAIN_SEED)
    try:
        result = _loop(job, trainer, config, scratch, start)
    except (Exception, CheckpointException) as err:
        _remove(job, scratch)
        return RankTrain(rank, error=f"training loop: {describe_error(err)}")
    if not job.verify or not job.checkpoint_steps:
        return result
    target = app_state_dict(trainer.model, trainer.optimizer)
    try:
        verified = _verify(job, target, result.sums, scratch)
    except (Exception, CheckpointException) as err:
        _remove(job, scratch)
        return RankTrain(rank, error=f"verifying load: {describe_error(err)}")
    return dataclasses.replace(result, verified=verified, sums=())


def run_verify_train(job: VerifyTrainJob, report: Any = None) -> RankTrain:
    """(``VerifyTrainJob.entry``) Loads back the checkpoints a ``TrainJob(verify=False)`` left
    (into a state built with another seed) and compares them with the job's checksums; a
    RankTrain carrying only ``verified`` (or ``error``)."""
    rank = dist.get_rank()
    train = job.train
    config = model_config(train.scale)
    dims = layout_dims(train.layout, dist.get_world_size())
    mesh = build_mesh(dims)
    scratch = job_scratch_dir()
    trainer = build_trainer(config, dims, mesh, VERIFY_SEED)
    target = app_state_dict(trainer.model, trainer.optimizer)
    try:
        verified = _verify(train, target, job.sums[rank], scratch)
    except (Exception, CheckpointException) as err:
        _remove(train, scratch)
        return RankTrain(rank, error=f"verifying load: {describe_error(err)}")
    return RankTrain(rank, verified=verified)
