"""The training benchmark's table: per layout, every arm's cost in the training loop, with the
training time lost per checkpoint as ratios to the floor (localfs), to the best peer (the
lowest of the msc / dataflux modes) and to stock (fsspec-sync), and client CPU per GB beside
the floor's; and, where both ran, the node-local tier's cost (``gcsckpt+local-<mode>`` against
``gcsckpt-<mode>``, lost time per checkpoint on vs off). Reads the rows only
(``ckptbench.train.train_rows``), so any results.json can be tabulated again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ckptbench.publish.markdown import markdown_table, number_cell
from ckptbench.roles import BASELINE, CANDIDATE, LOCAL_TIER, LOCALFS, PEERS

STOCK_ARM = f"{BASELINE}-sync"
LOST = "train_lost_seconds_per_checkpoint"
CPU = "train_client_cpu_seconds_per_gb"
_RATIOS = ("floor", "best_peer", "best_peer_arm", "stock", "cpu_floor")
HEADER = (
    "layout",
    "arm",
    "checkpoints verified",
    "lost s/ckpt",
    "x floor",
    "x best peer",
    "x stock",
    "blocked s/ckpt",
    "step inflation",
    "to durable s",
    "peak RSS MiB (+ over control)",
    "client CPU s/GB",
    "CPU x floor",
)


def _ratio(value: Any, other: Any) -> float | None:
    if value is None or other is None or other <= 0:
        return None
    return value / other


def _text(value: Any, digits: int = 2, suffix: str = "") -> str:
    return number_cell(value, f".{digits}f", missing="-") + ("" if value is None else suffix)


def ratios(rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> dict[str, Any]:
    """``row``'s lost time over the floor's, the best peer's and stock's (same case), its CPU per
    GB over the floor's, and which peer arm was best; None where one is missing or <= 0."""
    same = [r for r in rows if r["benchmark_case_id"] == row["benchmark_case_id"]]
    ok = [r for r in same if r["status"] == "ok" and r.get(LOST) is not None]

    def arm(name: str) -> Mapping[str, Any] | None:
        return next((r for r in ok if r["workload_implementation"] == name), None)

    peers = [r for r in ok if r["workload_implementation"].split("-")[0] in PEERS]
    best = min(peers, key=lambda r: r[LOST], default=None)
    floor, stock = arm(LOCALFS), arm(STOCK_ARM)
    return {
        "floor": _ratio(row.get(LOST), floor and floor[LOST]),
        "best_peer": _ratio(row.get(LOST), best and best[LOST]),
        "best_peer_arm": best and best["workload_implementation"],
        "stock": _ratio(row.get(LOST), stock and stock[LOST]),
        "cpu_floor": _ratio(row.get(CPU), floor and floor.get(CPU)),
    }


def local_tier_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per case and mode where both ran ok: the training time lost per checkpoint with the
    node-local tier on (``gcsckpt+local-<mode>``) and off (``gcsckpt-<mode>``), seconds."""
    ok = {
        (r["benchmark_case_id"], r["workload_implementation"]): r
        for r in rows
        if r["status"] == "ok" and r.get(LOST) is not None
    }
    lines = []
    for (case, arm), on in ok.items():
        if not arm.startswith(f"{LOCAL_TIER}-"):
            continue
        mode = arm[len(LOCAL_TIER) + 1 :]
        off = ok.get((case, f"{CANDIDATE}-{mode}"))
        if off is None:
            continue
        layout = f"{on['checkpoint_strategy']} ws{on['world_size']}"
        lines.append(
            f"{layout} local tier, {mode}: {on[LOST]:.2f} s lost per checkpoint on"
            f" ({arm}), {off[LOST]:.2f} s off ({CANDIDATE}-{mode}),"
            f" {on[LOST] - off[LOST]:+.2f} s"
        )
    return lines


def train_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of the training rows (every arm, failed ones with their error)."""
    body = []
    notes = []
    for row in rows:
        name = row["workload_implementation"]
        layout = f"{row['checkpoint_strategy']} ws{row['world_size']}"
        if row["status"] != "ok":
            body.append([layout, name, "FAILED", *[""] * (len(HEADER) - 3)])
            notes.append(f"{layout} {name}: {row['error_message']}")
            continue
        got = ratios(rows, row) if row["train_checkpoint_count"] else dict.fromkeys(_RATIOS)
        count = row["train_checkpoint_count"] or 0
        verified = "-" if not count else f"{count}/{count}" if row["checksums_verified"] else "NO"
        peak = row["save_rss_peak_bytes_per_rank_max"]
        over = row["train_rss_peak_over_control_bytes"]
        rss = "-" if peak is None else f"{peak / 2**20:.0f}"
        if over is not None:
            rss += f" ({over / 2**20:+.0f})"
        body.append(
            [
                layout,
                name,
                verified,
                _text(row[LOST]),
                _text(got["floor"], 1, "x"),
                _text(got["best_peer"], 2, "x"),
                _text(got["stock"], 3, "x"),
                _text(row["train_blocked_seconds_per_checkpoint"]),
                _text(row["train_step_inflation_ratio"], 2, "x"),
                _text(row["train_time_to_durable_seconds"]),
                rss,
                _text(row[CPU], 1),
                _text(got["cpu_floor"], 1, "x"),
            ]
        )
    text = markdown_table(HEADER, body)
    notes = local_tier_lines(rows) + notes
    if notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in notes)
    return text


def print_train_table(rows: Sequence[Mapping[str, Any]], note: str, out: TextIO) -> str:
    """Prints ``note`` and the table to ``out``; returns the table."""
    text = train_markdown(rows)
    print(f"\n### Saves in a training loop\n\n{note}\n\n{text}", file=out, flush=True)
    return text
