"""The scaling program's tables and log-log PNG.

A row is one arm at one point of one axis (``Row``); ``real_rows`` / ``simulated_rows`` make them
from the measured points. Tables go through ``publish.markdown``; the PNG has one panel per axis
with a line per arm and cost (matplotlib's object API on the Agg canvas, as ``publish.plot``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ckptbench.publish.markdown import markdown_table, number_cell
from ckptbench.scaling.fit import growth_exponent
from ckptbench.scaling.real import RealPoint
from ckptbench.scaling.simulated import GCSCKPT, SimulatedPoint

ITEMS, BYTES, RANKS, SIMULATED = "items per rank", "MB per rank", "ranks", "simulated ranks"
_AXIS_LABEL = {ITEMS: "items per rank", BYTES: "MB per rank", RANKS: "real ranks",
               SIMULATED: "simulated ranks (70B, FSDP + AdamW)"}  # fmt: skip
_COLOUR = {GCSCKPT: "C0", "stock": "C1"}


@dataclasses.dataclass(frozen=True)
class Row:
    """One arm at one point of one axis.

    Attributes:
      axis: ITEMS, BYTES, RANKS or SIMULATED. x: the axis value (items, MB, ranks).
      costs: cost name -> CPU seconds of one rank (``save``/``load`` for real axes, the most of
        any rank on the ranks axis; ``decode``/``plan`` for the simulated one).
      items: storage items of one rank (ReadItems of its plan when simulated).
      nbytes: tensor bytes of one rank (0 when simulated). metadata_bytes: ``.metadata`` size.
    """

    axis: str
    x: float
    arm: str
    costs: dict
    items: int
    nbytes: int
    metadata_bytes: int

    @property
    def total_s(self) -> float:
        """The row's costs summed: the cost whose growth is fitted and drawn."""
        return sum(self.costs.values())


def real_rows(axis: str, x: float, points: Sequence[RealPoint]) -> Row:
    """The row of one arm's points (one per rank): the busiest rank's save and load CPU."""
    first = points[0]
    costs = {
        "save": max(p.save_cpu_s for p in points),
        "load": max(p.load_cpu_s for p in points),
    }
    return Row(axis, x, first.arm, costs, first.items, first.nbytes, first.metadata_bytes)


def simulated_rows(points: Sequence[SimulatedPoint]) -> list[Row]:
    """One row per simulated point: decode and plan CPU of the rank."""
    return [
        Row(
            SIMULATED,
            p.ranks,
            p.arm,
            {"decode": p.decode_s, "plan": p.plan_s},
            p.items,
            0,
            p.metadata_bytes,
        )  # fmt: skip
        for p in points
    ]


def exponents(rows: Sequence[Row]) -> dict[tuple[str, str, str], float]:
    """(axis, arm, cost) -> growth exponent of that cost (and of ``total``) over the axis."""
    out: dict = {}
    keys = sorted({(r.axis, r.arm) for r in rows})
    for axis, arm in keys:
        mine = sorted((r for r in rows if (r.axis, r.arm) == (axis, arm)), key=lambda r: r.x)
        if len(mine) < 2:
            continue
        for cost in [*mine[0].costs, "total"]:
            values = [r.total_s if cost == "total" else r.costs[cost] for r in mine]
            if min(values) > 0:
                out[(axis, arm, cost)] = growth_exponent([r.x for r in mine], values)
    return out


def axis_table(rows: Sequence[Row], axis: str) -> str:
    """Markdown table of one axis: CPU per cost, µs per item, CPU-s per GB, ``.metadata``."""
    mine = sorted((r for r in rows if r.axis == axis), key=lambda r: (r.x, r.arm))
    if not mine:
        return ""
    names = list(mine[0].costs)
    header = [_AXIS_LABEL[axis], "arm", "items", *(f"{n} CPU s" for n in names),
              *(f"{n} µs/item" for n in names), "load CPU-s/GB", ".metadata MB"]  # fmt: skip
    body = []
    for r in mine:
        per_gb = r.costs["load"] / (r.nbytes / 1e9) if r.nbytes else None
        body.append([
            f"{r.x:g}", r.arm, r.items,
            *(number_cell(r.costs[n], ".3f") for n in names),
            *(number_cell(r.costs[n] / r.items * 1e6, ".1f") for n in names),
            number_cell(per_gb, ".2f"), number_cell(r.metadata_bytes, ".2f", 1e6),
        ])  # fmt: skip
    return markdown_table(header, body)


def exponent_table(fits: dict) -> str:
    """Markdown table: axis, arm, cost, growth exponent."""
    body = [[axis, arm, cost, f"{k:.2f}"] for (axis, arm, cost), k in sorted(fits.items())]
    return markdown_table(["axis", "arm", "cost", "exponent"], body)


def write_png(rows: Sequence[Row], path: str | Path) -> Path:
    """Log-log PNG: one panel per axis present, a line per (arm, cost) of CPU seconds."""
    axes_present = [a for a in (ITEMS, BYTES, RANKS, SIMULATED) if any(r.axis == a for r in rows)]
    figure = Figure(figsize=(5.0 * len(axes_present), 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, len(axes_present), squeeze=False)[0]
    for panel, axis in zip(panels, axes_present, strict=True):
        mine = sorted((r for r in rows if r.axis == axis), key=lambda r: r.x)
        for arm in dict.fromkeys(r.arm for r in mine):
            arm_rows = [r for r in mine if r.arm == arm]
            for style, cost in zip(("-", "--"), arm_rows[0].costs, strict=False):
                panel.plot([r.x for r in arm_rows], [r.costs[cost] for r in arm_rows],
                           style, marker="o", color=_COLOUR.get(arm, "C2"),
                           label=f"{arm} {cost}")  # fmt: skip
        panel.set_xscale("log")
        panel.set_yscale("log")
        ticks = sorted({r.x for r in mine})
        panel.set_xticks(ticks, [f"{x:g}" for x in ticks])
        panel.minorticks_off()
        panel.set_xlabel(_AXIS_LABEL[axis])
        panel.set_ylabel("CPU s (one rank)")
        panel.set_title(axis)
        panel.grid(True, which="both", alpha=0.3)
        panel.legend(fontsize=8)
    figure.suptitle("gcsckpt vs stock DCP: cost as one axis grows (log-log)")
    path = Path(path)
    figure.savefig(path)
    return path
