"""Per arm and layout, what checkpointing cost the training loop, against the control's round,
and the result rows.

Per round (every figure against the control's round of the same layout and round number):
training time lost per checkpoint ((wall - control wall) / checkpoints, the slowest rank's
wall), time blocked per checkpoint (in the save call plus waiting for the previous one; the
slowest rank), step-time inflation (mean time of the steps that started with a save in flight
over the control's mean step; None when no step did), time to durable (call to complete, mean
over checkpoints; the slowest rank), peak RSS of a rank's process tree (absolute and over the
control's) and client CPU seconds per GB saved ((the ranks' CPU - the control's) / bytes
saved; the endpoint is outside the ranks' trees). Rows carry the mean over rounds.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from typing import Any

from ckptbench.publish.schema import column_names
from ckptbench.record.case_result import STATUS_FAILED, STATUS_OK, RunContext
from ckptbench.record.columns import WORKLOAD_FAMILY
from ckptbench.record.metrics import run_columns
from ckptbench.train.model import MODEL, layout_dims
from ckptbench.train.saving import CONTROL
from ckptbench.train.train_jobs import RankTrain, TrainJob
from ckptbench.workloads.parallel.dims import SIZE_NAMES

SCENARIO_TRAIN = "checkpoint_train"  # checkpoints in a training loop (case ids train-...)
GB = 1e9


@dataclasses.dataclass(frozen=True)
class RoundFigures:
    """One round of one arm against the control's same round (seconds, bytes; see module)."""

    wall_s: float
    lost_s_per_checkpoint: float | None
    blocked_s_per_checkpoint: float | None
    step_inflation: float | None
    durable_s: float | None
    rss_peak_bytes: int
    rss_over_control_bytes: int | None
    cpu_s: float
    cpu_s_per_gb: float | None
    saved_bytes: int
    checkpoints: int
    verified_checkpoints: int


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def round_figures(job: TrainJob, ranks: Sequence[RankTrain], control: Sequence[RankTrain] | None):
    """The RoundFigures of one round (``ranks``: every rank's RankTrain) against ``control``
    (the control arm's same round; None: it failed, the relative figures are None)."""
    count = len(job.checkpoint_steps)
    wall = max(r.wall_s for r in ranks)
    control_wall = max(r.wall_s for r in control) if control else None
    control_step = _mean([s for r in control for s in r.step_s]) if control else None
    flight = [s for r in ranks for s, f in zip(r.step_s, r.in_flight, strict=True) if f]
    saved = sum(r.state_bytes for r in ranks) * count
    cpu = sum(r.cpu_s for r in ranks)
    peak = max(r.rss_peak_bytes for r in ranks)
    verified = min(sum(v.ok for v in r.verified) for r in ranks) if count else 0
    per = (lambda x: x / count) if count else (lambda x: None)
    return RoundFigures(
        wall_s=wall,
        lost_s_per_checkpoint=None if control_wall is None else per(wall - control_wall),
        blocked_s_per_checkpoint=per(
            max(sum(c.call_s + c.wait_s for c in r.checkpoints) for r in ranks)
        ),
        step_inflation=(_mean(flight) / control_step if flight and control_step else None),
        durable_s=max(_mean([c.durable_s for c in r.checkpoints]) or 0.0 for r in ranks)
        if count
        else None,
        rss_peak_bytes=peak,
        rss_over_control_bytes=(
            None if not control else peak - max(r.rss_peak_bytes for r in control)
        ),
        cpu_s=cpu,
        cpu_s_per_gb=(
            (cpu - sum(r.cpu_s for r in control)) / (saved / GB) if control and saved else None
        ),
        saved_bytes=saved,
        checkpoints=count,
        verified_checkpoints=verified,
    )


@dataclasses.dataclass(frozen=True)
class ArmResult:
    """Every round of one arm on one layout.

    Attributes:
      job: the first round's job (arm, layout, sizes).
      rounds: the rounds that completed.
      error: why the arm failed (a rank's error, a launch error or a checkpoint that did not
        verify); None: ok.
      state_bytes: the largest rank state, bytes.
      rss_start_bytes: the highest tree RSS of a rank when its loop started, bytes.
    """

    job: TrainJob
    rounds: tuple[RoundFigures, ...]
    error: str | None = None
    state_bytes: int = 0
    rss_start_bytes: int = 0


def _avg(rounds: Sequence[RoundFigures], field: str) -> float | None:
    values = [getattr(r, field) for r in rounds if getattr(r, field) is not None]
    return statistics.fmean(values) if values else None


def case_id(job: TrainJob) -> str:
    """``train-<model>-<scale>-<layout>-ws<N>``."""
    return f"train-{MODEL}-{job.scale}-{job.layout}-ws{job.world_size}"


def train_row(result: ArmResult, run: RunContext, settings: dict[str, Any]) -> dict[str, Any]:
    """The result row of one arm on one layout (schema: bigquery_schema.json); ``settings``
    (the arm's writer and mode, JSON-serializable) go to ``writer_options_json``."""
    job = result.job
    dims = layout_dims(job.layout, job.world_size)
    rounds = result.rounds
    ok = result.error is None and bool(rounds)
    checkpoints = rounds[0].checkpoints if rounds else len(job.checkpoint_steps)
    lost = _avg(rounds, "lost_s_per_checkpoint")
    over = _avg(rounds, "rss_over_control_bytes")
    measures = {
        "steps": job.steps,
        "every": job.every,
        "rounds": [dataclasses.asdict(r) for r in rounds],
    }
    row = dict.fromkeys(column_names())
    row.update(
        {
            **run_columns(run),
            "benchmark_case_id": case_id(job),
            "workload_family": WORKLOAD_FAMILY,
            "workload_scenario": SCENARIO_TRAIN,
            "workload_implementation": job.arm,
            "model_id": MODEL,
            "model_scale": job.scale,
            "checkpoint_strategy": job.layout,
            "world_size": job.world_size,
            **{column: getattr(dims, dim) for dim, column in SIZE_NAMES.items()},
            "status": STATUS_OK if ok else STATUS_FAILED,
            "error_message": result.error,
            "checksums_verified": ok
            and all(r.verified_checkpoints == r.checkpoints for r in rounds),
            "writer_options_json": json.dumps(settings, sort_keys=True),
            "measurement_round_count": len(rounds),
            "save_state_bytes_per_rank_max": result.state_bytes or None,
            "save_rss_start_bytes_per_rank_max": result.rss_start_bytes or None,
            "save_rss_peak_bytes_per_rank_max": (
                max(r.rss_peak_bytes for r in rounds) if rounds else None
            ),
            "train_checkpoint_count": checkpoints,
            "train_lost_seconds_per_checkpoint": 0.0 if job.arm == CONTROL and ok else lost,
            "train_blocked_seconds_per_checkpoint": _avg(rounds, "blocked_s_per_checkpoint"),
            "train_step_inflation_ratio": _avg(rounds, "step_inflation"),
            "train_time_to_durable_seconds": _avg(rounds, "durable_s"),
            "train_rss_peak_over_control_bytes": None if over is None else int(over),
            "train_client_cpu_seconds_per_gb": _avg(rounds, "cpu_s_per_gb"),
            "train_measures_json": json.dumps(measures, sort_keys=True),
        }
    )
    return row
