"""bazel run //bench:upload_ceiling -- [--object_size=64MiB] [--concurrency=16] [--rounds=3]

The raw upload ceiling (ckptbench.ceiling.upload) of a plain and a latency-modelled
LocalGCS (or of --endpoint): `concurrency` parallel single-request media uploads of one
preallocated buffer per round, one keep-alive connection per thread. Prints one line per
endpoint: median and best MB/s (1 MB = 1e6 bytes), seconds per round, load average.
"""

from __future__ import annotations

import os
import tempfile

from absl import app, flags

from ckptbench.ceiling import measure_upload_ceiling
from ckptbench.range_read.ranges import parse_size, size_label

FLAGS = flags.FLAGS
flags.DEFINE_string("object_size", "64MiB", "Bytes per upload.")
flags.DEFINE_integer("concurrency", 16, "Uploads in flight (and per round).")
flags.DEFINE_integer("rounds", 3, "Timed rounds per endpoint.")
flags.DEFINE_list("endpoints", ["plain", "modelled"], "plain and/or modelled LocalGCS.")
flags.DEFINE_float("latency_ms", 30.0, "First-byte latency of the modelled endpoint (ms).")
flags.DEFINE_float("stream_mbps", 200.0, "Per-request bandwidth of the modelled endpoint (MB/s).")
flags.DEFINE_string("endpoint", None, "Measure this endpoint instead of starting LocalGCS.")
flags.DEFINE_string("bucket", "upload-ceiling", "Bucket (created on LocalGCS).")


def _line(label: str, ceiling) -> str:
    rounds = ", ".join(f"{s:.2f}" for s in ceiling.seconds)
    return (
        f"{label:<28} {ceiling.concurrency} x {size_label(ceiling.object_bytes)}: "
        f"median {ceiling.median_bytes_per_s / 1e6:8.1f} MB/s, best "
        f"{ceiling.best_bytes_per_s / 1e6:8.1f} MB/s (rounds {rounds} s; "
        f"load average {os.getloadavg()[0]:.1f})"
    )


def main(argv: list[str]) -> None:
    del argv
    size = parse_size(FLAGS.object_size)
    options = dict(object_bytes=size, concurrency=FLAGS.concurrency, rounds=FLAGS.rounds)
    print(f"upload ceiling: {FLAGS.concurrency} parallel uploads of {size_label(size)} per round")
    if FLAGS.endpoint:
        ceiling = measure_upload_ceiling(FLAGS.endpoint, FLAGS.bucket, **options)
        print(_line(FLAGS.endpoint, ceiling))
        return
    from gcsckpt.testing import LocalGCS

    for kind in FLAGS.endpoints:
        modelled = kind == "modelled"
        label = f"modelled({FLAGS.latency_ms:g}ms,{FLAGS.stream_mbps:g}MB/s)" if modelled else kind
        with tempfile.TemporaryDirectory(prefix="upload-ceiling-") as data_dir:
            shaping = dict(latency_ms=FLAGS.latency_ms, stream_mbps=FLAGS.stream_mbps)
            with LocalGCS(data_dir=data_dir, **(shaping if modelled else {})) as gcs:
                gcs.create_bucket(FLAGS.bucket)
                print(_line(label, measure_upload_ceiling(gcs.endpoint, FLAGS.bucket, **options)))


if __name__ == "__main__":
    app.run(main)
