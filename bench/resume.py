"""Cold restart: gcsckpt from GCS, gcsckpt from the node-local tier, and the stock
FsspecReader over gcsfs, on the local GCS endpoint.

``tools/bazel run //bench:resume`` starts a LocalGCS, saves the scaled OLMoE (with its AdamW
state, FSDP2 over 2 gloo ranks) as ``step-100`` through ``GCSCheckpointer(local_dir=)`` (the
objects in GCS and each rank's copy in a node-local tier folder on tmpfs), plants an interrupted
``step-200`` (a data object, no ``.metadata``), then restarts from scratch once per arm and
round, arms interleaved: spawned processes -> model built -> newest complete step listed and
loaded (``gcsckpt-local``: ``GCSCheckpointer(local_dir=).load``, from the node's copy) -> first
step done. It prints one row per restart with each phase's seconds and source, the arms' means,
gcsckpt's speed-up over stock and the local tier's over both, and the load average. Flags:
``--ranks``, ``--rounds``, ``--model`` (e.g. ``olmoe_1b_7b_0924:tiny``), ``--latency_ms`` /
``--stream_mbps`` (a modelled endpoint), ``--readers`` (a subset of the arms), ``--local_dir``
(the tier's parent folder; default /dev/shm where present), ``--out`` (rows as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from ckptbench.resume import RestartSpec, format_table, measure_cold_restart, prepare_checkpoint
from gcsckpt.dcp.local_tier import default_local_dir
from gcsckpt.testing import LocalGCS

BUCKET = "resume-bench"


def _progress(row: dict) -> None:
    print(f"{row['reader']} round {row['round']}: {row['total_s']:.1f} s to first step", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="olmoe_1b_7b_0924:scaled")
    parser.add_argument("--ranks", type=int, default=2, help="gloo CPU ranks (2-4 here)")
    parser.add_argument("--rounds", type=int, default=2, help="restarts per arm")
    parser.add_argument("--latency_ms", type=float, default=0.0)
    parser.add_argument("--stream_mbps", type=float, default=None)
    parser.add_argument("--out", default="", help="write the rows here as JSON")
    parser.add_argument(
        "--readers",
        default="",
        help="comma-separated arms (gcsckpt, gcsckpt-local, fsspec); default: all. Stock "
        "fsspec takes ~20 min on the modelled endpoint",
    )
    parser.add_argument(
        "--local_dir",
        default=os.path.dirname(default_local_dir()),
        help="parent of the node-local tier's folder (default: /dev/shm where present)",
    )
    args = parser.parse_args()
    spec = RestartSpec(model=args.model, world_size=args.ranks)
    tier = tempfile.mkdtemp(prefix="gcsckpt-resume-tier-", dir=args.local_dir)
    try:
        with LocalGCS(latency_ms=args.latency_ms, stream_mbps=args.stream_mbps) as gcs:
            gcs.create_bucket(BUCKET)
            base = f"gs://{BUCKET}/run"
            started = time.perf_counter()
            expected = prepare_checkpoint(
                spec, gcs.endpoint, base, step=100, interrupted=200, local_dir=tier
            )
            print(f"saved {base}/step-100 in {time.perf_counter() - started:.1f} s", flush=True)
            rows = measure_cold_restart(
                gcs.endpoint,
                base,
                spec,
                rounds=args.rounds,
                expected=expected,
                on_row=_progress,
                local_dir=tier,
                readers=tuple(args.readers.split(",")) if args.readers else None,
            )
    finally:
        shutil.rmtree(tier, ignore_errors=True)
    print(
        f"{spec.model}, fsdp over {spec.world_size} gloo ranks, {rows[0]['tensor_bytes']:,}"
        f" tensor bytes; first-step loss {expected[0].loss_hex}"
    )
    print(format_table(rows))
    print("load average (1/5/15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
