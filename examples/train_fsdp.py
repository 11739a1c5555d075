"""A small FSDP2 training job that checkpoints to GCS with gcsckpt, asynchronously, and resumes.

Every rank trains a 3-layer MLP sharded with FSDP2 (`fully_shard`, Shard(0) over all ranks) on
gloo CPU ranks. Checkpoints go through `GCSCheckpointer("thread", root=..., keep_latest=...,
local_dir=...)`: every `--save_every` steps `ckpt.save(state, step=N)` copies the state and
returns while the upload to `root/step-N` runs (one save in flight at a time, on its own gloo
group); old steps are deleted in the background (`--keep_latest`) and each rank keeps its newest
checkpoint on the node too (`--local_tier`). On start `ckpt.load(state)` resumes from the newest
complete step (from the node's copy when it is that step and verifies, else from GCS); a save
that was interrupted has data objects but no `.metadata` and is skipped. Batches are a function of
(step, rank) and the model, AdamW state and step counter are all in the checkpoint, so a resumed
run prints the same loss values, bit for bit, as one that was never interrupted.

Run it (4 ranks; without --bucket it starts a local GCS endpoint whose objects persist in
--local_dir, so a second run resumes):

    torchrun --standalone --nproc-per-node=4 examples/train_fsdp.py --steps 12 --save_every 4
    tools/bazel run //examples:train_fsdp -- --steps 12    # launches torchrun itself
    torchrun ... examples/train_fsdp.py --bucket gs://my-bucket/runs/mlp   # a real bucket (ADC)
    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 \
        examples/train_fsdp.py --bucket gs://my-bucket/runs/mlp   # on each of two nodes

Rank 0 prints one line per event: `step N loss <float> (<hex>)`, `save step-N: ...`,
`resume: ...`, `done: ...`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from gcsckpt.dcp import GCSCheckpointer, GCSStorageWriter

LOCAL_BUCKET = "train-fsdp"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=12, help="train until this step")
    parser.add_argument("--save_every", type=int, default=4, help="async save every K steps")
    parser.add_argument("--bucket", default="", help="gs://bucket/prefix; empty: local endpoint")
    parser.add_argument(
        "--local_dir",
        default=str(Path.home() / ".cache/gcsckpt/train_fsdp"),
        help="without --bucket: where the local endpoint keeps its objects (reused on restart)",
    )
    parser.add_argument("--prefix", default="run", help="without --bucket: checkpoint prefix")
    # Not --nproc: torchrun's parser would take it for an abbreviation of its --nproc-per-node.
    parser.add_argument("--ranks", type=int, default=4, help="ranks when not started by torchrun")
    parser.add_argument(
        "--compare_sync_save",
        action="store_true",
        help="at the end, time one synchronous dcp.save of the final state (vs the async blocking)",
    )
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--keep_latest", type=int, default=3, help="complete steps kept in GCS")
    parser.add_argument(
        "--local_tier",
        default="auto",
        help="node-local copies: a folder, 'off', or 'auto' (<local_dir>/tier on the local"
        " endpoint, /dev/shm/gcsckpt with --bucket)",
    )
    return parser.parse_args(argv)


def log(*parts) -> None:
    if dist.get_rank() == 0:
        print(*parts, flush=True)


class Job:
    """The model, optimizer and data of the run (identical on every start)."""

    def __init__(self, width: int) -> None:
        self.mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 8)
        )
        for layer in self.model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=self.mesh)
        fully_shard(self.model, mesh=self.mesh)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        self.step = 0  # steps done

    def train_step(self) -> float:
        """One step on this rank's batch of step `self.step + 1`; returns the mean loss."""
        gen = torch.Generator().manual_seed((self.step + 1) * 1000 + dist.get_rank())
        x = torch.randn(32, 64, generator=gen)
        y = torch.sin(x[:, :8] * 2.0)
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optim.step()
        self.optim.zero_grad()
        self.step += 1
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        return (mean / dist.get_world_size()).item()

    def state_dict(self) -> dict:
        model_sd, optim_sd = get_state_dict(self.model, self.optim)
        return {"model": model_sd, "optim": optim_sd, "trainer": {"step": self.step}}


def start_local_endpoint(local_dir: str):
    """Rank 0: LocalGCS keeping objects in local_dir; returns it (None on other ranks)."""
    from gcsckpt.testing import LocalGCS

    gcs = LocalGCS(
        data_dir=os.path.join(local_dir, "objects"), log_dir=os.path.join(local_dir, "logs")
    )
    gcs.start()
    gcs.create_bucket(LOCAL_BUCKET)
    return gcs


def train(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    torch.set_num_threads(1)
    rank = dist.get_rank()
    gcs = None
    if args.bucket:
        base, endpoint = args.bucket.rstrip("/"), None
    else:
        gcs = start_local_endpoint(args.local_dir) if rank == 0 else None
        shared = [gcs.endpoint if gcs else None]
        dist.broadcast_object_list(shared, src=0)
        base, endpoint = f"gs://{LOCAL_BUCKET}/{args.prefix}", shared[0]
    try:
        job = Job(args.width)
        tier = args.local_tier
        if tier == "auto":
            tier = True if args.bucket else os.path.join(args.local_dir, "tier")
        ckpt = GCSCheckpointer(
            "thread",
            root=base,
            keep_latest=args.keep_latest,
            local_dir=None if tier == "off" else tier,
            endpoint=endpoint,
        )
        # Rank 0 lists (for the message); ckpt.load lists again and every rank loads one step.
        found = [[i.step for i in ckpt.step_infos() if not i.complete] if rank == 0 else None]
        dist.broadcast_object_list(found, src=0)
        started = time.perf_counter()
        state = job.state_dict()
        loaded = ckpt.load(state)
        if loaded is not None:
            set_state_dict(
                job.model,
                job.optim,
                model_state_dict=state["model"],
                optim_state_dict=state["optim"],
            )
            job.step = state["trainer"]["step"]
            skipped = [s for s in found[0] if s > loaded]
            skipped += [s for s, _ in ckpt.last_load["skipped"]]
            log(
                f"resume: {base}/step-{loaded} (step {job.step}) loaded from"
                f" {ckpt.last_load['source']} in {time.perf_counter() - started:.2f} s;"
                f" skipped incomplete: {', '.join(f'step-{s}' for s in sorted(skipped)) or 'none'}"
            )
        else:
            log(f"resume: no complete checkpoint under {base}; starting at step 0")

        pending: PendingSave | None = None
        blocked_s = []
        while job.step < args.steps:
            loss = job.train_step()
            log(f"step {job.step} loss {loss:.9f} ({loss.hex()})")
            if job.step % args.save_every == 0:
                if pending is not None:
                    pending.wait()  # one save in flight
                pending = PendingSave(job, ckpt)
                blocked_s.append(pending.blocked_s)
        if pending is not None:
            pending.wait()
        ckpt.close()  # waits for the last save, its local copy and retention
        summary = f"done: {job.step} steps"
        if blocked_s:
            mean_ms = 1e3 * sum(blocked_s) / len(blocked_s)
            summary += f"; async_save blocked the loop {mean_ms:.1f} ms per save (mean)"
        if args.compare_sync_save:
            started = time.perf_counter()
            dcp.save(
                job.state_dict(),
                storage_writer=GCSStorageWriter(
                    f"{base}/sync-step-{job.step}", endpoint=endpoint, overwrite=True
                ),
            )
            sync_ms = 1e3 * (time.perf_counter() - started)
            summary += f"; a synchronous dcp.save of the same state blocked {sync_ms:.1f} ms"
        log(summary)
        dist.barrier()
    finally:
        dist.destroy_process_group()
        if gcs is not None:
            gcs.stop()


class PendingSave:
    """One `ckpt.save` in flight: its future, and how long the call blocked the loop."""

    def __init__(self, job: Job, ckpt: GCSCheckpointer) -> None:
        self.name = f"step-{job.step}"
        self._reported = threading.Event()
        started = time.perf_counter()
        # An interrupted save of this step (no .metadata) is simply replaced, while a complete
        # checkpoint is never clobbered.
        self.future = ckpt.save(job.state_dict(), step=job.step)
        self.blocked_s = time.perf_counter() - started
        blocked_ms = 1e3 * self.blocked_s
        log(f"save {self.name}: async_save returned after {blocked_ms:.1f} ms; training continues")
        self.future.add_done_callback(lambda f: self._report(f, started))

    def _report(self, future, started: float) -> None:  # runs in the upload thread
        if future.exception() is None:
            after_s = time.perf_counter() - started
            log(f"save {self.name}: .metadata committed {after_s:.2f} s after the call")
        self._reported.set()

    def wait(self) -> None:
        """Blocks until the save is committed (its line printed); raises what the save raised."""
        self.future.result()
        self._reported.wait()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "LOCAL_RANK" not in os.environ:  # not under torchrun: launch it, args unchanged
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.ranks}",
        ]
        raise SystemExit(subprocess.call(command + [os.path.abspath(__file__)] + sys.argv[1:]))
    train(args)


if __name__ == "__main__":
    main()
