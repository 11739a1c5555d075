"""Turns the ranks' answers to a load job into one CaseResult, and to a save job into one
SaveResult (ok, or failed with the reason).

A (case, arm) pair fails when any rank raised, when fewer rounds than asked completed, when any
loaded entry's checksum differs from the save-time one, or when the tensor bytes committed differ
from the bytes the rank's state dict needs. Its rounds are still recorded (for diagnosis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ckptbench.harness.job import RankFailure
from ckptbench.record.case_result import STATUS_FAILED, STATUS_OK, CaseInfo, CaseResult, SaveResult
from ckptbench.record.rank_rounds import RankCounters, RoundRecord
from ckptbench.record.resources import ResourceUsage
from ckptbench.runner.manifest import SetupManifest
from ckptbench.worker.case_jobs import RANK_RESULTS, RankLoadResult, RankRound, RankSaveResult

_LISTED = 3  # keys named per failing rank in a message
_PROBLEMS = 4  # problems quoted in one error message; the rest are counted


def _message(problems: list[str]) -> str:
    more = len(problems) - _PROBLEMS
    return "; ".join(problems[:_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


def _round_problem(index: int, rank: int, record: RankRound) -> str | None:
    where = f"round {index + 1} rank {rank}"
    if record.mismatch_count:
        keys = ", ".join(record.mismatched[:_LISTED])
        return f"checksum mismatch in {where}: {record.mismatch_count} entries differ ({keys})"
    if record.missing:
        keys = ", ".join(record.missing[:_LISTED])
        return f"{where}: state-dict keys differ from the saved ones ({keys})"
    if record.committed_tensor_bytes != record.expected_bytes:
        return (
            f"{where}: {record.committed_tensor_bytes} tensor bytes loaded, "
            f"{record.expected_bytes} expected"
        )
    return None


def _rounds(ranks: Sequence[RankLoadResult | RankSaveResult]) -> list[RoundRecord]:
    """The rounds every rank completed: a load's with each rank's reader counters, a save's
    with each rank's RankSave measures (writers report no reader counters)."""
    complete = min(len(r.rounds) for r in ranks)
    loading = not any(isinstance(r, RankSaveResult) for r in ranks)
    records = []
    for index in range(complete):
        per_rank = [r.rounds[index] for r in ranks]
        saves = [p.save for p in per_rank]
        records.append(
            RoundRecord(
                rank_start_unix_s=[p.start_unix_s for p in per_rank],
                rank_end_unix_s=[p.end_unix_s for p in per_rank],
                rank_counters=(
                    [RankCounters.from_mapping(p.counters, rank) for rank, p in enumerate(per_rank)]
                    if loading
                    else None
                ),
                rank_saves=None if any(m is None for m in saves) else saves,
            )
        )
    return records


def timed_windows(gathered: Sequence[Any] | None) -> list[tuple[float, float]]:
    """Per round every rank completed, (first rank's start, last rank's end) in ``time.time()``
    seconds: the windows whose CPU counts as the load's (or save's); [] when none."""
    ranks = [g for g in gathered or () if isinstance(g, RANK_RESULTS)]
    if not ranks or len(ranks) != len(gathered or ()):
        return []
    complete = min(len(r.rounds) for r in ranks)
    return [
        (
            min(r.rounds[i].start_unix_s for r in ranks),
            max(r.rounds[i].end_unix_s for r in ranks),
        )
        for i in range(complete)
    ]


def merge_rank_results(parts: Sequence[Sequence[Any]]) -> list[Any]:
    """Per rank, one result from several jobs' gathered results (in job order): rounds and
    written bytes concatenated, the first error kept; a rank that failed in any job stays a
    RankFailure. ``parts`` are gathered lists of the same world size."""
    merged: list[Any] = []
    for entries in zip(*parts, strict=True):
        failure = next((e for e in entries if isinstance(e, RankFailure)), None)
        if failure is not None:
            merged.append(failure)
            continue
        written = {}
        if isinstance(entries[0], RankSaveResult):
            written["written_bytes"] = tuple(b for e in entries for b in e.written_bytes)
        merged.append(
            dataclasses.replace(
                entries[0],
                rounds=tuple(r for e in entries for r in e.rounds),
                error=next((e.error for e in entries if e.error), None),
                **written,
            )
        )
    return merged


def _verdict(
    gathered: Sequence[Any] | None, rounds_wanted: int, error: str | None
) -> tuple[list[RoundRecord], list[str], bool]:
    """(rounds every rank completed, problems found, whether every round verified) of one job's
    gathered rank answers; ``error`` is a problem found before or around the job."""
    problems: list[str] = [error] if error else []
    records: list[RoundRecord] = []
    verified = False
    if gathered is not None:
        failed = [g for g in gathered if isinstance(g, RankFailure)]
        problems += [f.message for f in failed]
        answers = [g for g in gathered if isinstance(g, RANK_RESULTS)]
        if not failed and answers:
            problems += sorted({r.error for r in answers if r.error})
            records = _rounds(answers)
            found = [
                _round_problem(index, rank, answer.rounds[index])
                for index in range(len(records))
                for rank, answer in enumerate(answers)
            ]
            problems += [p for p in found if p]
            if len(records) < rounds_wanted and not problems:
                problems.append(f"only {len(records)} of {rounds_wanted} rounds completed")
            verified = not problems and len(records) == rounds_wanted
    if not problems and not records:
        problems.append("the job returned no rounds")
    return records, problems, verified


def load_result(
    info: CaseInfo,
    reader: str,
    gathered: Sequence[Any] | None,
    rounds_wanted: int,
    *,
    manifest: SetupManifest | None,
    reader_options: Mapping[str, Any],
    resources: ResourceUsage | None = None,
    error: str | None = None,
) -> CaseResult:
    """The CaseResult of one load job.

    Args:
      info: the case. reader: the reader's name.
      gathered: per-rank results (RankLoadResult or RankFailure), or None when the job gave
        none (then ``error`` says why).
      rounds_wanted: rounds the job was asked for.
      manifest: the checkpoint's setup manifest (physical size, object count).
      reader_options: recorded with the row (``reader_options_json``).
      resources: process-tree usage during the job.
      error: a failure found before or around the job (launch error, setup failure).
    """
    records, problems, verified = _verdict(gathered, rounds_wanted, error)
    return CaseResult(
        case=info,
        reader=reader,
        rounds=records,
        status=STATUS_FAILED if problems else STATUS_OK,
        error_message=_message(problems) if problems else None,
        checksums_verified=verified,
        checkpoint_physical_size_bytes=manifest.physical_size_bytes if manifest else None,
        checkpoint_object_count=manifest.object_count if manifest else None,
        reader_options=dict(reader_options),
        resources=resources,
    )


def save_result(
    info: CaseInfo,
    writer: str,
    gathered: Sequence[Any] | None,
    rounds_wanted: int,
    *,
    writer_options: Mapping[str, Any],
    resources: ResourceUsage | None = None,
    error: str | None = None,
) -> SaveResult:
    """The SaveResult of one save job (``info`` named ``save-...``): fails like a load job,
    and also when rank 0 reports saves of different sizes. Its physical size is the bytes one
    save left in storage (rank 0's ``written_bytes``), None when rank 0 reported none.

    Args: as ``load_result``'s, with ``writer``/``writer_options`` (``writer_options_json``)
    for the reader's, and RankSaveResults for RankLoadResults.
    """
    sizes: set[int] = set()
    for entry in gathered or ():
        if isinstance(entry, RankSaveResult) and entry.rank == 0:
            sizes = set(entry.written_bytes)
    if error is None and gathered is not None and len(sizes) > 1:
        error = f"saves of {writer} wrote different sizes: {sorted(sizes)} bytes"
    records, problems, verified = _verdict(gathered, rounds_wanted, error)
    return SaveResult(
        case=info,
        writer=writer,
        rounds=records,
        status=STATUS_FAILED if problems else STATUS_OK,
        error_message=_message(problems) if problems else None,
        checksums_verified=verified,
        checkpoint_physical_size_bytes=max(sizes) if sizes else None,
        writer_options=dict(writer_options),
        resources=resources,
    )
