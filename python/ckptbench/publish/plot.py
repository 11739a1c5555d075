"""PNG bar chart of mean throughput per case and arm, whiskers at the min/max round; each case's
label carries the candidate's ratio to the baseline, to the best peer and, for saves with the
``localfs`` reference, to that reference (from the rows' ratio columns).

Uses matplotlib's object API with the Agg canvas (no pyplot, no display, no global backend
switch). The y axis turns logarithmic when readers differ by more than 20x, so the slower
reader's bars stay visible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ckptbench.publish.table import peer_ratio, reader_order, throughput_ratio
from ckptbench.record.metrics import REFERENCE_RATIO_COLUMN, THROUGHPUT_COLUMN, is_peer

Row = Mapping[str, Any]
_MB = 1e6
_LOG_SCALE_SPREAD = 20.0


def _bar_values(row: Row | None) -> tuple[float, float, float] | None:
    """(mean, min, max) throughput in MB/s of an ok row, else None."""
    if row is None or row.get("status") != "ok" or row.get(THROUGHPUT_COLUMN) is None:
        return None
    mean = row[THROUGHPUT_COLUMN] / _MB
    low = row.get("checkpoint_read_throughput_min_bytes_per_second")
    high = row.get("checkpoint_read_throughput_max_bytes_per_second")
    return (
        mean,
        mean if low is None else low / _MB,
        mean if high is None else high / _MB,
    )


def _ratio_label(rows: Sequence[Row], case: str, candidate: str, baseline: str) -> str:
    """The candidate's ratios on ``case``: to the baseline, to the best peer when peer arms
    ran, and to the reference when its row has that ratio (e.g. ``gcsckpt: 54.0x fsspec,
    4.4x (msc) best peer``)."""
    ratio = throughput_ratio(rows, case, candidate, baseline)
    parts = [f"{ratio:.1f}x {baseline}" if ratio is not None else f"n/a {baseline}"]
    if any(is_peer(r["workload_implementation"], candidate, baseline) for r in rows):
        parts.append(f"{peer_ratio(rows, case, candidate, baseline)} best peer")
    ours = next(
        (
            r
            for r in rows
            if r["benchmark_case_id"] == case and r["workload_implementation"] == candidate
        ),
        None,
    )
    if ours is not None and ours.get(REFERENCE_RATIO_COLUMN) is not None:
        parts.append(
            f"{ours[REFERENCE_RATIO_COLUMN]:.2f}x {ours['reference_implementation']} (reference)"
        )
    return f"{candidate}: {', '.join(parts)}"


def build_throughput_figure(
    rows: Sequence[Row], candidate: str = "gcsckpt", baseline: str = "fsspec"
) -> Figure:
    """Grouped bars: one group per case, one bar per reader (height = mean MB/s).

    A reader that failed or is missing for a case gets no bar; a failed one is labelled
    ``failed`` at the group's foot. Raises ValueError if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no result rows to plot")
    readers = reader_order(rows, candidate, baseline)
    cases = list(dict.fromkeys(row["benchmark_case_id"] for row in rows))
    lookup = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in rows}
    width = 0.8 / len(readers)

    figure = Figure(figsize=(max(6.0, 1.6 * len(cases) + 2.0), 4.8), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    heights = []
    for index, reader in enumerate(readers):
        xs, means, lows, highs = [], [], [], []
        for position, case in enumerate(cases):
            x = position - 0.4 + width * (index + 0.5)
            row = lookup.get((case, reader))
            values = _bar_values(row)
            if values is None:
                if row is not None:
                    axes.annotate(
                        "failed",
                        (x, 0.02),
                        xycoords=("data", "axes fraction"),
                        ha="center",
                        va="bottom",
                        rotation=90,
                        fontsize=8,
                        color="tab:red",
                    )
                continue
            xs.append(x)
            means.append(values[0])
            lows.append(values[0] - values[1])
            highs.append(values[2] - values[0])
        if xs:
            bars = axes.bar(xs, means, width=width, label=reader, yerr=[lows, highs], capsize=3)
            axes.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
            heights.extend(means)

    positive = [h for h in heights if h > 0]
    if positive and max(positive) / min(positive) > _LOG_SCALE_SPREAD:
        axes.set_yscale("log")
    axes.set_xlim(-0.5, len(cases) - 0.5)  # fixed, so 'failed' labels stay inside the axes
    axes.set_xticks(range(len(cases)), cases, rotation=20, ha="right", fontsize=8)
    for position, case in enumerate(cases):  # the ratios, above each case's bars
        axes.annotate(
            _ratio_label(rows, case, candidate, baseline),
            (position, 0.98),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="top",
            fontsize=7,
        )
    axes.set_ylabel("throughput, MB/s (mean of rounds)")
    axes.set_title("Checkpoint load (load-...) and save (save-...) throughput per case and arm")
    if heights:
        axes.legend()
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return figure


def write_throughput_plot(
    rows: Sequence[Row],
    path: Path | str,
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
) -> Path:
    """Renders ``build_throughput_figure`` to a PNG at ``path`` (parent folders created)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure = build_throughput_figure(rows, candidate, baseline)
    figure.savefig(target, format="png")
    return target
