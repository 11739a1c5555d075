"""Comparisons between result rows of one run and case: each arm's throughput over the
baseline's, the candidate's over the best peer's and over the reference arm's, and each row's
over the endpoint's raw ceiling. The rows themselves come from ``metrics.case_row``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ckptbench.record.case_result import STATUS_OK
from ckptbench.record.columns import (
    CEILING_COLUMN,
    CEILING_RATIO_COLUMN,
    PEER_RATIO_COLUMN,
    RATIO_COLUMN,
    REFERENCE_RATIO_COLUMN,
    THROUGHPUT_COLUMN,
)
from ckptbench.roles import REFERENCES

Row = dict[str, Any]


def add_ceiling_columns(rows: Iterable[Row], ceilings: Mapping[str, float] | None) -> list[Row]:
    """Copies of ``rows`` with the endpoint's raw ceiling of their case (``ceilings``: case id
    -> bytes/s; the download ceiling for load cases, the upload ceiling for save cases) and the
    row's mean throughput over it; rows of other cases, or without a throughput, keep None."""
    rows = [dict(row) for row in rows]
    for row in rows:
        ceiling = (ceilings or {}).get(row["benchmark_case_id"])
        if not ceiling:
            continue
        row[CEILING_COLUMN] = ceiling
        own = row.get(THROUGHPUT_COLUMN) if row.get("status") == STATUS_OK else None
        row[CEILING_RATIO_COLUMN] = None if own is None else own / ceiling
    return rows


def is_peer(implementation: str, candidate: str, baseline: str) -> bool:
    """Whether an arm is a peer: neither the candidate, nor the stock baseline, nor a
    reference (``roles.REFERENCES``, e.g. ``localfs``: a floor, not a competitor)."""
    return implementation not in (candidate, baseline, *REFERENCES)


def best_peer(rows: Iterable[Row], case: str, candidate: str, baseline: str) -> Row | None:
    """The fastest ok row of ``case`` from a peer arm (:func:`is_peer`; highest mean
    throughput), or None when no peer has one."""
    peers = [
        row
        for row in rows
        if row["benchmark_case_id"] == case
        and is_peer(row["workload_implementation"], candidate, baseline)
        and row.get("status") == STATUS_OK
        and row.get(THROUGHPUT_COLUMN)
    ]
    return max(peers, key=lambda row: row[THROUGHPUT_COLUMN]) if peers else None


def reference_row(rows: Iterable[Row], case: str) -> Row | None:
    """The ok row of ``case`` from the first reference arm (``roles.REFERENCES`` order) with a
    measured throughput, or None."""
    found = {
        row["workload_implementation"]: row
        for row in rows
        if row["benchmark_case_id"] == case
        and row["workload_implementation"] in REFERENCES
        and row.get("status") == STATUS_OK
        and row.get(THROUGHPUT_COLUMN)
    }
    return next((found[name] for name in REFERENCES if name in found), None)


def add_baseline_ratios(
    rows: Iterable[Row], baseline: str = "fsspec", candidate: str = "gcsckpt"
) -> list[Row]:
    """Copies of ``rows`` with the throughput ratio to the baseline reader of the same case,
    and on the candidate's rows the ratio to the best peer (see :func:`best_peer`) and to the
    reference arm (``localfs`` saves, see :func:`reference_row`).

    For each row whose run and case also have a row from ``baseline`` with a measured mean
    throughput > 0, sets ``checkpoint_read_throughput_ratio_to_baseline`` = row mean throughput ÷
    baseline mean throughput (the baseline's own row gets 1.0) and ``baseline_implementation``.
    Rows without a usable baseline or without their own throughput keep None.
    """
    rows = [dict(row) for row in rows]
    baselines = {
        (row["run_id"], row["benchmark_case_id"]): row[THROUGHPUT_COLUMN]
        for row in rows
        if row["workload_implementation"] == baseline and row.get(THROUGHPUT_COLUMN)
    }
    for row in rows:
        own = row.get(THROUGHPUT_COLUMN)
        if row["workload_implementation"] == candidate and own:
            same_run = [r for r in rows if r["run_id"] == row["run_id"]]
            peer = best_peer(same_run, row["benchmark_case_id"], candidate, baseline)
            if peer is not None:
                row[PEER_RATIO_COLUMN] = own / peer[THROUGHPUT_COLUMN]
                row["best_peer_implementation"] = peer["workload_implementation"]
            reference = reference_row(same_run, row["benchmark_case_id"])
            if reference is not None:
                row[REFERENCE_RATIO_COLUMN] = own / reference[THROUGHPUT_COLUMN]
                row["reference_implementation"] = reference["workload_implementation"]
        reference = baselines.get((row["run_id"], row["benchmark_case_id"]))
        if reference is None:
            continue
        row["baseline_implementation"] = baseline
        row[RATIO_COLUMN] = None if own is None else own / reference
    return rows
