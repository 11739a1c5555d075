"""bazel run //bench:scaling -- [--items=...] [--mb=...] [--ranks=...] [--sim_ranks=...]

Save and load cost as one axis grows with the others fixed, gcsckpt (GCSStorageWriter /
GCSStorageReader, verify on, GCSLoadPlanner) against stock DCP (torch's FsspecWriter /
FsspecReader over gcsfs), both against one LocalGCS, every load checked value for value:

- items per rank (``--items``, at ``--items_mb`` MB): small float32 tensors plus the optimizer's
  BYTE_IO shape (a ``{"step", "lr"}`` dict per parameter), one process;
- MB per rank (``--mb``, at ``--mb_items`` items), one process;
- real ranks (``--ranks``, at ``--ranks_items`` items and ``--ranks_mb`` MB per rank), gloo rank
  processes through ``harness.launch.SpawnLauncher``;
- simulated ranks (``--sim_ranks``): one rank's ``.metadata`` decode and load planning for a
  Llama-3-70B FSDP + AdamW checkpoint at N ranks (``ckptbench.scaling.synthetic``), no I/O.

Prints one table per axis (CPU seconds of one rank, µs per item, load CPU-s per GB,
``.metadata`` MB), the growth exponent of each cost per axis and arm (slope of log cost against
log axis), and writes a log-log PNG (``--png``). An empty list skips an axis. Arms run
interleaved per point (``harness.rounds.interleave``), ``--rounds`` times; a point keeps its
round with the least CPU.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os

from absl import app, flags

from ckptbench.harness.launch import SpawnLauncher
from ckptbench.harness.rounds import interleave
from ckptbench.scaling import scaling_report
from ckptbench.scaling.ranks import RanksJob
from ckptbench.scaling.real import ARMS, measure_real
from ckptbench.scaling.simulated import GCSCKPT, STOCK, measure_simulated
from ckptbench.scaling.synthetic import LLAMA_70B
from gcsckpt.testing import LocalGCS

FLAGS = flags.FLAGS
flags.DEFINE_list("items", ["100", "1000", "10000", "100000"], "Items per rank (items axis).")
flags.DEFINE_integer("items_mb", 8, "MB per rank on the items axis.")
flags.DEFINE_list("mb", ["16", "64", "256", "1024"], "MB per rank (bytes axis).")
flags.DEFINE_integer("mb_items", 300, "Items per rank on the bytes axis.")
flags.DEFINE_list("ranks", ["1", "2", "4"], "Real rank processes (ranks axis).")
flags.DEFINE_integer("ranks_items", 1000, "Items per rank on the ranks axis.")
flags.DEFINE_integer("ranks_mb", 16, "MB per rank on the ranks axis.")
flags.DEFINE_list(
    "sim_ranks", ["64", "128", "256", "512", "1024"], "Simulated ranks (70B); 4096 needs ~21 GB."
)
flags.DEFINE_integer(
    "sim_stock_max",
    0,
    "Largest simulated N the stock arm runs at (0: all); its decoded Metadata "
    "is the memory peak (the 1,024 point: ~5 GB).",
)
flags.DEFINE_integer("rounds", 1, "Rounds per point and arm (the least CPU is kept).")
flags.DEFINE_string("png", "scaling.png", "Where the PNG goes (relative: the working directory).")

BUCKET = "scaling"
_MB = 1 << 20


def _least(points_per_round: list) -> list:
    return min(points_per_round, key=lambda ps: sum(p.save_cpu_s + p.load_cpu_s for p in ps))


def _point_round(gcs, launcher, tag: str, point: tuple, got: dict, arm: str, index: int) -> bool:
    """One round of one arm at one point: its per-rank RealPoints appended to ``got[arm]``."""
    x, items, nbytes, ranks = point
    prefix = f"{tag}/{x:g}/{arm}/{index}"
    if launcher is None:
        got[arm].append([measure_real(gcs.endpoint, BUCKET, prefix, arm, items, nbytes)])
        return True
    job = RanksJob(gcs.endpoint, BUCKET, prefix, arm, ranks, items, nbytes)
    per_rank = launcher.run(job)
    failed = [p for p in per_rank if not hasattr(p, "load_cpu_s")]
    if failed:
        raise SystemExit(f"{job.label}: {failed[0].message}")
    got[arm].append(per_rank)
    return True


def _real_axis(gcs, axis: str, points: list[tuple[float, int, int, int]], tag: str) -> list:
    """Rows for (x, items, bytes, ranks) points, both arms interleaved per round."""
    rows = []
    launcher = SpawnLauncher(timeout_s=600.0) if any(p[3] > 1 for p in points) else None
    for point in points:
        got: dict = {arm: [] for arm in ARMS}
        run_round = functools.partial(_point_round, gcs, launcher, tag, point, got)
        interleave({arm: FLAGS.rounds for arm in ARMS}, run_round)
        for arm in ARMS:
            rows.append(scaling_report.real_rows(axis, point[0], _least(got[arm])))
            print(f"  {axis} {point[0]:g} {arm}: {rows[-1].costs}", flush=True)
    return rows


def _warm_up(gcs) -> None:
    """One small untimed save and load per arm: imports and first-call set-up stay out of the
    first point."""
    for arm in ARMS:
        measure_real(gcs.endpoint, BUCKET, f"warm/{arm}", arm, 30, _MB)


def main(argv) -> None:
    del argv
    for name in ("fsspec", "gcsfs", "matplotlib"):  # INFO per file open, font fallbacks
        logging.getLogger(name).setLevel(logging.ERROR)
    began = datetime.datetime.now(datetime.UTC)
    rows: list[scaling_report.Row] = []
    for n in map(int, FLAGS.sim_ranks):
        stock = not FLAGS.sim_stock_max or n <= FLAGS.sim_stock_max
        arms = (STOCK, GCSCKPT) if stock else (GCSCKPT,)
        points = measure_simulated(LLAMA_70B, n, arms=arms)
        rows += scaling_report.simulated_rows(points)
        got = [(p.arm, p.decode_s, p.plan_s, p.metadata_bytes, p.pickle_bytes) for p in points]
        print(
            f"  simulated {n} (arm, decode s, plan s, bytes read, pickle bytes): {got}", flush=True
        )
    if FLAGS.items or FLAGS.mb or FLAGS.ranks:
        rows += _real_axes()
    _print(rows, began)


def _real_axes() -> list:
    """Rows of the items, MB and ranks axes (one LocalGCS for all)."""
    rows: list[scaling_report.Row] = []
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        _warm_up(gcs)
        items_mb, mb_items = FLAGS.items_mb * _MB, FLAGS.mb_items
        rows += _real_axis(
            gcs, scaling_report.ITEMS, [(int(n), int(n), items_mb, 1) for n in FLAGS.items], "items"
        )
        rows += _real_axis(
            gcs,
            scaling_report.BYTES,
            [(int(m), mb_items, int(m) * _MB, 1) for m in FLAGS.mb],
            "bytes",
        )
        rank_points = [
            (int(r), FLAGS.ranks_items, FLAGS.ranks_mb * _MB, int(r)) for r in FLAGS.ranks
        ]
        rows += _real_axis(gcs, scaling_report.RANKS, rank_points, "ranks")
    return rows


def _print(rows: list, began) -> None:
    """The tables, the exponents and the PNG."""
    print(f"\nScaling, {began:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs\n")
    for axis in (
        scaling_report.ITEMS,
        scaling_report.BYTES,
        scaling_report.RANKS,
        scaling_report.SIMULATED,
    ):
        table = scaling_report.axis_table(rows, axis)
        if table:
            print(f"### {axis}\n\n{table}\n")
    fits = scaling_report.exponent_table(scaling_report.exponents(rows))
    print(f"### growth exponents (CPU s ~ axis^k)\n\n{fits}\n")
    where = os.environ.get("BUILD_WORKING_DIRECTORY", ".")
    png = scaling_report.write_png(rows, os.path.join(where, FLAGS.png))
    print(f"PNG: {png}")


if __name__ == "__main__":
    app.run(main)
