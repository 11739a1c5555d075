"""Markdown comparison of readers: a summary (throughput per reader and the candidate/baseline
ratio per case, plus the candidate/best-peer ratio when peer arms ran), a load table (each arm's
fraction of the download ceiling, client and endpoint CPU per GB, storage bytes per checkpoint
byte), a save table when saves ran (where a save's time goes, whole ``dcp.save`` against its
data phase, CPU per GB, and each rank's memory) and a detail table (timings, requests,
amplification, resources per row). Save rows (case ids ``save-...``) sit in the summary and
detail tables too, their throughput being bytes written per second of the whole ``dcp.save``
(``checkpoint_write_throughput_*``; a load row's is ``checkpoint_read_throughput_*``).
Reference arms (``localfs``) are shown, never counted as peers.

Throughput is shown in MB/s (10**6 bytes per second), the unit of the design notes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ckptbench.publish.markdown import MISSING, markdown_table, number_cell
from ckptbench.record.case_result import SCENARIO_READ, SCENARIO_WRITE
from ckptbench.record.columns import (
    CLIENT_CPU_PER_GB_COLUMN,
    DATA_PHASE_THROUGHPUT_COLUMN,
    ENDPOINT_CPU_PER_GB_COLUMN,
    READ,
    STORAGE_RATIO_COLUMN,
    rate_columns,
    throughput,
)
from ckptbench.record.compare import best_peer, is_peer

Row = Mapping[str, Any]
_MB = 1e6
_MiB = 2**20


def reader_order(rows: Sequence[Row], candidate: str, baseline: str) -> list[str]:
    """Readers present in ``rows``: candidate first, baseline second, others by appearance."""
    seen = list(dict.fromkeys(row["workload_implementation"] for row in rows))
    front = [r for r in (candidate, baseline) if r in seen]
    return front + [r for r in seen if r not in front]


def throughput_ratio(rows: Sequence[Row], case: str, candidate: str, baseline: str) -> float | None:
    """Candidate mean throughput ÷ baseline mean throughput for ``case``; None if either is
    missing, failed or zero."""
    by_reader = {r["workload_implementation"]: r for r in rows if r["benchmark_case_id"] == case}
    top, bottom = throughput(by_reader.get(candidate)), throughput(by_reader.get(baseline))
    if top is None or not bottom:
        return None
    return top / bottom


def peer_ratio(rows: Sequence[Row], case: str, candidate: str, baseline: str) -> str:
    """``4.5x (msc)``: the candidate's mean throughput over the best peer's on ``case``, naming
    the peer; ``n/a`` when the candidate or every peer failed or is missing."""
    top = throughput(
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
        return MISSING
    return f"{top / throughput(peer):.1f}x ({peer['workload_implementation']})"


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
    peers = [r for r in readers if is_peer(r, candidate, baseline)]
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
                cells.append(MISSING)
            elif row.get("status") != "ok":
                cells.append("failed")
            else:
                cells.append(number_cell(throughput(row), ".1f", _MB))
        ratio = throughput_ratio(rows, case, candidate, baseline)
        cells.append(MISSING if ratio is None else f"{ratio:.1f}x")
        if peers:
            cells.append(peer_ratio(rows, case, candidate, baseline))
        if ceilings:
            ceiling = ceilings.get(case)
            top = throughput(by_reader.get(candidate))
            cells.append(number_cell(ceiling, ".1f", _MB))
            cells.append(MISSING if ceiling is None or top is None else f"{top / ceiling:.2f}")
        body.append([case, *cells])
    return markdown_table(header, body)


def _fraction(value: float | None, ceiling: float | None) -> str:
    return MISSING if value is None or not ceiling else f"{value / ceiling:.2f}"


def save_table(
    rows: Sequence[Row],
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    ceilings: Mapping[str, float] | None = None,
) -> str:
    """One line per save row (``checkpoint_write``): where the save's time went and each rank's
    memory; "" when there are none.

    Columns: the whole ``dcp.save`` (mean seconds, MB/s, fraction of the upload ceiling, client
    and endpoint CPU seconds per GB written, ``metrics.cpu_per_gb_columns``), its
    data phase (the longest rank's ``write_data`` until its future's value was ready: seconds,
    "upload-phase" MB/s = bytes written / data phase, fraction of the ceiling), the rest of the
    save (DCP's own planning, pickling and collectives, the writer's planning and finish), the
    candidate's whole-save throughput over this writer's (on the ``localfs`` reference's line:
    how close the candidate comes to a save whose storage is nearly free), and memory: the
    highest peak RSS of any rank, that rank's bound (1.1 x its state bytes + 256 MiB), whether
    every rank stayed within its own bound, and the largest peak-minus-start increase (what the
    save itself added). Absolute RSS includes torch's libraries (the printed note gives their
    size) and the state; the figures are printed, never asserted.

    Args:
      rows: result rows (``metrics.case_row``).
      candidate, baseline: the candidate arm (its ratio column) and the stock arm.
      ceilings: case id -> the endpoint's upload ceiling, bytes/s (n/a where absent).
    """
    saves = [r for r in rows if r.get("workload_scenario") == SCENARIO_WRITE]
    if not saves:
        return ""
    ceilings = ceilings or {}
    header = [
        "case",
        "writer",
        "status",
        "whole dcp.save s",
        "whole dcp.save MB/s",
        "whole / ceiling",
        "client CPU s/GB",
        "endpoint CPU s/GB",
        "data phase s",
        "data phase MB/s",
        "data phase / ceiling",
        "outside data phase s",
        f"{candidate} / this writer",
        "peak RSS MiB (max rank)",
        "bound MiB (that rank)",
        "every rank within bound",
        "peak - start MiB (max rank)",
    ]
    order = reader_order(saves, candidate, baseline)
    cases = list(dict.fromkeys(r["benchmark_case_id"] for r in saves))
    body = []
    for case in cases:
        by_writer = {
            r["workload_implementation"]: r for r in saves if r["benchmark_case_id"] == case
        }
        ours = throughput(by_writer.get(candidate))
        ceiling = ceilings.get(case)
        for writer in (w for w in order if w in by_writer):
            row = by_writer[writer]
            whole = throughput(row)
            data = row.get(DATA_PHASE_THROUGHPUT_COLUMN) if whole is not None else None
            within = row.get("save_rss_peak_within_bound")
            body.append(
                [
                    case,
                    writer,
                    row.get("status", MISSING),
                    number_cell(row.get("round_duration_mean_seconds"), ".2f"),
                    number_cell(whole, ".1f", _MB),
                    _fraction(whole, ceiling),
                    number_cell(row.get(CLIENT_CPU_PER_GB_COLUMN), ".2f"),
                    number_cell(row.get(ENDPOINT_CPU_PER_GB_COLUMN), ".2f"),
                    number_cell(row.get("save_data_phase_mean_seconds"), ".2f"),
                    number_cell(data, ".1f", _MB),
                    _fraction(data, ceiling),
                    number_cell(row.get("save_outside_data_phase_mean_seconds"), ".2f"),
                    MISSING if ours is None or not whole else f"{ours / whole:.2f}x",
                    number_cell(row.get("save_rss_peak_bytes_per_rank_max"), ".0f", _MiB),
                    number_cell(row.get("save_rss_bound_bytes_at_peak_rank"), ".0f", _MiB),
                    MISSING if within is None else ("yes" if within else "no"),
                    number_cell(row.get("save_rss_increase_bytes_per_rank_max"), ".0f", _MiB),
                ]
            )
    return markdown_table(header, body)


def load_table(rows: Sequence[Row], candidate: str = "gcsckpt", baseline: str = "fsspec") -> str:
    """One line per load row (``checkpoint_read``), arms in ``reader_order``: mean seconds,
    MB/s, fraction of the endpoint's download ceiling, client and endpoint CPU seconds per GB
    loaded, and storage bytes fetched over checkpoint bytes; "" when there are none.

    Args:
      rows: result rows with the ceiling columns filled in (``compare.add_ceiling_columns``).
      candidate, baseline: the arms put first.
    """
    loads = [r for r in rows if r.get("workload_scenario", SCENARIO_READ) == SCENARIO_READ]
    if not loads:
        return ""
    header = [
        "case",
        "reader",
        "status",
        "mean s",
        "MB/s",
        "/ download ceiling",
        "client CPU s/GB",
        "endpoint CPU s/GB",
        "storage bytes / checkpoint bytes",
        "verified",
    ]
    order = reader_order(loads, candidate, baseline)
    body = []
    for case in dict.fromkeys(r["benchmark_case_id"] for r in loads):
        by_reader = {
            r["workload_implementation"]: r for r in loads if r["benchmark_case_id"] == case
        }
        for reader in (r for r in order if r in by_reader):
            row = by_reader[reader]
            body.append(
                [
                    case,
                    reader,
                    row.get("status", MISSING),
                    number_cell(row.get("round_duration_mean_seconds"), ".2f"),
                    number_cell(throughput(row), ".1f", _MB),
                    number_cell(row.get(READ.ratio("ceiling")), ".2f"),
                    number_cell(row.get(CLIENT_CPU_PER_GB_COLUMN), ".2f"),
                    number_cell(row.get(ENDPOINT_CPU_PER_GB_COLUMN), ".2f"),
                    number_cell(row.get(STORAGE_RATIO_COLUMN), ".2f"),
                    _verified(row),
                ]
            )
    return markdown_table(header, body)


def _verified(row: Row) -> str:
    """ "verified N of M bytes" per round (all ranks): bytes checked against their block
    CRC-32C before commit, of the bytes the items occupy; n/a where the reader does not say."""
    verified = row.get("read_bytes_verified_per_round_mean")
    needed = row.get("read_bytes_needed_per_round_mean")
    if verified is None or needed is None:
        return MISSING
    return f"verified {verified / _MB:.1f} of {needed / _MB:.1f} MB"


LOAD_TABLE_NOTE = (
    "download ceiling: 16 parallel 8 MiB ranged GETs of one 256 MiB object from Python threads, "
    "measured in this run. CPU s/GB: CPU seconds (user + system, every thread) inside the timed "
    "rounds per GB (1e9 bytes) loaded; client = the rank processes (what the training node "
    "pays), endpoint = the local endpoint's nginx and server (on this machine they share the "
    "client's cores). storage bytes / checkpoint bytes: bytes the ranks fetched per round over "
    "the checkpoint's stored bytes (n/a: the reader does not count them). verified: bytes per "
    "round whose block CRC-32C was checked before commit, of the bytes the items occupy "
    "(gcsckpt-unverified: the same reader with verify=False)."
)

SAVE_TABLE_NOTE = (
    "whole dcp.save: first rank's start to last rank's end of dcp.save; data phase: the longest "
    "rank's write_data until its future's value was ready (MB/s = bytes written / data phase); "
    "outside data phase: DCP's own planning, pickling and collectives plus the writer's "
    "planning and finish. localfs is torch's stock FileSystemWriter into local tmpfs, a "
    "reference (storage nearly free), not a peer. RSS is each rank process's own, sampled every "
    "15 ms during dcp.save; absolute RSS includes torch itself (~200-400 MiB of libraries) and "
    "the state; bound = 1.1 x the rank's state bytes + 256 MiB."
)


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
        status = row.get("status", MISSING)
        if status != "ok" and row.get("error_message"):
            status = f"{status}: {row['error_message'][:120]}"
        body.append(
            [
                row["benchmark_case_id"],
                row["workload_implementation"],
                status,
                row.get("measurement_round_count", MISSING),
                number_cell(row.get("round_duration_mean_seconds"), ".2f"),
                number_cell(row.get("round_duration_p50_seconds"), ".2f"),
                number_cell(row.get("round_duration_p99_seconds"), ".2f"),
                number_cell(row.get(rate_columns(row).mean), ".1f", _MB),
                number_cell(row.get("dcp_read_items_per_rank_max"), "d"),
                number_cell(row.get("read_request_count_per_rank_max"), "d"),
                number_cell(row.get("read_amplification_ratio"), ".3f"),
                number_cell(row.get("read_retry_count_total"), "d"),
                "verified" if row.get("checksums_verified") else "NOT verified",
                number_cell(row.get("cpu_usage_peak_cores"), ".1f"),
                number_cell(row.get("memory_usage_peak_bytes"), ".2f", 2**30),
                number_cell(row.get("memory_usage_peak_bytes_per_process_max"), ".2f", 2**30),
            ]
        )
    return markdown_table(header, body)


def format_report(
    rows: Sequence[Row],
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    ceilings: Mapping[str, float] | None = None,
) -> str:
    """The tables under Markdown headings (``ceilings`` as in ``summary_table``): summary,
    loads (when any load row), saves (when any save row), details."""
    loads = load_table(rows, candidate, baseline)
    loads_section = (
        f"## Loads: time, download ceiling, CPU per GB, storage bytes\n\n{loads}\n\n"
        f"{LOAD_TABLE_NOTE}\n\n"
        if loads
        else ""
    )
    saves = save_table(rows, candidate, baseline, ceilings)
    saves_section = (
        f"## Saves: whole dcp.save vs data phase, memory per rank\n\n{saves}\n\n"
        f"{SAVE_TABLE_NOTE}\n\n"
        if saves
        else ""
    )
    return (
        f"## Checkpoint throughput ({candidate} vs {baseline} and the peers; save-... rows: "
        "bytes written)\n\n"
        f"{summary_table(rows, candidate, baseline, ceilings)}\n\n"
        f"{loads_section}"
        f"{saves_section}"
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
