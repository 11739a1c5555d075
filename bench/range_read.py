"""bazel run //bench:range_read -- [--mode=full] [--output=range_read.json] [--tune]

Range-read benchmark (see ckptbench.range_read.bench): gcsckpt's RangeReader at several
concurrencies vs gcsfs cat_ranges, google-cloud-storage download_chunks_concurrently and a raw
parallel-GET ceiling, on a plain and a latency-modelled LocalGCS. Prints one table, writes JSON.
The quick default takes ~1-2 minutes on 2 cores.
"""

from __future__ import annotations

import os

from absl import app, flags

from ckptbench.range_read.bench import CLIENTS, Settings, run
from ckptbench.range_read.ranges import parse_size

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "quick", ["quick", "full"], "quick: 3 range sizes, 3 rounds; full: 5, 5.")
flags.DEFINE_string("output", "range_read.json", "JSON results path (relative: to the cwd).")
flags.DEFINE_string("object_size", "256MiB", "Size of the test object.")
flags.DEFINE_list("range_sizes", None, "Range sizes, e.g. 4KiB,1MiB,64MiB (default per mode).")
flags.DEFINE_list("concurrency", ["1", "4", "16", "32", "64"], "Reader max_inflight_requests.")
flags.DEFINE_list("endpoints", ["plain", "modelled"], "plain and/or modelled LocalGCS.")
flags.DEFINE_float("latency_ms", 30.0, "First-byte latency of the modelled endpoint (ms).")
flags.DEFINE_float("stream_mbps", 200.0, "Per-request bandwidth of the modelled endpoint (MB/s).")
flags.DEFINE_list("clients", list(CLIENTS), "Clients to run.")
flags.DEFINE_integer("rounds", None, "Timed rounds per configuration (default per mode).")
flags.DEFINE_integer("raw_concurrency", 16, "Threads of the raw pool and gcs.download_chunks.")
flags.DEFINE_string("data_dir", None, "Keep the object here between runs (default: temp).")
flags.DEFINE_bool("tune", False, "Also sweep the reader's tuning options (slow).")

_MODES = {
    "quick": {"range_sizes": ("4KiB", "1MiB", "64MiB"), "rounds": 3},
    "full": {"range_sizes": ("4KiB", "64KiB", "1MiB", "8MiB", "64MiB"), "rounds": 5},
}


def main(argv: list[str]) -> None:
    del argv
    mode = _MODES[FLAGS.mode]
    settings = Settings(
        object_bytes=parse_size(FLAGS.object_size),
        range_sizes=tuple(parse_size(x) for x in (FLAGS.range_sizes or mode["range_sizes"])),
        concurrency=tuple(int(c) for c in FLAGS.concurrency),
        endpoints=tuple(FLAGS.endpoints),
        latency_ms=FLAGS.latency_ms,
        stream_mbps=FLAGS.stream_mbps,
        clients=tuple(FLAGS.clients),
        rounds=FLAGS.rounds or mode["rounds"],
        raw_concurrency=FLAGS.raw_concurrency,
        data_dir=FLAGS.data_dir,
        tune=FLAGS.tune,
    )
    output = FLAGS.output
    if not os.path.isabs(output):  # `bazel run` starts in the runfiles tree
        output = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), output)
    run(settings, output)


if __name__ == "__main__":
    app.run(main)
