"""One case of the load and save benchmark, step by step: make sure its checkpoint is stored
(a setup job when no reusable one is), every reader's timed rounds, then every writer's timed
saves, arms interleaved per round (``harness.rounds.interleave``), each round a job on fresh rank
processes with the process tree's CPU and memory sampled over its timed windows; the ranks'
answers become one CaseResult per reader and one SaveResult per writer (``case_verdict``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, TextIO

from ckptbench.cases.catalogue import Case
from ckptbench.harness.job import RankFailure
from ckptbench.harness.launch import JobError
from ckptbench.harness.rounds import interleave
from ckptbench.record.case_result import ArmOutcome, CaseInfo, CaseResult, SaveResult
from ckptbench.record.resources import ResourceSampler, merge_usage
from ckptbench.roles import LOCALFS
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
from ckptbench.worker import arms
from ckptbench.worker.case_jobs import (
    SAVE_SEED,
    LoadJob,
    SaveJob,
    SetupJob,
    Storage,
    VerifySaveJob,
    with_verification,
)
from ckptbench.workloads.parallel.app_state import state_config_hash


class SetupError(RuntimeError):
    """A case's checkpoint could not be saved; the message names the case and the ranks' errors."""


def _any_failed(gathered: list[Any]) -> bool:
    """Whether any rank of a job failed (a RankFailure, or a result with an error)."""
    return any(isinstance(g, RankFailure) or getattr(g, "error", None) for g in gathered)


def save_case_info(info: CaseInfo) -> CaseInfo:
    """The save phase's CaseInfo: the load case's, named ``save-...`` (as the seed names them)."""
    name = info.name[len("load-") :] if info.name.startswith("load-") else info.name
    return dataclasses.replace(info, name=f"save-{name}")


class CaseRun:
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
    ) -> list[SaveResult]:
        """Every writer's timed saves on the case, interleaved per round, as SaveResults named
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

    def case(self, case: Case) -> list[ArmOutcome]:
        """All readers' results for one case (CaseResults), then all writers' (SaveResults, when
        the save phase runs on it); a setup failure fails every reader's row."""
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
        results: list[ArmOutcome] = list(self.loads(case, info, spec, manifest))
        if self.config.saves_case(case.name):
            results.extend(self.saves(case, info, spec, manifest.physical_size_bytes))
        return results
