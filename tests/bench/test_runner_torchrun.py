"""The benchmark program under torchrun: 2 CPU ranks join by env:// and run the same jobs.

Every rank walks the cases; rank 0 checks the stored checkpoint, writes the manifest and
publishes. Tiny OLMoE ep on a LocalGCS bucket given with --bucket and STORAGE_EMULATOR_HOST.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gcsckpt.testing import LocalGCS

PROGRAM = os.path.join("bench", "checkpoint_load.py")
BUCKET = "runner-torchrun"


def test_torchrun_runs_the_case_on_its_ranks(tmp_path):
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        env = {
            **os.environ,
            **gcs.env(),
            "PYTHONPATH": os.pathsep.join(sys.path),
            "OMP_NUM_THREADS": "1",
        }
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            PROGRAM,
            f"--bucket=gs://{BUCKET}/tr",
            "--cases=load-olmoe_1b_7b_0924-ep-dp8ep8-ws8",
            "--sweep_axes=strategy",
            "--world_size_override=2",
            "--model_scale=tiny",
            "--rounds=1",
            "--readers=gcsckpt",
            # No download ceiling (nothing here reads it; test_runner_reshard checks it): its 3
            # default rounds each read a 256 MiB object from the endpoint.
            "--download_ceiling_rounds=0",
            f"--output_dir={tmp_path}",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [(r["benchmark_case_id"], r["status"]) for r in rows] == [
        ("load-olmoe_1b_7b_0924-ep-dp2ep2-ws2-reg", "ok")
    ]
    assert rows[0]["checksums_verified"] is True
    assert rows[0]["storage_endpoint"] == "emulator"
    # Rank 0 only: the summary, load and detail tables once each.
    assert done.stdout.count("| load-olmoe_1b_7b_0924-ep-dp2ep2-ws2-reg |") == 3
