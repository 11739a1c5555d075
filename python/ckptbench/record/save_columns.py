"""A save's per-rank memory and phase columns of a result row (``RoundRecord.rank_saves``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ckptbench.record.columns import DATA_PHASE_THROUGHPUT_COLUMN
from ckptbench.record.rank_rounds import RoundRecord

Row = dict[str, Any]

SAVE_COLUMNS = (
    "save_state_bytes_per_rank_max",
    "save_rss_start_bytes_per_rank_max",
    "save_rss_peak_bytes_per_rank_max",
    "save_rss_bound_bytes_at_peak_rank",
    "save_rss_peak_within_bound",
    "save_rss_increase_bytes_per_rank_max",
    "save_plan_seconds_per_rank_max",
    "save_finish_mean_seconds",
    "save_data_phase_mean_seconds",
    "save_outside_data_phase_mean_seconds",
    DATA_PHASE_THROUGHPUT_COLUMN,
)


def save_columns(rounds: Sequence[RoundRecord], bytes_per_round: int | None, timed: bool) -> Row:
    """A save's per-rank memory and phase columns (``RoundRecord.rank_saves``); all None when
    any round lacks them (loads, or a writer whose ranks did not measure).

    Memory over every (round, rank): the highest peak RSS, the bound ``1.1 x state bytes +
    256 MiB`` of the rank (and round) that had it, whether every rank stayed within its own
    bound, the highest state bytes and start RSS, and the largest peak-minus-start increase.
    Absolute RSS includes torch's libraries (docs/measurements.md, "The start RSS of a save")
    and the state.

    Phases: the writer's planning seconds (most of any rank), the coordinator's ``finish``
    (mean over rounds), the data phase per round (the longest rank's ``write_data`` until its
    future's value was ready; mean over rounds), the rest of the round's wall time (DCP's own
    planning, pickling and collectives plus ``finish``; mean), and the upload-phase throughput,
    ``bytes_per_round / data phase`` (mean of per-round values, bytes/s). With ``timed`` False
    (a failed result) the time-based columns are None, as the round durations are.
    """
    columns: Row = dict.fromkeys(SAVE_COLUMNS)
    if not rounds or any(r.rank_saves is None for r in rounds):
        return columns
    samples = [save for r in rounds for save in r.rank_saves]
    top = max(samples, key=lambda save: save.rss_peak_bytes)
    finishes = [
        max(f for f in (save.finish_s for save in r.rank_saves) if f is not None)
        for r in rounds
        if any(save.finish_s is not None for save in r.rank_saves)
    ]
    columns.update(
        {
            "save_state_bytes_per_rank_max": max(s.state_bytes for s in samples),
            "save_rss_start_bytes_per_rank_max": max(s.rss_start_bytes for s in samples),
            "save_rss_peak_bytes_per_rank_max": top.rss_peak_bytes,
            "save_rss_bound_bytes_at_peak_rank": top.rss_bound_bytes,
            "save_rss_peak_within_bound": all(
                s.rss_peak_bytes <= s.rss_bound_bytes for s in samples
            ),
            "save_rss_increase_bytes_per_rank_max": max(s.rss_increase_bytes for s in samples),
            "save_plan_seconds_per_rank_max": max(s.plan_s for s in samples),
            "save_finish_mean_seconds": float(np.mean(finishes)) if finishes else None,
        }
    )
    if not timed:
        return columns
    data = [r.data_phase_s for r in rounds]
    columns["save_data_phase_mean_seconds"] = float(np.mean(data))
    columns["save_outside_data_phase_mean_seconds"] = float(
        np.mean([r.duration_s - d for r, d in zip(rounds, data, strict=True)])
    )
    if bytes_per_round is not None and min(data) > 0:
        columns[DATA_PHASE_THROUGHPUT_COLUMN] = float(np.mean([bytes_per_round / d for d in data]))
    return columns
