"""Runner side of the training benchmark: every arm's rounds on every layout, interleaved (round
1 of every arm, then round 2; the control first in each), one job per round on fresh rank
processes; then per arm the figures, rows and table.

The caller brings the endpoint and the launcher (``//bench:train_ckpt`` and the main job both
use ``runner.storage.BenchStorage`` and ``harness.launch.SpawnLauncher``), so this package sits
below the runner. A dataflux round trains on that arm's venv unverified and a
``VerifyTrainJob`` loads its checkpoints back on the runner's interpreter.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckptbench.harness.rounds import interleave
from ckptbench.publish.row_files import write_results
from ckptbench.publish.train_table import print_train_table
from ckptbench.record.case_result import RunContext
from ckptbench.roles import BASELINE, LOCAL_TIER, LOCALFS
from ckptbench.train.model import LAYOUTS, model_config
from ckptbench.train.saving import ARMS, CONTROL, arm_parts, writer_mode_settings
from ckptbench.train.train_jobs import RankTrain, TrainJob, VerifyTrainJob
from ckptbench.train.train_rows import ArmResult, round_figures, train_row
from ckptbench.worker import arms as worker_arms

STOCK = f"{BASELINE}-sync"


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """What a training-benchmark run does.

    Attributes:
      layouts: ``model.LAYOUTS`` to train under, in order.
      arms: ``saving.ARMS`` to run, in order (the control always runs, first).
      ranks: gloo CPU ranks per job.
      scale: ``model.SCALES`` key.
      steps / every: optimizer steps per round; a checkpoint after every ``every``-th.
      rounds: rounds per arm; ``stock_rounds`` for fsspec-sync (~35 s per 128 MB checkpoint).

    Raises:
      ValueError: an unknown layout or arm, or a count < 1.
    """

    layouts: tuple[str, ...] = LAYOUTS
    arms: tuple[str, ...] = ARMS
    ranks: int = 2
    scale: str = "small"
    steps: int = 12
    every: int = 4
    rounds: int = 2
    stock_rounds: int = 1

    def __post_init__(self) -> None:
        for layout in self.layouts:
            if layout not in LAYOUTS:
                raise ValueError(f"layout {layout!r} is unknown; known: {', '.join(LAYOUTS)}")
        for arm in self.arms:
            arm_parts(arm)
        model_config(self.scale)
        if min(self.ranks, self.steps, self.every, self.rounds, self.stock_rounds) < 1:
            raise ValueError("ranks, steps, every, rounds and stock_rounds must be >= 1")

    @property
    def run_arms(self) -> tuple[str, ...]:
        """The arms run: the control first, then ``arms`` in order."""
        return (CONTROL, *(a for a in self.arms if a != CONTROL))

    def rounds_for(self, arm: str) -> int:
        """Rounds of ``arm``: ``stock_rounds`` for fsspec-sync, else ``rounds``."""
        return min(self.stock_rounds, self.rounds) if arm == STOCK else self.rounds

    def note(self) -> str:
        """One line: the model, layouts, steps, checkpoints and rounds."""
        return (
            f"OLMoE ({self.scale}) on {self.ranks} gloo CPU ranks, {', '.join(self.layouts)}; "
            f"{self.steps} AdamW steps, a checkpoint every {self.every}, each loaded back and "
            f"compared with the state at its step; {self.rounds} round(s) per arm "
            f"({STOCK}: {self.rounds_for(STOCK)}), interleaved."
        )


def _state_bytes_estimate(scale: str) -> int:
    """Tensor bytes of the whole state: bf16 parameters and two AdamW moments."""
    from ckptbench.workloads.models.builder import build_meta_model, count_parameters

    return count_parameters(build_meta_model(model_config(scale))) * 2 * 3


def round_failure(gathered: Sequence[Any]) -> str | None:
    """The first rank error of a job, or the first checkpoint that did not verify."""
    for result in gathered:
        if not isinstance(result, RankTrain):
            return getattr(result, "message", None) or f"rank result {result!r}"
        if result.error:
            return result.error
    for result in gathered:
        for check in result.verified:
            if not check.ok:
                keys = ", ".join(check.mismatched) or "none listed"
                return (
                    f"rank {result.rank}: the checkpoint of step {check.step} does not match the "
                    f"state at that step: {check.mismatch_count} entries differ ({keys}), "
                    f"{check.missing_count} missing, {check.committed_bytes} of "
                    f"{check.expected_bytes} tensor bytes loaded"
                )
    return None


def _round(job: TrainJob, launcher: Any) -> list[Any]:
    """One round's gathered RankTrains (verified on the runner's interpreter when the arm runs
    on another)."""
    separate = job.python is not None
    first = dataclasses.replace(job, verify=False) if separate else job
    gathered = launcher.run(first)
    if separate and round_failure(gathered) is None and job.checkpoint_steps:
        check = VerifyTrainJob(job, tuple(r.sums for r in gathered))
        checked = launcher.run(check)
        if round_failure(checked) is not None:
            return checked
        gathered = [
            dataclasses.replace(r, verified=c.verified, sums=())
            for r, c in zip(gathered, checked, strict=True)
        ]
    return gathered


def run_training(
    settings: TrainSettings,
    bucket: str,
    endpoint: str | None,
    prefix: str,
    launcher: Any,
    say: Callable[[str], None] = print,
) -> list[ArmResult]:
    """Runs every arm's rounds (see the module docstring); one ArmResult per layout and arm, in
    order. An arm that fails a round stops (its error is kept); the others go on.

    Args:
      settings: the run.
      bucket / endpoint: where GCS arms save (endpoint: emulator URL; None: real GCS).
      prefix: object prefix below which every round saves (a unique folder is added).
      launcher: runs a job on ``ranks`` fresh processes (``harness.launch.SpawnLauncher``).
      say: where a line per round goes.
    """
    tag = uuid.uuid4().hex[:8]
    estimate = _state_bytes_estimate(settings.scale) * len(range(0, settings.steps, settings.every))
    node_local = any(arm_parts(a)[0] in (LOCALFS, LOCAL_TIER) for a in settings.arms)
    local_root = worker_arms.local_save_root(estimate) if node_local else None
    gathered: dict[tuple[str, str], list[list[Any]]] = {}
    jobs: dict[tuple[str, str], TrainJob] = {}
    errors: dict[tuple[str, str], str] = {}

    def one_round(key: tuple[str, str], index: int) -> bool:
        layout, arm = key
        base = "/".join(p for p in (prefix, "train", tag, layout, arm) if p)
        job = TrainJob(
            arm,
            layout,
            settings.ranks,
            settings.scale,
            settings.steps,
            settings.every,
            bucket,
            endpoint,
            f"{base}/round{index + 1}",
            local_root=local_root if arm_parts(arm)[0] in (LOCALFS, LOCAL_TIER) else None,
            round_index=index,
        )
        jobs.setdefault(key, job)
        try:
            results = _round(job, launcher)
            error = round_failure(results)
        except Exception as err:  # a job that cannot start or dies fails its arm
            results, error = None, f"{type(err).__name__}: {err}"
        if error is not None:
            errors[key] = error
            say(f"{job.label} FAILED: {error}")
            return False
        gathered.setdefault(key, []).append(results)
        wall = max(r.wall_s for r in results)
        say(f"{job.label}: {wall:.1f} s, {len(job.checkpoint_steps)} checkpoints")
        return True

    keys = [(layout, arm) for layout in settings.layouts for arm in settings.run_arms]
    interleave({key: settings.rounds_for(key[1]) for key in keys}, one_round)
    out = []
    for (layout, arm), job in jobs.items():
        rounds = gathered.get((layout, arm), [])
        control = gathered.get((layout, CONTROL), [])
        figures = tuple(
            round_figures(job, ranks, control[i] if i < len(control) else None)
            for i, ranks in enumerate(rounds)
        )
        everyone = [r for ranks in rounds for r in ranks]
        out.append(
            ArmResult(
                job,
                figures,
                errors.get((layout, arm)),
                state_bytes=max((r.state_bytes for r in everyone), default=0),
                rss_start_bytes=max((r.rss_start_bytes for r in everyone), default=0),
            )
        )
    return out


def training_rows(
    results: Sequence[ArmResult], context: RunContext, local_root: str | None = None
) -> list[dict[str, Any]]:
    """The result rows of ``run_training``'s results (schema: bigquery_schema.json)."""
    emulator = context.storage_endpoint != "gcs"
    return [
        train_row(
            result,
            context,
            writer_mode_settings(result.job.arm, emulator, result.job.local_root or local_root),
        )
        for result in results
    ]


def publish_training(
    rows: Sequence[dict[str, Any]],
    settings: TrainSettings,
    output_dir: Path | str,
    out: Any,
    bigquery_table: str | None = None,
    bigquery_endpoint: str | None = None,
) -> int:
    """Writes results.json / .csv into ``output_dir``, prints the table and, with a table
    name, inserts the rows into BigQuery; returns the rows inserted."""
    files = write_results(rows, output_dir)
    print_train_table(rows, settings.note(), out)
    inserted = 0
    if bigquery_table:
        from ckptbench.publish.bigquery import publish_rows

        inserted = publish_rows(rows, bigquery_table, api_endpoint=bigquery_endpoint)
    print(f"\nResults: {files.json_path}, {files.csv_path}", file=out, flush=True)
    return inserted
