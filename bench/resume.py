"""Cold restart, gcsckpt against the stock FsspecReader over gcsfs, on the local GCS endpoint.

``tools/bazel run //bench:resume`` starts a LocalGCS, saves the scaled OLMoE (with its AdamW
state, FSDP2 over 2 gloo ranks) as ``step-100`` and plants an interrupted ``step-200`` (a data
object, no ``.metadata``), then restarts from scratch once per arm and round, arms interleaved:
spawned processes -> model built -> newest complete step listed and loaded -> first step done.
It prints one row per restart with each phase's seconds, the arms' means and gcsckpt's speed-up,
and the load average. Flags: ``--ranks``, ``--rounds``, ``--model`` (e.g.
``olmoe_1b_7b_0924:tiny``), ``--latency_ms`` / ``--stream_mbps`` (a modelled endpoint),
``--out`` (rows as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from ckptbench.resume import RestartSpec, format_table, measure_cold_restart, prepare_checkpoint
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
    args = parser.parse_args()
    spec = RestartSpec(model=args.model, world_size=args.ranks)
    with LocalGCS(latency_ms=args.latency_ms, stream_mbps=args.stream_mbps) as gcs:
        gcs.create_bucket(BUCKET)
        base = f"gs://{BUCKET}/run"
        started = time.perf_counter()
        expected = prepare_checkpoint(spec, gcs.endpoint, base, step=100, interrupted=200)
        print(f"saved {base}/step-100 in {time.perf_counter() - started:.1f} s", flush=True)
        rows = measure_cold_restart(
            gcs.endpoint, base, spec, rounds=args.rounds, expected=expected, on_row=_progress
        )
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
