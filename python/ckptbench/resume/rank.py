"""What one fresh rank process does: the save that leaves a checkpoint, and a cold restart.

A restart rank, started by ``spawn`` (a new interpreter: imports, then the process group),
builds the model on its shards as a training job does (``normal_`` init, a fresh AdamW), lists
``<base>/step-*`` with its arm's client, loads the newest complete step with its arm's reader
(``dcp.load`` then ``set_state_dict``, as a training job resumes), and runs one training step
(forward, backward, AdamW) on a batch fixed by (step, rank). A barrier ends each phase, so a
phase lasts until its slowest rank is done. The step's mean loss (float.hex) and a digest of the
rank's whole state after it (parameters, AdamW moments, steps, param groups) are those of the
saved state: every arm and round must give the same ones.

The ``gcsckpt-local`` arm restarts as a job using the manager does: ``GCSCheckpointer(root=,
local_dir=).load(state)``, which lists the run (rank 0), checks every rank's node-local copy
(manifest sizes and CRC-32Cs, the GCS commit it copies) and loads it from the node when all
ranks have a whole one, else from GCS. Its find phase is the checkpointer's set-up; the listing
is inside its load phase. Its rows record where the load came from (``source``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

from ckptbench.resume.listing import list_names, split_url
from ckptbench.resume.restart_jobs import RestartJob, SaveStateJob
from ckptbench.worker import arms
from ckptbench.worker.case_jobs import SAVE_SEED
from ckptbench.worker.counting_planner import counting_planner_for
from ckptbench.workloads.models.builder import build_meta_model
from ckptbench.workloads.models.state import (
    app_state_dict,
    expected_bytes,
    local_checksums,
    materialize,
)
from ckptbench.workloads.parallel.app_state import RankState, build_rank_state
from ckptbench.workloads.parallel.dims import ParallelDims
from ckptbench.workloads.parallel.layout import apply_layout
from ckptbench.workloads.parallel.mesh import build_mesh
from gcsckpt.dcp.steps import committed_steps

BATCH, SEQUENCE = 2, 32  # tokens per rank of the first step
LOCAL_ARM = "gcsckpt-local"  # GCSCheckpointer(local_dir=...).load: the node-local tier
# transformers' causal LM returns a view; one step does no in-place op on it.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


@dataclasses.dataclass(frozen=True)
class RankRestart:
    """One rank's cold restart, as ``time.time()`` stamps (seconds) after each phase's barrier.

    Attributes:
      entered: the rank's code runs (interpreter up, imports done, process group joined).
      built / found / loaded / stepped: model and optimizer built; newest complete step listed;
        its checkpoint loaded into them; the first step done.
      step: the step loaded (None: no complete checkpoint, nothing loaded).
      first: the first step's loss and this rank's state digest after it.
      committed_bytes / expected_bytes: tensor bytes the planner committed, and the rank's state
        holds (equal when every tensor was loaded); committed_bytes is None for the local-tier
        arm (GCSCheckpointer.load takes no planner: the state digest checks every tensor).
      source: where the checkpoint came from: "gcs", or "local" / "gcs" as
        GCSCheckpointer.last_load says for the local-tier arm.
    """

    entered: float
    built: float
    found: float
    loaded: float
    stepped: float
    step: int | None
    first: FirstStep
    committed_bytes: int | None
    expected_bytes: int
    source: str = "gcs"


@dataclasses.dataclass(frozen=True)
class FirstStep:
    """What one training step gives: its loss (mean over ranks, ``float.hex``) and this rank's
    state digest after it (sha256 hex over ``local_checksums`` of model + optimizer)."""

    loss_hex: str
    digest: str


def _dims(world_size: int) -> ParallelDims:
    return ParallelDims("fsdp", world_size, dp_shard=world_size)


def fresh_state(model: str) -> RankState:
    """The model under FSDP2 over every rank, its shards initialized with ``normal_`` (not the
    benchmark's seeded values: a job's own init, which its checkpoint replaces), and an AdamW
    whose state ``get_state_dict`` creates (zeros)."""
    dims = _dims(dist.get_world_size())
    built = build_meta_model(model)
    layout = apply_layout(built, dims, build_mesh(dims, "cpu"))
    materialize(built, "cpu", None, torch.Generator().manual_seed(dist.get_rank()))
    optimizer = torch.optim.AdamW(built.parameters())
    return RankState(built, optimizer, layout, app_state_dict(built, optimizer))


def train_step(state: RankState, step: int) -> str:
    """One step on this rank's batch of `step` (tokens seeded by step and rank): cross-entropy
    of the causal LM, backward, AdamW. Returns the loss averaged over ranks, ``float.hex``."""
    vocab = state.model.config.vocab_size
    gen = torch.Generator().manual_seed(step * 1000 + dist.get_rank())
    tokens = torch.randint(0, vocab, (BATCH, SEQUENCE), generator=gen)
    loss = state.model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    state.optimizer.step()
    state.optimizer.zero_grad()
    mean = loss.detach().float().clone()
    dist.all_reduce(mean)
    return (mean / dist.get_world_size()).item().hex()


def state_digest(state: RankState) -> str:
    """sha256 hex over ``local_checksums`` of this rank's model + optimizer state."""
    sums = local_checksums(app_state_dict(state.model, state.optimizer))
    return hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest()


def save_rank(job: SaveStateJob, report: Any = None) -> FirstStep:
    """(``SaveStateJob.entry``) Saves the state seeded with SAVE_SEED (``build_rank_state``:
    parameters and AdamW state) to ``job.url`` (GCSStorageWriter, overwrite on), then runs the
    first step on it: what a restart from that url must give. With ``job.local_dir``, the save
    goes through ``GCSCheckpointer("sync", root=<url's run>, local_dir=...).save(state,
    step=N)``: the same objects in GCS, and each rank's copy in the node-local tier."""
    del report
    from gcsckpt.dcp import GCSCheckpointer, GCSStorageWriter

    model, url, endpoint, local_dir = job.model, job.url, job.endpoint, job.local_dir

    dims = _dims(dist.get_world_size())
    mesh = build_mesh(dims, "cpu")
    state = build_rank_state(model, dims, mesh, seed=SAVE_SEED, device="cpu")
    if local_dir is None:
        writer = GCSStorageWriter(url, endpoint=endpoint, overwrite=True)
        dcp.save(state.state_dict, storage_writer=writer)
    else:
        root = url.rstrip("/").rsplit("/step-", 1)[0]
        ckpt = GCSCheckpointer(
            "sync", root=root, local_dir=local_dir, endpoint=endpoint, overwrite=True
        )
        ckpt.save(state.state_dict, step=_step_of(url))
        ckpt.close()
    loss_hex = train_step(state, _step_of(url) + 1)
    return FirstStep(loss_hex, state_digest(state))


def _step_of(url: str) -> int:
    return int(url.rstrip("/").rsplit("step-", 1)[1])


def _now() -> float:
    dist.barrier()
    return time.time()


def restart_rank(job: RestartJob, report: Any = None) -> RankRestart:
    """(``RestartJob.entry``) One rank of a cold restart with arm ``job.reader`` (``gcsckpt``,
    ``fsspec``, or ``gcsckpt-local`` with the node-local tier in ``job.local_dir``) from the
    newest complete ``step-N`` under ``job.base_url``.

    Raises:
      what the listing or ``dcp.load`` raises (e.g. CheckpointException).
    """
    del report
    reader, model, base_url = job.reader, job.model, job.base_url
    endpoint, local_dir = job.endpoint, job.local_dir
    entered = _now()
    state = fresh_state(model)
    built = _now()
    if reader == LOCAL_ARM:
        return _restart_with_manager(state, entered, built, base_url, endpoint, local_dir)
    bucket, prefix = split_url(base_url)
    box = [None]
    if dist.get_rank() == 0:  # one listing per job, as a launcher's rank 0 would do it
        box[0] = committed_steps(list_names(reader, bucket, prefix, endpoint), prefix)[0]
    dist.broadcast_object_list(box, src=0)
    step = box[0][-1] if box[0] else None
    found = _now()
    planner = counting_planner_for(reader)
    if step is not None:
        folder = f"{prefix}/step-{step}" if prefix else f"step-{step}"
        storage_reader = arms.make_reader(reader, bucket, folder, endpoint)
        dcp.load(state.state_dict, storage_reader=storage_reader, planner=planner)
        _apply(state)
    return _first_step(state, (entered, built, found), step, planner.committed_tensor_bytes)


def _first_step(
    state: RankState,
    stamps: tuple[float, float, float],
    step: int | None,
    committed_bytes: int | None,
    source: str = "gcs",
) -> RankRestart:
    """Ends the load phase (barrier), runs the first step on the loaded state and returns the
    rank's RankRestart; ``stamps``: (entered, built, found)."""
    loaded = _now()
    loss_hex = train_step(state, (step or 0) + 1)
    stepped = _now()
    return RankRestart(
        *stamps,
        loaded=loaded,
        stepped=stepped,
        step=step,
        first=FirstStep(loss_hex, state_digest(state)),
        committed_bytes=committed_bytes,
        expected_bytes=expected_bytes(state.state_dict),
        source=source,
    )


def _apply(state: RankState) -> None:
    """Puts the loaded state dict into the model and optimizer, as a training job resumes."""
    set_state_dict(
        state.model,
        state.optimizer,
        model_state_dict=state.state_dict["model"],
        optim_state_dict=state.state_dict["optim"],
        options=StateDictOptions(flatten_optimizer_state_dict=True),  # as app_state_dict
    )


def _restart_with_manager(
    state: RankState,
    entered: float,
    built: float,
    base_url: str,
    endpoint: str | None,
    local_dir: str | None,
) -> RankRestart:
    """The local-tier arm's find, load and first step (see the module doc)."""
    from gcsckpt.dcp import GCSCheckpointer

    if local_dir is None:
        raise ValueError(f"the {LOCAL_ARM} arm needs local_dir")
    ckpt = GCSCheckpointer("sync", root=base_url, local_dir=local_dir, endpoint=endpoint)
    found = _now()
    step = ckpt.load(state.state_dict)
    source = ckpt.last_load.get("source") or "none"
    ckpt.close()
    if step is not None:
        _apply(state)
    return _first_step(state, (entered, built, found), step, None, source)
