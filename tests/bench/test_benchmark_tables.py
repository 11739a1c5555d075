"""The run's job-time table (runner.notes.phase_table)."""

from __future__ import annotations

from ckptbench.runner.notes import phase_table


def test_phase_table_lists_every_job_and_the_totals():
    table = phase_table([("setup x", 12.0), ("load x with gcsckpt, round 1", 3.25)], 20.0)
    assert table.splitlines() == [
        "| job | wall s |",
        "|---|---|",
        "| setup x | 12.0 |",
        "| load x with gcsckpt, round 1 | 3.2 |",
        "| all jobs | 15.2 |",
        "| whole run (endpoint, setup checks, publishing included) | 20.0 |",
    ]
