"""Cold restart of a training job: process start -> model built -> latest complete checkpoint
loaded -> first step done, with gcsckpt and with the stock FsspecReader over gcsfs.

``restart_jobs`` (the jobs: the save that leaves a checkpoint, one restart with one arm),
``listing`` (which ``step-N`` folders under a prefix are complete, per arm's own client),
``rank`` (what each fresh rank process does: build, find, load, one AdamW step; and the save that
leaves the checkpoint), ``measure`` (``prepare_checkpoint``, ``measure_cold_restart``: arms
interleaved per round on fresh spawned ranks, one row per arm and round, and ``format_table``).
The program: ``bench/resume.py`` (``tools/bazel run //bench:resume``). How each phase is timed:
docs/design.md, "Benchmark method" (Cold restart); figures: docs/measurements.md, "Resume".
"""

from ckptbench.resume.measure import (
    RestartSpec,
    format_table,
    measure_cold_restart,
    prepare_checkpoint,
)

__all__ = ["RestartSpec", "format_table", "measure_cold_restart", "prepare_checkpoint"]
