"""The checkpoint benchmark: per case, set up once, timed loads with each reader, timed saves with
each writer (``case_run``); then the training phase, the endpoint's ceilings (``ceilings``) and
publishing.

For every selected case: make sure a complete checkpoint with the run's config hash is stored
(else save one in a setup job), then run the readers' timed rounds interleaved (round 1 of each
reader, then round 2, ...), each round a job on fresh rank processes, sampling the process
tree's CPU and memory meanwhile; then, when writers are asked for, the writers' timed saves the
same way (rows named ``save-...``, each save verified by a stock load). Interleaving spreads a
noisy machine's slow minutes over every arm instead of one. A failure (setup, a rank, a
verification) fails that case and reader only; the run goes on and publishes every row: results
JSON/CSV, Markdown tables with the gcsckpt/fsspec ratio on stdout, a PNG chart and, if asked,
BigQuery rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from ckptbench.cases.catalogue import Case
from ckptbench.harness.launch import SpawnLauncher
from ckptbench.harness.local_ranks import backend_for
from ckptbench.publish.run_report import PublishedReport, publish_report
from ckptbench.publish.train_table import print_train_table
from ckptbench.record.case_result import SCENARIO_READ, SCENARIO_WRITE, ArmOutcome, RunContext
from ckptbench.record.host import collect_host_facts
from ckptbench.record.metrics import case_row
from ckptbench.record.progress_display import ProgressDisplay
from ckptbench.roles import BASELINE, CANDIDATE
from ckptbench.runner.case_run import CaseRun
from ckptbench.runner.ceilings import download_ceiling, upload_ceiling
from ckptbench.runner.config import RunConfig
from ckptbench.runner.notes import phase_table, rounds_note
from ckptbench.runner.storage import BenchStorage
from ckptbench.train.run import run_training, training_rows

RESULTS_ROOT = os.path.join("~", ".cache", "gcsckpt", "results")


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What a run produced.

    Attributes:
      run_id: the invocation's id (also its output folder's name by default).
      output_dir: where results.json/.csv and the PNG are.
      results: one CaseResult per (case, reader) and one SaveResult per (save case, writer),
        in run order.
      report: the published report (rows with ratios, file paths, Markdown); None off rank 0.
    """

    run_id: str
    output_dir: Path
    results: list[ArmOutcome]
    report: PublishedReport | None

    @property
    def failures(self) -> list[ArmOutcome]:
        """The (case, arm) results that failed."""
        return [r for r in self.results if r.status != "ok"]


class _QuietDisplay:
    """Stands in for ProgressDisplay on torchrun ranks other than 0."""

    @contextlib.contextmanager
    def phase(self, name: str, total: float | None = None) -> Iterator[None]:
        yield None

    def drain(self, queue: Any) -> int:
        return 0


def new_run_id(now: datetime.datetime) -> str:
    """``YYYYmmddTHHMMSSZ-xxxxxx``: sortable and unique."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"


def _training_phase(run: CaseRun, config: RunConfig, storage: BenchStorage) -> list[Any]:
    """The training phase (``ckptbench.train``) on the run's endpoint, when asked for and on a
    single machine; its per-arm results (its wall time goes to the phase table)."""
    if config.train is None:
        return []
    if not isinstance(run.launcher, SpawnLauncher):
        run.say("The training phase runs on a single machine only; skipped under torchrun.")
        return []
    started = time.monotonic()
    try:
        return run_training(
            config.train, storage.bucket, storage.endpoint, storage.prefix, run.launcher, run.say
        )
    finally:
        run.phase_seconds.append(("training phase", time.monotonic() - started))


def run_benchmark(
    config: RunConfig,
    *,
    launcher: Any = None,
    out: TextIO | None = None,
    live_progress: bool | None = None,
    cases: list[Case] | None = None,
) -> RunOutcome:
    """Runs the benchmark ``config`` describes and publishes its rows.

    Args:
      config: the run (see RunConfig).
      launcher: ``SpawnLauncher`` (default) or ``TorchrunLauncher``.
      out: where the tables and notes go (stdout by default).
      live_progress: force the live progress view on or off (default: when stderr is a tty).
      cases: the cases to run, already selected (default: ``config.selected_cases()``).

    When a save phase ran on an emulator endpoint and ``config.upload_ceiling_rounds`` > 0, the
    endpoint's raw upload ceiling is measured after the cases, endpoint still up, and becomes the
    ceiling of every ``save-...`` case in the summary table (ceiling column and gcsckpt's
    fraction of it). Likewise, when loads ran and ``config.download_ceiling_rounds`` > 0, the
    raw download ceiling becomes every load case's (the load table gives each arm's fraction).

    Returns:
      RunOutcome (failed cases are in it; they do not raise).

    Raises:
      CaseError: the catalogue or the case selection is invalid.
      LocalGCSError: the local endpoint could not start.
      ValueError, RowValidationError, BigQueryPublishError, OSError: publishing failed.
    """
    out = out or sys.stdout
    launcher = launcher or SpawnLauncher(timeout_s=config.job_timeout_s)
    if cases is None:
        cases = config.selected_cases()
    started = datetime.datetime.now(datetime.UTC)
    wall_start = time.monotonic()
    run_id = new_run_id(started)
    output_dir = Path(os.path.expanduser(config.output_dir or os.path.join(RESULTS_ROOT, run_id)))
    host = collect_host_facts(probe_accelerator=config.device == "cuda")
    storage = BenchStorage(
        config.bucket, config.endpoint, config.local_gcs_dir, config.latency_ms, config.stream_mbps
    )
    display = (
        ProgressDisplay(Console(stderr=True, soft_wrap=True), live_progress)
        if launcher.is_leader
        else _QuietDisplay()
    )
    results: list[ArmOutcome] = []
    with storage, display if launcher.is_leader else contextlib.nullcontext():
        run = CaseRun(config, storage, launcher, display, out)
        run.say(
            f"Checkpoints at {storage.url} ({storage.kind} endpoint); {rounds_note(config, cases)}"
        )
        for case in cases:
            results.extend(run.case(case))
        trained = _training_phase(run, config, storage)
        ceilings = None
        save_cases = [r.case.name for r in results if r.scenario == SCENARIO_WRITE]
        if save_cases and launcher.is_leader:
            ceiling = upload_ceiling(run.say, config, storage)
            if ceiling is not None:
                ceilings = dict.fromkeys(save_cases, ceiling)
        load_cases = [r.case.name for r in results if r.scenario == SCENARIO_READ]
        if load_cases and launcher.is_leader:
            ceiling = download_ceiling(run.say, config, storage)
            if ceiling is not None:
                ceilings = {**(ceilings or {}), **dict.fromkeys(load_cases, ceiling)}
    phases = run.phase_seconds
    context = RunContext(
        run_id=run_id,
        started_at=started,
        host=host,
        storage_endpoint=storage.kind,
        gcs_bucket_name=storage.bucket,
        distributed_backend=backend_for(config.device),
        compute_accelerator_type="gpu" if config.device == "cuda" else "cpu",
        endpoint_modelled_latency_ms=config.latency_ms if storage.kind == "local" else None,
        endpoint_modelled_stream_mbps=config.stream_mbps if storage.kind == "local" else None,
    )
    report = None
    if launcher.is_leader:
        rows = [case_row(result, context) for result in results]
        train_rows = training_rows(trained, context) if trained else []
        report = publish_report(
            rows,
            output_dir,
            bigquery_table=config.bigquery_table,
            candidate=CANDIDATE,
            baseline=BASELINE,
            out=out,
            bigquery_endpoint=config.bigquery_endpoint,
            ceilings=ceilings,
            extra_rows=train_rows,
        )
        if train_rows:
            print_train_table(train_rows, config.train.note(), out)
        print(
            f"\nResults: {report.files.json_path}, {report.files.csv_path}, {report.plot_path}"
            + (
                f"; {report.bigquery_rows} rows to {config.bigquery_table}"
                if report.bigquery_rows
                else ""
            ),
            file=out,
            flush=True,
        )
        print(
            f"\nWhere the time went:\n\n{phase_table(phases, time.monotonic() - wall_start)}",
            file=out,
            flush=True,
        )
    return RunOutcome(run_id, output_dir, results, report)
