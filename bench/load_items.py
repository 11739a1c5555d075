"""bazel run //bench:load_items -- [--experts=64] [--layers=4] [--rounds=5] [--planner=gcsckpt]

One rank's per-item load cost, one process, LocalGCS: the fsdp optimizer shape of the scaled
OLMoE case (AdamW flattened: one BYTE_IO `param_groups` item per parameter and key, plus the
parameters' and moments' tensors) at small dimensions, so the load is item-bound, not byte-bound.
With the defaults (64 experts, 4 layers, hidden 64) a rank reads 12,105 items, 8,877 of them
BYTE_IO: the item counts of one rank of the main job's fsdp case at ~1/30 of its bytes.

Saves once with GCSStorageWriter (block checksums), then loads `--rounds` times with
GCSStorageReader (verify on) and `--planner` (gcsckpt: GCSLoadPlanner; torch: DefaultLoadPlanner)
into a state seeded otherwise, checking after the first load that every value equals the
saved one. Prints, for the round with the least CPU: process CPU seconds (all threads, the
range reader's included) in µs per ReadItem and CPU-s per GB fetched, and the CPU of each step
(`read_metadata`, the planner's `set_up_planner` and `create_local_plan`, `read_data` and, inside
it, `plan_item_ranges`, `run_windows`), with the load's ranges and GETs.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from absl import app, flags
from torch.distributed.checkpoint import default_planner

from ckptbench.workloads.models.configs import config_dict
from ckptbench.workloads.models.state import iter_leaves
from ckptbench.workloads.parallel.app_state import build_app_state
from ckptbench.workloads.parallel.dims import ParallelDims
from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp import reader as reader_module
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.testing import LocalGCS

FLAGS = flags.FLAGS
flags.DEFINE_integer("experts", 64, "Experts per MoE layer (the scaled OLMoE's 64).")
flags.DEFINE_integer("layers", 4, "Decoder layers (the scaled OLMoE's 4).")
flags.DEFINE_integer("rounds", 5, "Timed loads.")
flags.DEFINE_enum("planner", "gcsckpt", ["gcsckpt", "torch"], "Load planner.")

BUCKET = "load-items"
_PLANNERS = {"gcsckpt": GCSLoadPlanner, "torch": default_planner.DefaultLoadPlanner}


def _model_config(folder: str) -> str:
    """A config.json: the tiny OLMoE's dimensions with the scaled one's experts and layers."""
    config = config_dict("olmoe_1b_7b_0924:tiny")
    config.update(num_experts=FLAGS.experts, num_hidden_layers=FLAGS.layers, num_experts_per_tok=8)
    path = Path(folder) / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def _timed_steps(cpu: dict, planner: type) -> None:
    """Wraps each step so its process CPU seconds add up in `cpu` (one level)."""
    steps = [
        (reader_module.GCSStorageReader, "read_metadata"),
        (planner, "set_up_planner"),
        (planner, "create_local_plan"),
        (reader_module.GCSStorageReader, "read_data"),
        (reader_module, "plan_item_ranges"),
        (reader_module, "run_windows"),
    ]
    for owner, name in steps:
        step = getattr(owner, name)

        @functools.wraps(step)
        def timed(*args, _step=step, _name=name, **kwargs):
            began = time.process_time()
            try:
                return _step(*args, **kwargs)
            finally:
                cpu[_name] += time.process_time() - began

        setattr(owner, name, timed)


def _same(loaded: dict, saved: dict) -> None:
    want, got = dict(iter_leaves(saved)), dict(iter_leaves(loaded))
    if want.keys() != got.keys():
        raise SystemExit("loaded state has other keys than the saved one")
    for key, value in want.items():
        equal = (
            torch.equal(got[key].full_tensor(), value.full_tensor())
            if hasattr(value, "full_tensor")
            else torch.equal(got[key], value)
            if isinstance(value, torch.Tensor)
            else got[key] == value
        )
        if not equal:
            raise SystemExit(f"{key}: loaded value differs from the saved one")


def main(argv) -> None:
    del argv
    dims = ParallelDims(strategy="fsdp", world_size=1, dp_shard=1)
    cpu: dict[str, float] = defaultdict(float)
    with tempfile.TemporaryDirectory() as folder, LocalGCS() as gcs:
        spec = _model_config(folder)
        gcs.create_bucket(BUCKET)
        saved = build_app_state(spec, dims, None, seed=1, device="cpu")
        url = f"gs://{BUCKET}/ckpt"
        dcp.save(saved, storage_writer=GCSStorageWriter(url, endpoint=gcs.endpoint), no_dist=True)
        target = build_app_state(spec, dims, None, seed=2, device="cpu")
        _timed_steps(cpu, _PLANNERS[FLAGS.planner])
        best = None
        for round_ in range(FLAGS.rounds):
            cpu.clear()
            planner = _PLANNERS[FLAGS.planner]()
            reader = GCSStorageReader(url, endpoint=gcs.endpoint)
            began = time.process_time()
            dcp.load(target, storage_reader=reader, planner=planner, no_dist=True)
            total = time.process_time() - began
            if round_ == 0:
                _same(target, saved)
            if best is None or total < best[0]:
                best = (total, dict(cpu), reader.load_stats)
    total, steps, stats = best
    items, gb = stats.read_items, stats.bytes_fetched / 1e9
    print(
        f"planner {FLAGS.planner}: {items} ReadItems ({stats.bytes_items} BYTE_IO), "
        f"{stats.bytes_fetched / 1e6:.1f} MB fetched ({stats.bytes_verified / 1e6:.1f} MB "
        f"verified), {stats.ranges} ranges, {stats.requests} GETs, .metadata "
        f"{stats.metadata_bytes / 1e6:.2f} MB; least CPU of {FLAGS.rounds} loads:"
    )
    print(f"  {'whole load':20s} {total * 1e3:8.1f} ms CPU {total / items * 1e6:7.2f} us/item")
    for name, seconds in steps.items():
        print(f"  {name:20s} {seconds * 1e3:8.1f} ms CPU {seconds / items * 1e6:7.2f} us/item")
    print(f"  CPU-s per GB fetched: {total / gb:.1f}")


if __name__ == "__main__":
    app.run(main)
