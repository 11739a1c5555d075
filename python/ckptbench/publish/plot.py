"""PNG charts of one run: throughput, client CPU per GB and, when the training phase ran, the
training time lost per checkpoint.

Every chart has one panel per case (cases differ by orders of magnitude and run different arms)
with one horizontal bar per arm: the arm's name is the bar's tick label, so nothing needs a
legend and no label is cut or overlaps another. The value is printed at the bar's end; ratios
stay in the tables. An arm keeps its colour across panels and charts. An axis turns
logarithmic when the arms of a panel differ by more than 20x, so the slower arm stays visible.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display, no global backend
switch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ckptbench.publish.table import reader_order
from ckptbench.publish.train_table import LOST
from ckptbench.record.columns import (
    CLIENT_CPU_PER_GB_COLUMN,
    ENDPOINT_CPU_PER_GB_COLUMN,
    rate_columns,
)
from ckptbench.roles import LOCALFS

Row = Mapping[str, Any]
THROUGHPUT_PNG = "throughput.png"
CPU_PNG = "cpu_per_gb.png"
TRAINING_PNG = "training.png"
_MB = 1e6
_LOG_SCALE_SPREAD = 20.0
_PALETTE = [f"C{i}" for i in range(10)]
_WIDTH_IN = 9.0
_BAR_IN = 0.34  # height per bar, inches
_PANEL_IN = 0.9  # title and axis per panel, inches


def _colours(arms: Sequence[str]) -> dict[str, str]:
    return {arm: _PALETTE[i % len(_PALETTE)] for i, arm in enumerate(arms)}


def _ok(row: Row | None, column: str) -> float | None:
    if row is None or row.get("status") != "ok" or row.get(column) is None:
        return None
    return float(row[column])


def _panels(cases: Sequence[str], arms_per_case: Sequence[int], title: str) -> tuple[Figure, list]:
    heights = [_PANEL_IN + _BAR_IN * max(1, n) for n in arms_per_case]
    figure = Figure(figsize=(_WIDTH_IN, sum(heights) + 0.6), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(len(cases), 1, height_ratios=heights)
    axes = [figure.add_subplot(grid[i, 0]) for i in range(len(cases))]
    figure.suptitle(title)
    return figure, axes


def _bar_panel(
    axes,
    case: str,
    arms: Sequence[str],
    value: Callable[[str], tuple[float, float, float] | None],
    failed: Callable[[str], bool],
    colours: Mapping[str, str],
    xlabel: str,
    fmt: str,
    stacked: Callable[[str], float] | None = None,
) -> list[float]:
    """Draws one case's bars (top to bottom in ``arms`` order); returns the plotted values.

    ``value(arm)`` is (bar, whisker low, whisker high) or None for no bar; ``stacked(arm)`` a
    grey segment drawn after the bar (labelled with the bar's value + its own); a failed arm
    without a bar is written ``failed`` at the axis' start."""
    ys, widths, lows, highs, colour, extra = [], [], [], [], [], []
    for y, arm in enumerate(arms):
        got = value(arm)
        if got is None:
            if failed(arm):
                axes.annotate(
                    "failed",
                    (0.01, y),
                    xycoords=("axes fraction", "data"),
                    va="center",
                    fontsize=8,
                    color="tab:red",
                )
            continue
        ys.append(y)
        widths.append(got[0])
        lows.append(got[0] - got[1])
        highs.append(got[2] - got[0])
        colour.append(colours[arm])
        extra.append(stacked(arm) if stacked else 0.0)
    if ys and stacked:
        axes.barh(ys, widths, color=colour, height=0.7)
        grey = axes.barh(ys, extra, left=widths, color="0.8", height=0.7, hatch="//")
        labels = [(fmt % w) + " + " + (fmt % e) for w, e in zip(widths, extra, strict=True)]
        axes.bar_label(grey, labels=labels, fontsize=8, padding=4)
    elif ys:
        spread = [lows, highs] if any(lows) or any(highs) else None
        bars = axes.barh(ys, widths, color=colour, xerr=spread, capsize=2, height=0.7)
        axes.bar_label(bars, fmt=fmt, fontsize=8, padding=4)
    positive = [w for w in widths if w > 0]
    ends = [w + h + e for w, h, e in zip(widths, highs, extra, strict=True)]
    if positive and max(positive) / min(positive) > _LOG_SCALE_SPREAD:
        axes.set_xscale("log")
        axes.set_xlim(min(positive) / 2, max(ends) * 8)
    elif positive:
        axes.set_xlim(0, max(ends) * 1.35)  # room for the value labels
    axes.set_yticks(range(len(arms)), arms, fontsize=8)
    axes.set_ylim(len(arms) - 0.5, -0.5)  # first arm on top
    axes.set_title(case, fontsize=9, loc="left")
    axes.set_xlabel(xlabel, fontsize=8)
    axes.tick_params(axis="x", labelsize=8)
    axes.grid(axis="x", alpha=0.3)
    return widths


def _cases(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(row["benchmark_case_id"] for row in rows))


def _arms_of(rows: Sequence[Row], case: str, order: Sequence[str]) -> list[str]:
    present = {r["workload_implementation"] for r in rows if r["benchmark_case_id"] == case}
    return [arm for arm in order if arm in present]


def _case_panels(
    rows: Sequence[Row], order: Sequence[str], title: str
) -> tuple[Figure, list[tuple[Any, str]], dict[str, list[str]], dict[tuple[str, str], Row]]:
    """A figure with one panel per case of ``rows``: (figure, [(axes, case)], case -> its arms
    in ``order``, (case, arm) -> row)."""
    lookup = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in rows}
    cases = _cases(rows)
    arms = {case: _arms_of(rows, case, order) for case in cases}
    figure, panels = _panels(cases, [len(arms[c]) for c in cases], title)
    return figure, list(zip(panels, cases, strict=True)), arms, lookup


def build_throughput_figure(
    rows: Sequence[Row], candidate: str = "gcsckpt", baseline: str = "fsspec"
) -> Figure:
    """One panel per case: each arm's mean throughput (MB/s = 1e6 bytes/s; loads: bytes loaded,
    ``save-...`` cases: bytes written), whiskers at the slowest and fastest round.

    Raises ValueError if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no result rows to plot")
    order = reader_order(rows, candidate, baseline)
    colours = _colours(order)
    figure, panels, arms, lookup = _case_panels(
        rows, order, "Checkpoint throughput per case and arm (load-...: loaded, save-...: written)"
    )
    for axes, case in panels:

        def value(arm: str, case: str = case) -> tuple[float, float, float] | None:
            row = lookup.get((case, arm))
            rates = rate_columns(row or {})
            mean = _ok(row, rates.mean)
            if mean is None:
                return None
            low = row.get(rates.stat("min")) or mean
            high = row.get(rates.stat("max")) or mean
            return mean / _MB, low / _MB, high / _MB

        _bar_panel(
            axes,
            case,
            arms[case],
            value,
            lambda arm, case=case: (case, arm) in lookup,
            colours,
            "MB/s, mean of rounds (whiskers: slowest and fastest round)",
            "%.1f",
        )
    return figure


def build_cpu_figure(
    rows: Sequence[Row], candidate: str = "gcsckpt", baseline: str = "fsspec"
) -> Figure | None:
    """One panel per case: each arm's client CPU seconds per GB moved (the rank processes, what
    the training node pays), then in grey the endpoint's CPU per GB (it shares this machine's
    cores). None when no row measured CPU."""
    measured = [r for r in rows if _ok(r, CLIENT_CPU_PER_GB_COLUMN) is not None]
    if not measured:
        return None
    order = reader_order(rows, candidate, baseline)
    colours = _colours(order)
    figure, panels, arms, lookup = _case_panels(
        measured, order, "CPU seconds per GB: client (colour) + the local endpoint (grey)"
    )
    for axes, case in panels:

        def value(arm: str, case: str = case) -> tuple[float, float, float] | None:
            client = _ok(lookup.get((case, arm)), CLIENT_CPU_PER_GB_COLUMN)
            return None if client is None else (client, client, client)

        def endpoint(arm: str, case: str = case) -> float:
            return _ok(lookup.get((case, arm)), ENDPOINT_CPU_PER_GB_COLUMN) or 0.0

        _bar_panel(
            axes,
            case,
            arms[case],
            value,
            lambda arm: False,
            colours,
            "CPU s per GB (1e9 bytes) loaded or written",
            "%.2f",
            stacked=endpoint,
        )
    return figure


def build_training_figure(rows: Sequence[Row]) -> Figure | None:
    """One panel per training layout: each arm's training time lost per checkpoint (seconds,
    against the loop without checkpoints), a dashed line at the floor (``localfs``: torch's
    writer into tmpfs). The control arm itself (no checkpoints) is left out. None when no row
    has the lost-time column."""
    trained = [r for r in rows if LOST in r and r.get("train_checkpoint_count")]
    if not trained:
        return None
    order = list(dict.fromkeys(r["workload_implementation"] for r in trained))
    colours = _colours(order)
    titles = {
        r["benchmark_case_id"]: f"{r['checkpoint_strategy']} ws{r['world_size']}" for r in trained
    }
    figure, panels, arms, lookup = _case_panels(
        trained, order, "Training time lost per checkpoint (dashed: the floor, localfs)"
    )
    for axes, case in panels:

        def value(arm: str, case: str = case) -> tuple[float, float, float] | None:
            lost = _ok(lookup.get((case, arm)), LOST)
            return None if lost is None else (lost, lost, lost)

        _bar_panel(
            axes,
            titles[case],
            arms[case],
            value,
            lambda arm, case=case: lookup[(case, arm)].get("status") != "ok",
            colours,
            "seconds lost per checkpoint",
            "%.2f",
        )
        floor = _ok(lookup.get((case, LOCALFS)), LOST)
        if floor:
            axes.axvline(floor, color="0.3", linestyle="--", linewidth=1)
    return figure


def _write(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def write_throughput_plot(
    rows: Sequence[Row],
    path: Path | str,
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
) -> Path:
    """Renders ``build_throughput_figure`` to a PNG at ``path`` (parent folders created)."""
    return _write(build_throughput_figure(rows, candidate, baseline), Path(path))


def write_charts(
    rows: Sequence[Row],
    output_dir: Path | str,
    training_rows: Sequence[Row] = (),
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
) -> dict[str, Path]:
    """Writes every chart the rows allow into ``output_dir``: ``throughput.png`` always,
    ``cpu_per_gb.png`` when CPU was measured, ``training.png`` when ``training_rows`` (the
    training phase's) hold lost times. Returns file name -> path."""
    folder = Path(output_dir)
    written = {
        THROUGHPUT_PNG: write_throughput_plot(rows, folder / THROUGHPUT_PNG, candidate, baseline)
    }
    cpu = build_cpu_figure(rows, candidate, baseline)
    if cpu is not None:
        written[CPU_PNG] = _write(cpu, folder / CPU_PNG)
    training = build_training_figure(training_rows)
    if training is not None:
        written[TRAINING_PNG] = _write(training, folder / TRAINING_PNG)
    return written
