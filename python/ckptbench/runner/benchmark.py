"""The checkpoint benchmark: per case, set up once, timed loads with each reader, timed saves with
each writer.

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
from ckptbench.ceiling.download import measure_download_ceiling
from ckptbench.ceiling.upload import measure_upload_ceiling
from ckptbench.harness.job import RankFailure
from ckptbench.harness.launch import JobError, SpawnLauncher
from ckptbench.harness.local_ranks import backend_for
from ckptbench.harness.rounds import interleave
from ckptbench.publish.report import PublishedReport, publish_report
from ckptbench.publish.train_table import print_train_table
from ckptbench.record.case_result import CaseInfo, CaseResult, RunContext
from ckptbench.record.host import collect_host_facts
from ckptbench.record.metrics import case_row
from ckptbench.record.progress import ProgressDisplay
from ckptbench.record.resources import ResourceSampler, merge_usage
from ckptbench.roles import BASELINE, CANDIDATE, LOCALFS
from ckptbench.runner.case_verdict import (
    load_result,
    merge_rank_results,
    save_result,
    timed_windows,
)
from ckptbench.runner.config import RunConfig
from ckptbench.runner.manifest import (
    SetupManifest,
    delete_prefix,
    read_manifest,
    reusable,
    write_manifest,
)
from ckptbench.runner.storage import BenchStorage
from ckptbench.train.run import run_training, training_rows
from ckptbench.worker import arms
from ckptbench.worker.jobs import (
    SAVE_SEED,
    LoadJob,
    SaveJob,
    SetupJob,
    Storage,
    VerifySaveJob,
    with_verification,
)
from ckptbench.workloads.parallel.app_state import state_config_hash
from gcsckpt.io.defaults import MAX_INFLIGHT_UPLOADS

RESULTS_ROOT = os.path.join("~", ".cache", "gcsckpt", "results")


class SetupError(RuntimeError):
    """A case's checkpoint could not be saved; the message names the case and the ranks' errors."""


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What a run produced.

    Attributes:
      run_id: the invocation's id (also its output folder's name by default).
      output_dir: where results.json/.csv and the PNG are.
      results: one CaseResult per (case, reader), in run order.
      report: the published report (rows with ratios, file paths, Markdown); None off rank 0.
    """

    run_id: str
    output_dir: Path
    results: list[CaseResult]
    report: PublishedReport | None

    @property
    def failures(self) -> list[CaseResult]:
        """The (case, reader) results that failed."""
        return [r for r in self.results if r.status != "ok"]


class _QuietDisplay:
    """Stands in for ProgressDisplay on torchrun ranks other than 0."""

    @contextlib.contextmanager
    def phase(self, name: str, total: float | None = None) -> Iterator[None]:
        yield None

    def drain(self, queue: Any) -> int:
        return 0


def _any_failed(gathered: list[Any]) -> bool:
    """Whether any rank of a job failed (a RankFailure, or a result with an error)."""
    return any(isinstance(g, RankFailure) or getattr(g, "error", None) for g in gathered)


def phase_table(phases: list[tuple[str, float]], total_s: float) -> str:
    """Markdown: wall seconds of every job of the run (where the time went), and the total.

    Args:
      phases: (job label, wall seconds) in run order.
      total_s: the whole run's wall time, seconds (setup of the endpoint, publishing included).
    """
    lines = ["| job | wall s |", "|---|---|"]
    lines += [f"| {label} | {seconds:.1f} |" for label, seconds in phases]
    jobs = sum(seconds for _, seconds in phases)
    lines.append(f"| all jobs | {jobs:.1f} |")
    lines.append(f"| whole run (endpoint, setup checks, publishing included) | {total_s:.1f} |")
    return "\n".join(lines)


def save_case_info(info: CaseInfo) -> CaseInfo:
    """The save phase's CaseInfo: the load case's, named ``save-...`` (as the seed names them)."""
    name = info.name[len("load-") :] if info.name.startswith("load-") else info.name
    return dataclasses.replace(info, name=f"save-{name}")


def new_run_id(now: datetime.datetime) -> str:
    """``YYYYmmddTHHMMSSZ-xxxxxx``: sortable and unique."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"


def rounds_note(config: RunConfig, cases: list[Case]) -> str:
    """One line saying how many timed rounds each reader runs (they may differ)."""
    if not cases:
        return "No cases selected."
    per_reader = []
    for reader in config.readers:
        loaded = [c for c in cases if reader in config.readers_for(c.name)]
        counts = sorted({config.rounds_for(reader, c.rounds) for c in loaded})
        where = "" if len(loaded) == len(cases) else f" on {len(loaded)} of {len(cases)} cases"
        per_reader.append(f"{reader} {'/'.join(str(n) for n in counts)}{where}")
    note = f"Timed rounds per case: {', '.join(per_reader)}."
    saved = [c for c in cases if config.saves_case(c.name)]
    if saved:
        per_writer = []
        for writer in config.writers:
            counts = sorted({config.save_rounds_for(c.rounds, writer) for c in saved})
            per_writer.append(f"{writer} {'/'.join(str(n) for n in counts)}")
        note += (
            f" Timed saves per writer: {', '.join(per_writer)} on {len(saved)} case(s), each "
            "verified by a stock load."
        )
    candidate_most = max(config.rounds_for(CANDIDATE, c.rounds) for c in cases)
    if (
        BASELINE in config.readers
        and config.baseline_rounds is not None
        and config.baseline_rounds < candidate_most
    ):
        note += (
            f" The stock {BASELINE} baseline runs fewer (--baseline_rounds="
            f"{config.baseline_rounds}): it needs minutes per round on these cases."
        )
    return note


class _Run:
    """State of one invocation (storage, launcher, display) and the per-case steps."""

    def __init__(
        self, config: RunConfig, storage: BenchStorage, launcher: Any, display: Any, out: TextIO
    ) -> None:
        self.config = config
        self.storage = storage
        self.launcher = launcher
        self.display = display
        self.out = out
        self.phase_seconds: list[tuple[str, float]] = []  # (job label, wall s), in run order

    def reader_options(self, reader: str) -> dict[str, Any]:
        """The reader's settings recorded with its rows."""
        return arms.reader_settings(reader, emulator=self.storage.endpoint is not None)

    def writer_options(self, writer: str, local_root: str | None = None) -> dict[str, Any]:
        """The writer's settings recorded with its save rows (``local_root``: localfs's)."""
        return arms.writer_settings(
            writer, emulator=self.storage.endpoint is not None, local_root=local_root
        )

    def say(self, text: str) -> None:
        if self.launcher.is_leader:
            print(text, file=self.out, flush=True)

    def ensure_checkpoint(self, case: Case, spec: Storage) -> SetupManifest:
        """The case's manifest, after saving the checkpoint if no reusable one is stored.

        Raises:
          SetupError: a rank failed to save; or the save left no ``.metadata``.
        """
        config_hash = state_config_hash(case.model, case.parallel_dims, seed=SAVE_SEED)
        client = self.storage.client if self.launcher.is_leader else None
        why, manifest = None, None
        if self.launcher.is_leader:
            manifest = read_manifest(client, spec)
            why = reusable(client, spec, manifest, config_hash, case.world_size)
            if why is None and self.config.force_setup:
                why = "--force_setup"
        why = self.launcher.agree(why)
        if why is None:
            self.say(f"{case.name}: reusing the checkpoint at {spec.checkpoint_url}")
            return self.launcher.agree(manifest)
        if self.launcher.is_leader:
            delete_prefix(client, spec.bucket, spec.checkpoint_prefix)
            delete_prefix(client, spec.bucket, spec.setup_prefix)
        self.launcher.agree(None)  # nobody saves before the old objects are gone
        job = SetupJob(case, spec, self.config.device)
        try:
            gathered = self._timed_run(job, f"{job.label} ({why})")
        except JobError as err:
            raise SetupError(str(err)) from err
        failures = [g.message for g in gathered if isinstance(g, RankFailure)]
        if failures:
            raise SetupError(f"{job.label}: {'; '.join(failures[:4])}")
        if self.launcher.is_leader:
            manifest = write_manifest(client, spec, case.name, config_hash, case.world_size)
        return self.launcher.agree(manifest)

    def _timed_run(self, job: Any, label: str) -> list[Any]:
        """``launcher.run(job)`` under a display phase; its wall time goes to phase_seconds."""
        start = time.monotonic()
        try:
            with self.display.phase(label):
                return self.launcher.run(job, self.display.drain)
        finally:
            self.phase_seconds.append((label, time.monotonic() - start))

    def _job_round(self, job: Any) -> tuple[list[Any] | None, str | None, Any]:
        """Runs one job (one round of one arm); returns (gathered, launch error, usage).

        A save on another interpreter (an arm's own venv) runs unverified, then a
        VerifySaveJob on the runner's interpreter checks it (outside the resource sample).
        """
        gathered, error = None, None
        separate = isinstance(job, SaveJob) and job.python is not None
        if separate:
            job = dataclasses.replace(job, verify=False)
        # The runner's tree: rank processes and the local endpoint, its CPU split between them
        # inside the timed windows (0.1 s samples: a round lasts seconds); the runner's own
        # sampling is not the client's work unless the runner is a rank (torchrun).
        sampler = ResourceSampler(
            interval_s=0.1,
            endpoint_pids=self.storage.endpoint_pids,
            root_is_client=not getattr(self.launcher, "ranks_are_children", False),
        )
        sampler.start()
        try:
            gathered = self._timed_run(job, job.label + f", round {job.first_round + 1}")
        except JobError as err:
            error = str(err)
        finally:
            sampler.stop()
            usage = sampler.timed_usage(timed_windows(gathered))
        if separate and gathered is not None and not _any_failed(gathered):
            check = VerifySaveJob(job.case, job.storage, job.writer, job.device, job.first_round)
            try:
                gathered = with_verification(gathered, self._timed_run(check, check.label))
            except JobError as err:
                gathered, error = None, str(err)
        return gathered, error, usage

    def interleaved(self, jobs: dict[str, tuple[Any, int]]) -> dict[str, tuple[Any, ...]]:
        """Runs the arms' rounds interleaved: round 1 of every arm, then round 2, ... (an arm
        with fewer rounds drops out after its last). Each round is its own job on fresh rank
        processes (fresh state, fresh reader or writer, the round's own seed). An arm stops
        after a round that failed (its later rounds would only repeat the error).

        Args:
          jobs: arm name -> (a LoadJob or SaveJob template with rounds=1, its rounds).

        Returns:
          arm name -> (merged gathered results or None, first launch error or None, merged
          resource usage or None).
        """
        parts: dict[str, list[list[Any]]] = {arm: [] for arm in jobs}
        errors: dict[str, str | None] = {arm: None for arm in jobs}
        usages: dict[str, list[Any]] = {arm: [] for arm in jobs}

        def one_round(arm: str, index: int) -> bool:
            job = dataclasses.replace(jobs[arm][0], first_round=index)
            try:
                gathered, error, usage = self._job_round(job)
            except Exception as err:  # e.g. a job that cannot start: this arm fails
                gathered, error, usage = None, f"{type(err).__name__}: {err}", None
            if usage is not None:
                usages[arm].append(usage)
            if gathered is not None:
                parts[arm].append(gathered)
            if error is not None or gathered is None or _any_failed(gathered):
                errors[arm] = errors[arm] or error
                return False
            return True

        interleave({arm: rounds for arm, (_, rounds) in jobs.items()}, one_round)
        return {
            arm: (
                merge_rank_results(parts[arm]) if parts[arm] else None,
                errors[arm],
                merge_usage(usages[arm]),
            )
            for arm in jobs
        }

    def loads(
        self, case: Case, info: CaseInfo, spec: Storage, manifest: SetupManifest
    ) -> list[CaseResult]:
        """Every reader's timed rounds on the case, interleaved per round, as CaseResults
        (failed ones included, in ``--readers`` order)."""
        device = self.config.device
        jobs = {
            reader: (
                LoadJob(case, spec, reader, 1, device),
                self.config.rounds_for(reader, case.rounds),
            )
            for reader in self.config.readers_for(case.name)
        }
        outcomes = self.interleaved(jobs)
        results = []
        for reader, (_, rounds) in jobs.items():
            gathered, error, usage = outcomes[reader]
            result = load_result(
                info,
                reader,
                gathered,
                rounds,
                manifest=manifest,
                reader_options=self.reader_options(reader),
                resources=usage,
                error=error,
            )
            if result.status != "ok":
                self.say(f"{case.name} with {reader} FAILED: {result.error_message}")
            results.append(result)
        return results

    def saves(
        self, case: Case, info: CaseInfo, spec: Storage, checkpoint_bytes: int | None = None
    ) -> list[CaseResult]:
        """Every writer's timed saves on the case, interleaved per round, as CaseResults named
        ``save-...`` (a writer that fails is reported, never dropped). ``checkpoint_bytes``
        (the case's stored checkpoint) decides where the localfs reference saves
        (``arms.local_save_root``; unknown: the job's scratch dir)."""
        local_root = None
        if LOCALFS in self.config.writers:
            local_root = self.launcher.agree(arms.local_save_root(checkpoint_bytes))
        jobs = {
            writer: (
                SaveJob(
                    case,
                    spec,
                    writer,
                    1,
                    self.config.device,
                    local_root=local_root if writer == LOCALFS else None,
                ),
                self.config.save_rounds_for(case.rounds, writer),
            )
            for writer in self.config.writers
        }
        outcomes = self.interleaved(jobs)
        results = []
        for writer in self.config.writers:
            gathered, error, usage = outcomes[writer]
            result = save_result(
                save_case_info(info),
                writer,
                gathered,
                jobs[writer][1],
                writer_options=self.writer_options(
                    writer, local_root if writer == LOCALFS else None
                ),
                resources=usage,
                error=error,
            )
            if result.status != "ok":
                self.say(f"{result.case.name} with {writer} FAILED: {result.error_message}")
            results.append(result)
        return results

    def case(self, case: Case) -> list[CaseResult]:
        """All readers' results for one case, then all writers' (when the save phase runs on
        it); a setup failure fails every reader's row."""
        info = CaseInfo.from_case(case, self.config.model_scale)
        # The same objects whatever the bucket type; a resharded load reads (and, if missing,
        # saves once) the checkpoint of its saving layout.
        saved = case.saved_case
        spec = self.storage.for_case(saved.base_name)
        try:
            manifest = self.ensure_checkpoint(saved, spec)
        except Exception as err:  # any setup failure is this case's, never the run's
            message = f"setup failed: {err}"
            self.say(f"{case.name}: {message}")
            return [
                load_result(
                    info,
                    r,
                    None,
                    1,
                    manifest=None,
                    reader_options=self.reader_options(r),
                    error=message,
                )
                for r in self.config.readers_for(case.name)
            ]
        results = self.loads(case, info, spec, manifest)
        if self.config.saves_case(case.name):
            results.extend(self.saves(case, info, spec, manifest.physical_size_bytes))
        return results


# The upload ceiling's shape: as many uploads in flight as the gcsckpt writer keeps by default,
# each 64 MiB (long enough that per-request costs do not count).
CEILING_OBJECT_BYTES = 64 << 20
CEILING_CONCURRENCY = MAX_INFLIGHT_UPLOADS


def _ceiling(
    run: _Run, storage: BenchStorage, kind: str, rounds: int, measure, round_bytes, how
) -> float | None:
    """The endpoint's raw `kind` ("upload"/"download") ceiling in bytes/s (median of the
    rounds), measured now by ``measure(prefix)`` under ``<prefix>/<kind>-ceiling`` and printed
    (``round_bytes(ceiling)`` bytes per round; ``how(ceiling)`` describes the requests); None
    when not asked for (``rounds`` 0) or on real GCS (the measurement sends no credentials).
    Its objects are deleted afterwards."""
    if rounds == 0 or storage.endpoint is None:
        return None
    prefix = "/".join(p for p in (storage.prefix, f"{kind}-ceiling") if p)
    ceiling = measure(prefix)
    delete_prefix(storage.client, storage.bucket, prefix)
    rates = ", ".join(f"{round_bytes(ceiling) / t / 1e6:.0f}" for t in ceiling.seconds)
    run.say(
        f"{kind.capitalize()} ceiling of the endpoint: {ceiling.median_bytes_per_s / 1e6:.1f} MB/s"
        f" median ({rates} MB/s per round; {how(ceiling)}, {ceiling.method})"
    )
    return ceiling.median_bytes_per_s


def _upload_ceiling(run: _Run, config: RunConfig, storage: BenchStorage) -> float | None:
    """The upload ceiling (``ceiling.upload``: parallel media uploads), see :func:`_ceiling`."""
    return _ceiling(
        run,
        storage,
        "upload",
        config.upload_ceiling_rounds,
        lambda prefix: measure_upload_ceiling(
            storage.endpoint,
            storage.bucket,
            object_bytes=CEILING_OBJECT_BYTES,
            concurrency=CEILING_CONCURRENCY,
            rounds=config.upload_ceiling_rounds,
            prefix=prefix,
        ),
        lambda c: c.bytes_per_round,
        lambda c: f"{c.concurrency} x {c.object_bytes >> 20} MiB",
    )


def _download_ceiling(run: _Run, config: RunConfig, storage: BenchStorage) -> float | None:
    """The download ceiling (``ceiling.download``: 16 parallel 8 MiB ranged GETs of one 256 MiB
    object), see :func:`_ceiling`."""
    return _ceiling(
        run,
        storage,
        "download",
        config.download_ceiling_rounds,
        lambda prefix: measure_download_ceiling(
            storage.endpoint, storage.bucket, rounds=config.download_ceiling_rounds, prefix=prefix
        ),
        lambda c: c.object_bytes,
        lambda c: (
            f"{c.concurrency} x {c.range_bytes >> 20} MiB ranged GETs of {c.object_bytes >> 20} MiB"
        ),
    )


def _training_phase(run: _Run, config: RunConfig, storage: BenchStorage) -> list[Any]:
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
    results: list[CaseResult] = []
    with storage, display if launcher.is_leader else contextlib.nullcontext():
        run = _Run(config, storage, launcher, display, out)
        run.say(
            f"Checkpoints at {storage.url} ({storage.kind} endpoint); {rounds_note(config, cases)}"
        )
        for case in cases:
            results.extend(run.case(case))
        trained = _training_phase(run, config, storage)
        ceilings = None
        save_cases = [r.case.name for r in results if r.scenario == "checkpoint_write"]
        if save_cases and launcher.is_leader:
            ceiling = _upload_ceiling(run, config, storage)
            if ceiling is not None:
                ceilings = dict.fromkeys(save_cases, ceiling)
        load_cases = [r.case.name for r in results if r.scenario == "checkpoint_read"]
        if load_cases and launcher.is_leader:
            ceiling = _download_ceiling(run, config, storage)
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
