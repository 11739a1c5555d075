"""Markdown comparison of readers: a summary (throughput per reader and the candidate/baseline
ratio per case, plus the candidate/best-peer ratio when peer arms ran) and a detail table
(timings, requests, amplification, resources per row). Save rows (case ids ``save-...``) sit in
the same tables, their throughput being bytes written per second.

Throughput is shown in MB/s (10**6 bytes per second), the unit of the design notes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gcsckpt.bench.record.metrics import THROUGHPUT_COLUMN, best_peer

Row = Mapping[str, Any]
_MB = 1e6
_MISSING = "n/a"


def _cell(text: Any) -> str:
    # A '|' inside a cell would end it; newlines would end the row.
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: one header row, one row per ``body`` entry (cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in body)
    return "\n".join(lines)


def _number(value: float | None, fmt: str, scale: float = 1.0) -> str:
    if value is None:
        return _MISSING
    return format(value if scale == 1.0 else value / scale, fmt)


def _throughput(row: Row | None) -> float | None:
    if row is None or row.get("status") != "ok":
        return None
    return row.get(THROUGHPUT_COLUMN)


def reader_order(rows: Sequence[Row], candidate: str, baseline: str) -> list[str]:
    """Readers present in ``rows``: candidate first, baseline second, others by appearance."""
    seen = list(dict.fromkeys(row["workload_implementation"] for row in rows))
    front = [r for r in (candidate, baseline) if r in seen]
    return front + [r for r in seen if r not in front]


def throughput_ratio(rows: Sequence[Row], case: str, candidate: str, baseline: str) -> float | None:
    """Candidate mean throughput ÷ baseline mean throughput for ``case``; None if either is
    missing, failed or zero."""
    by_reader = {r["workload_implementation"]: r for r in rows if r["benchmark_case_id"] == case}
    top, bottom = _throughput(by_reader.get(candidate)), _throughput(by_reader.get(baseline))
    if top is None or not bottom:
        return None
    return top / bottom


def peer_ratio(rows: Sequence[Row], case: str, candidate: str, baseline: str) -> str:
    """``4.5x (msc)``: the candidate's mean throughput over the best peer's on ``case``, naming
    the peer; ``n/a`` when the candidate or every peer failed or is missing."""
    top = _throughput(
        next(
            (
                r
                for r in rows
                if r["benchmark_case_id"] == case and r["workload_implementation"] == candidate
            ),
            None,
        )
    )
    peer = best_peer(rows, case, candidate, baseline)
    if top is None or peer is None:
        return _MISSING
    return f"{top / peer[THROUGHPUT_COLUMN]:.1f}x ({peer['workload_implementation']})"


def summary_table(
    rows: Sequence[Row],
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    ceilings: Mapping[str, float] | None = None,
) -> str:
    """One line per case: each reader's mean throughput (MB/s, or ``failed``), the ratio to the
    baseline and, when any arm besides the two ran, the ratio to the best of those peers.

    Args:
      rows: result rows (``benchmark_case_id``, ``workload_implementation``, ``status``, mean
        throughput in bytes/s).
      candidate, baseline: the arms of the ratio columns.
      ceilings: case id -> the endpoint's raw ceiling for that case, bytes/s (e.g. the upload
        ceiling for ``save-...`` cases); when given, ``ceiling MB/s`` and ``<candidate>/ceiling``
        columns are added (``n/a`` for cases without one).
    """
    readers = reader_order(rows, candidate, baseline)
    cases = list(dict.fromkeys(row["benchmark_case_id"] for row in rows))
    peers = [r for r in readers if r not in (candidate, baseline)]
    header = ["case", *(f"{r} MB/s" for r in readers), f"{candidate}/{baseline}"]
    if peers:
        header.append(f"{candidate}/best peer")
    if ceilings:
        header += ["ceiling MB/s", f"{candidate}/ceiling"]
    body = []
    for case in cases:
        by_reader = {
            r["workload_implementation"]: r for r in rows if r["benchmark_case_id"] == case
        }
        cells = []
        for reader in readers:
            row = by_reader.get(reader)
            if row is None:
                cells.append(_MISSING)
            elif row.get("status") != "ok":
                cells.append("failed")
            else:
                cells.append(_number(row.get(THROUGHPUT_COLUMN), ".1f", _MB))
        ratio = throughput_ratio(rows, case, candidate, baseline)
        cells.append(_MISSING if ratio is None else f"{ratio:.1f}x")
        if peers:
            cells.append(peer_ratio(rows, case, candidate, baseline))
        if ceilings:
            ceiling = ceilings.get(case)
            top = _throughput(by_reader.get(candidate))
            cells.append(_number(ceiling, ".1f", _MB))
            cells.append(_MISSING if ceiling is None or top is None else f"{top / ceiling:.2f}")
        body.append([case, *cells])
    return markdown_table(header, body)


def detail_table(rows: Sequence[Row]) -> str:
    """One line per row: status, rounds, durations, throughput, per-rank counters, resources."""
    header = [
        "case",
        "reader",
        "status",
        "rounds",
        "mean s",
        "p50 s",
        "p99 s",
        "MB/s",
        "items/rank max",
        "requests/rank max",
        "amplification",
        "retries",
        "checksums",
        "peak cores",
        "peak RSS GiB (job)",
        "peak RSS GiB (process max)",
    ]
    body = []
    for row in rows:
        status = row.get("status", _MISSING)
        if status != "ok" and row.get("error_message"):
            status = f"{status}: {row['error_message'][:120]}"
        body.append(
            [
                row["benchmark_case_id"],
                row["workload_implementation"],
                status,
                row.get("measurement_round_count", _MISSING),
                _number(row.get("round_duration_mean_seconds"), ".2f"),
                _number(row.get("round_duration_p50_seconds"), ".2f"),
                _number(row.get("round_duration_p99_seconds"), ".2f"),
                _number(row.get(THROUGHPUT_COLUMN), ".1f", _MB),
                _number(row.get("dcp_read_items_per_rank_max"), "d"),
                _number(row.get("read_request_count_per_rank_max"), "d"),
                _number(row.get("read_amplification_ratio"), ".3f"),
                _number(row.get("read_retry_count_total"), "d"),
                "verified" if row.get("checksums_verified") else "NOT verified",
                _number(row.get("cpu_usage_peak_cores"), ".1f"),
                _number(row.get("memory_usage_peak_bytes"), ".2f", 2**30),
                _number(row.get("memory_usage_peak_bytes_per_process_max"), ".2f", 2**30),
            ]
        )
    return markdown_table(header, body)


def format_report(
    rows: Sequence[Row],
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    ceilings: Mapping[str, float] | None = None,
) -> str:
    """Both tables under Markdown headings (``ceilings`` as in ``summary_table``)."""
    return (
        f"## Checkpoint throughput ({candidate} vs {baseline} and the peers; save-... rows: "
        "bytes written)\n\n"
        f"{summary_table(rows, candidate, baseline, ceilings)}\n\n"
        f"## Details\n\n{detail_table(rows)}\n"
    )


def print_report(
    rows: Sequence[Row],
    out: TextIO | None = None,
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    ceilings: Mapping[str, float] | None = None,
) -> str:
    """Writes ``format_report`` to ``out`` (stdout by default) and returns the text."""
    text = format_report(rows, candidate, baseline, ceilings)
    (out or sys.stdout).write(text)
    return text
