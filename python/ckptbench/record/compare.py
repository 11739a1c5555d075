"""Comparisons between result rows of one run and case: each arm's throughput over the
baseline's, the candidate's over the best peer's and over the reference arm's, and each row's
over the endpoint's raw ceiling. The rows themselves come from ``metrics.case_row``.

Every ratio is computed per scenario on its own columns (``columns.rate_columns``): a load row's
from and into ``checkpoint_read_throughput_*``, a save row's from and into
``checkpoint_write_throughput_*``. Rows are only compared within one case id, and a case id is
either a load (``load-...``) or a save (``save-...``), so a load is never divided by a save.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ckptbench.record.columns import CEILING_COLUMN, rate_columns, throughput
from ckptbench.roles import REFERENCES

Row = dict[str, Any]


def add_ceiling_columns(rows: Iterable[Row], ceilings: Mapping[str, float] | None) -> list[Row]:
    """Copies of ``rows`` with the endpoint's raw ceiling of their case (``ceilings``: case id
    -> bytes/s; the download ceiling for load cases, the upload ceiling for save cases) and the
    row's mean throughput over it (``checkpoint_{read,write}_throughput_ratio_to_ceiling``, the
    row's scenario's); rows of other cases, or without a throughput, keep None."""
    rows = [dict(row) for row in rows]
    for row in rows:
        ceiling = (ceilings or {}).get(row["benchmark_case_id"])
        if not ceiling:
            continue
        row[CEILING_COLUMN] = ceiling
        own = throughput(row)
        row[rate_columns(row).ratio("ceiling")] = None if own is None else own / ceiling
    return rows


def is_peer(implementation: str, candidate: str, baseline: str) -> bool:
    """Whether an arm is a peer: neither the candidate, nor the stock baseline, nor a
    reference (``roles.REFERENCES``, e.g. ``localfs``: a floor, not a competitor)."""
    return implementation not in (candidate, baseline, *REFERENCES)


def _same_case(rows: Iterable[Row], case: str) -> list[Row]:
    """The ok rows of ``case`` with a measured mean throughput in their own scenario's column."""
    return [row for row in rows if row["benchmark_case_id"] == case and throughput(row)]


def best_peer(rows: Iterable[Row], case: str, candidate: str, baseline: str) -> Row | None:
    """The fastest ok row of ``case`` from a peer arm (:func:`is_peer`; highest mean
    throughput in its scenario's column), or None when no peer has one."""
    peers = [
        row
        for row in _same_case(rows, case)
        if is_peer(row["workload_implementation"], candidate, baseline)
    ]
    return max(peers, key=throughput) if peers else None


def reference_row(rows: Iterable[Row], case: str) -> Row | None:
    """The ok row of ``case`` from the first reference arm (``roles.REFERENCES`` order) with a
    measured throughput, or None."""
    found = {
        row["workload_implementation"]: row
        for row in _same_case(rows, case)
        if row["workload_implementation"] in REFERENCES
    }
    return next((found[name] for name in REFERENCES if name in found), None)


def add_baseline_ratios(
    rows: Iterable[Row], baseline: str = "fsspec", candidate: str = "gcsckpt"
) -> list[Row]:
    """Copies of ``rows`` with the throughput ratio to the baseline arm of the same case, and
    on the candidate's rows the ratio to the best peer (see :func:`best_peer`) and to the
    reference arm (``localfs`` saves, see :func:`reference_row`), each in the row's own
    scenario's columns (``checkpoint_read_throughput_ratio_to_*`` on load rows,
    ``checkpoint_write_throughput_ratio_to_*`` on save rows).

    For each row whose run and case also have an ok row from ``baseline`` with a measured mean
    throughput > 0, sets ``..._ratio_to_baseline`` = row mean throughput ÷ baseline mean
    throughput (the baseline's own row gets 1.0) and ``baseline_implementation``. Rows without
    a usable baseline or without their own throughput keep None.
    """
    rows = [dict(row) for row in rows]
    baselines = {
        (row["run_id"], row["benchmark_case_id"]): throughput(row)
        for row in rows
        if row["workload_implementation"] == baseline and throughput(row)
    }
    for row in rows:
        own = throughput(row)
        rates = rate_columns(row)
        if row["workload_implementation"] == candidate and own:
            same_run = [r for r in rows if r["run_id"] == row["run_id"]]
            peer = best_peer(same_run, row["benchmark_case_id"], candidate, baseline)
            if peer is not None:
                row[rates.ratio("best_peer")] = own / throughput(peer)
                row["best_peer_implementation"] = peer["workload_implementation"]
            reference = reference_row(same_run, row["benchmark_case_id"])
            if reference is not None:
                row[rates.ratio("reference")] = own / throughput(reference)
                row["reference_implementation"] = reference["workload_implementation"]
        reference = baselines.get((row["run_id"], row["benchmark_case_id"]))
        if reference is None:
            continue
        row["baseline_implementation"] = baseline
        row[rates.ratio("baseline")] = None if own is None else own / reference
    return rows
