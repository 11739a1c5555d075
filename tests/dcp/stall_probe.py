"""Hand-run probe (not a test): training time a checkpoint costs, per save mode, on gloo ranks.

Each arm runs in fresh ranks: a fixed loop of `--steps` steps (matmuls, then an in-place update
of every state tensor, then a small all_reduce), a warm-up save before the loop, a checkpoint
every `--every` steps, every checkpoint loaded back and compared with the state at its step.
Prints per arm: training time lost per checkpoint ((loop wall - control wall) / checkpoints),
time blocked in the save call (plus the wait for the previous save), CPU-seconds per GB saved
above the control (the rank and its children), all verified. Run from the repository root, with
the extension in the package (tools/bazel build //python:gcsckpt/_gcsio.so, then copy
bazel-bin/python/gcsckpt/_gcsio.so into python/gcsckpt/):

    PYTHONPATH=python:tests/dcp /opt/gcsckpt/venv/bin/python \
        tests/dcp/stall_probe.py --arms control,localfs,sync:,thread:,thread+,process:,process+
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import tempfile
import time

import psutil
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.dcp import GCSCheckpointer, GCSSavePlanner, GCSStorageReader, GCSStorageWriter
from gcsckpt.testing import LocalGCS

BUCKET = "stall"
_BIG, _SMALL = 60, 40  # 60 x 2 MiB + 40 x 4 KiB float32 tensors: ~126 MB a rank


def _base(rank: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(rank)
    state = {f"r{rank}.big{i}": torch.randn(512, 1024, generator=gen) for i in range(_BIG)}
    state.update({f"r{rank}.small{i}": torch.randn(1024, generator=gen) for i in range(_SMALL)})
    return state


def _expected(rank: int, step: int) -> dict[str, torch.Tensor]:
    state = _base(rank)
    for _ in range(step):
        for t in state.values():
            t.add_(1.0)
    return state


def _cpu_s() -> float:
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _saver(arm: str, endpoint: str, run: str):
    """(save(state, step) -> future or None, close())."""
    if arm == "control":
        return None, lambda: None
    if arm == "localfs":
        root = tempfile.mkdtemp(dir="/dev/shm")

        def save(state, step):
            dcp.save(state, storage_writer=dcp.FileSystemWriter(f"{root}/{step}"))

        return save, lambda: shutil.rmtree(root, ignore_errors=True)
    url = f"gs://{BUCKET}/{run}"
    if arm.endswith("+"):  # the recommended set-up, gcsckpt.dcp.GCSCheckpointer
        ckpt = GCSCheckpointer(arm[:-1], endpoint=endpoint)
        return (lambda state, step: ckpt.save(state, f"{url}/{step}")), ckpt.close
    # "MODE:FLAGS", one step at a time: s = staging buffers reused (one DefaultStager),
    # p = GCSSavePlanner (plan cache), e = clients kept (else a token provider that pickles
    # differently each save makes new ones, as before), n = background priority.
    mode, _, flags = arm.partition(":")
    group = dist.new_group(backend="gloo")
    stager = None
    if "s" in flags:
        stager = DefaultStager(StagingOptions(False, mode == "process", False, False))
    planner = GCSSavePlanner() if "p" in flags else None
    kind = AsyncCheckpointerType.PROCESS if mode == "process" else AsyncCheckpointerType.THREAD

    def save(state, step):
        writer = GCSStorageWriter(
            f"{url}/{step}",
            endpoint=endpoint,
            token_provider=None if "e" in flags else functools.partial(str, f"{run}/{step}"),
            background_nice=10 if "n" in flags else None,
        )
        if mode == "sync":
            dcp.save(state, storage_writer=writer, planner=planner)
            return None
        return dcp.async_save(
            state,
            storage_writer=writer,
            planner=planner,
            process_group=group,
            async_checkpointer_type=kind,
            async_stager=stager,
        )

    return save, (lambda: stager.close()) if stager else (lambda: None)


def rank_arm(rank: int, arm: str, endpoint: str, run: str, steps: int, every: int) -> dict:
    torch.set_num_threads(1)
    state = _base(rank)
    nbytes = sum(t.nbytes for t in state.values())
    a = torch.randn(512, 512)
    save, close = _saver(arm, endpoint, run)
    saved: list[int] = []
    if save is not None:  # warm-up: start-up costs (process spawn, connections) left out
        future = save(state, 0)
        if future is not None:
            future.result()
        saved.append(0)
    dist.barrier()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    blocked, future = [], None
    for step in range(1, steps + 1):
        for _ in range(24):
            a = torch.tanh(a @ a) * 0.5
        for t in state.values():
            t.add_(1.0)
        dist.all_reduce(torch.ones(4))
        if save is not None and step % every == 0:
            b0 = time.perf_counter()
            if future is not None:
                future.result()
            future = save(state, step)
            blocked.append(time.perf_counter() - b0)
            saved.append(step)
    if future is not None:
        future.result()
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    close()
    dist.barrier()
    bad = []
    for step in saved[1:]:
        if arm == "localfs":
            continue
        got = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(
            got, storage_reader=GCSStorageReader(f"gs://{BUCKET}/{run}/{step}", endpoint=endpoint)
        )
        want = _expected(rank, step)
        bad += [f"{step}:{k}" for k in want if not torch.equal(got[k], want[k])]
    return {
        "wall": wall,
        "cpu": cpu,
        "blocked": blocked,
        "bad": bad,
        "bytes": nbytes,
        "saves": len(saved) - 1,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--arms", default="control,localfs,sync:,thread:,process:,sync+,thread+,process+"
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--every", type=int, default=6)
    args = p.parse_args()
    arms = args.arms.split(",")
    import stall_probe  # the ranks import the rank step by its module's name

    rows: dict[str, list] = {a: [] for a in arms}
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        for r in range(args.rounds):
            for arm in arms:
                out = run_ranks(
                    stall_probe.rank_arm,
                    2,
                    arm,
                    gcs.endpoint,
                    f"{arm.replace(':', '_').replace('+', 'plus')}-{r}",
                    args.steps,
                    args.every,
                    timeout_s=300.0,
                )
                rows[arm].append(out)
                print(arm, r, json.dumps(out[0])[:300], flush=True)
    control = [max(o["wall"] for o in out) for out in rows.get("control", [])]
    ctrl_cpu = [sum(o["cpu"] for o in out) for out in rows.get("control", [])]
    print(f"load average {os.getloadavg()}")
    print(
        "| arm | lost per checkpoint (s) | blocked per save (s) | CPU-s per GB over control "
        "| verified |"
    )
    print("|---|---|---|---|---|")
    for arm in arms:
        if arm == "control":
            continue
        lost, blk, cpu, ok = [], [], [], True
        for r, out in enumerate(rows[arm]):
            saves = out[0]["saves"]
            lost.append((max(o["wall"] for o in out) - control[r]) / saves)
            blk += [statistics.mean(o["blocked"]) for o in out]
            gb = sum(o["bytes"] for o in out) * saves / 1e9
            cpu.append((sum(o["cpu"] for o in out) - ctrl_cpu[r]) / gb)
            ok = ok and not any(o["bad"] for o in out)
        print(
            f"| {arm} | {min(lost):.2f}-{max(lost):.2f} | {min(blk):.2f}-{max(blk):.2f} | "
            f"{min(cpu):.2f}-{max(cpu):.2f} | {ok} |"
        )


if __name__ == "__main__":
    main()
