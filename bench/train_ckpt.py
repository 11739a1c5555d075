"""Saves as a training job pays for them: scaled OLMoE trained on gloo CPU ranks, a checkpoint
every K steps, one arm at a time, on the local GCS endpoint.

``tools/bazel run //bench:train_ckpt`` trains under ep and fsdp (2 ranks, the ``small`` scale,
12 steps, a checkpoint every 4, 2 rounds; fsspec-sync 1) with every arm: none (the control),
localfs (the floor), gcsckpt sync / thread / process, gcsckpt+local-thread (thread with the
node-local tier on), msc and dataflux sync / async, stock fsspec-sync. Every checkpoint is
loaded back and compared with the state at its step. Prints the table (lost training time per
checkpoint with ratios to the floor, the best peer and stock; blocked time, step inflation,
time to durable, RSS, client CPU per GB; the lost time with the local tier on vs off) and writes
results.json / .csv. Flags: --ranks, --steps, --every, --rounds, --stock_rounds, --layouts,
--arms, --scale, --latency_ms / --stream_mbps (the modelled endpoint), --output_dir,
--bigquery_table. Method: docs/design.md, "Benchmark method" (Saves in a training loop).
"""

from __future__ import annotations

import datetime
import os
import sys

from absl import app, flags

from ckptbench.harness.launch import SpawnLauncher
from ckptbench.record.case_result import RunContext
from ckptbench.record.host import collect_host_facts
from ckptbench.runner.benchmark import RESULTS_ROOT, new_run_id
from ckptbench.runner.storage import DEFAULT_LOCAL_DIR, BenchStorage
from ckptbench.train.model import LAYOUTS, SCALES
from ckptbench.train.run import TrainSettings, publish_training, run_training, training_rows
from ckptbench.train.saving import ARMS

FLAGS = flags.FLAGS
flags.DEFINE_integer("ranks", 2, "gloo CPU ranks.")
flags.DEFINE_integer("steps", 12, "AdamW steps per round.")
flags.DEFINE_integer("every", 4, "A checkpoint after every N-th step.")
flags.DEFINE_integer("rounds", 2, "Rounds per arm (interleaved).")
flags.DEFINE_integer("stock_rounds", 1, "Rounds of fsspec-sync (~35 s per 128 MB checkpoint).")
flags.DEFINE_list("layouts", list(LAYOUTS), f"Layouts ({', '.join(LAYOUTS)}).")
flags.DEFINE_list("arms", list(ARMS), f"Arms ({', '.join(ARMS)}); the control always runs.")
flags.DEFINE_enum("scale", "small", list(SCALES), "OLMoE size.")
flags.DEFINE_float("latency_ms", 0.0, "First-byte latency the local endpoint adds, ms.")
flags.DEFINE_float("stream_mbps", None, "Per-stream bandwidth cap of the local endpoint, MB/s.")
flags.DEFINE_string("local_gcs_dir", DEFAULT_LOCAL_DIR, "Data folder of the local endpoint.")
flags.DEFINE_string("output_dir", None, "Results folder. Default: ~/.cache/gcsckpt/results/<id>.")
flags.DEFINE_string("bigquery_table", None, "project.dataset.table to insert the rows into.")
flags.DEFINE_string("bigquery_endpoint", None, "BigQuery REST endpoint (an emulator).")
flags.DEFINE_float("job_timeout_s", 1800.0, "Wall-clock limit of one round, s.")


def main(argv: list[str]) -> int:
    """Runs the training benchmark; exit code 1 when an arm failed."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {list(argv[1:])}; every option is a --flag")
    try:
        settings = TrainSettings(
            layouts=tuple(FLAGS.layouts),
            arms=tuple(FLAGS.arms),
            ranks=FLAGS.ranks,
            scale=FLAGS.scale,
            steps=FLAGS.steps,
            every=FLAGS.every,
            rounds=FLAGS.rounds,
            stock_rounds=FLAGS.stock_rounds,
        )
    except ValueError as err:
        raise app.UsageError(str(err)) from err
    started = datetime.datetime.now(datetime.UTC)
    run_id = new_run_id(started)
    output = os.path.expanduser(FLAGS.output_dir or os.path.join(RESULTS_ROOT, run_id))
    print(f"load average before: {os.getloadavg()[0]:.2f}; {settings.note()}", flush=True)
    storage = BenchStorage(
        local_dir=FLAGS.local_gcs_dir, latency_ms=FLAGS.latency_ms, stream_mbps=FLAGS.stream_mbps
    )
    with storage:
        results = run_training(
            settings,
            storage.bucket,
            storage.endpoint,
            storage.prefix,
            SpawnLauncher(timeout_s=FLAGS.job_timeout_s),
        )
    context = RunContext(
        run_id=run_id,
        started_at=started,
        host=collect_host_facts(),
        storage_endpoint=storage.kind,
        gcs_bucket_name=storage.bucket,
        distributed_backend="gloo",
        compute_accelerator_type="cpu",
        endpoint_modelled_latency_ms=FLAGS.latency_ms,
        endpoint_modelled_stream_mbps=FLAGS.stream_mbps,
    )
    rows = training_rows(results, context)
    publish_training(
        rows, settings, output, sys.stdout, FLAGS.bigquery_table, FLAGS.bigquery_endpoint
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    app.run(main)
