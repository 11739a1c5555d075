"""What a run prints about itself besides the tables: how many rounds each arm runs, and where
the run's time went."""

from __future__ import annotations

from ckptbench.cases.catalogue import Case
from ckptbench.roles import BASELINE, CANDIDATE
from ckptbench.runner.config import RunConfig


def rounds_note(config: RunConfig, cases: list[Case]) -> str:
    """One line saying how many timed rounds each reader runs (they may differ)."""
    if not cases:
        return "No cases selected."
    per_reader = []
    for reader in config.readers:
        loaded = [c for c in cases if reader in config.readers_for(c.name)]
        counts = sorted({config.rounds_for(reader, c.rounds) for c in loaded})
        where = "" if len(loaded) == len(cases) else f" on {len(loaded)} of {len(cases)} cases"
        per_reader.append(f"{reader} {'/'.join(str(n) for n in counts)}{where}")
    note = f"Timed rounds per case: {', '.join(per_reader)}."
    saved = [c for c in cases if config.saves_case(c.name)]
    if saved:
        per_writer = []
        for writer in config.writers:
            counts = sorted({config.save_rounds_for(c.rounds, writer) for c in saved})
            per_writer.append(f"{writer} {'/'.join(str(n) for n in counts)}")
        note += (
            f" Timed saves per writer: {', '.join(per_writer)} on {len(saved)} case(s), each "
            "verified by a stock load."
        )
    candidate_most = max(config.rounds_for(CANDIDATE, c.rounds) for c in cases)
    if (
        BASELINE in config.readers
        and config.baseline_rounds is not None
        and config.baseline_rounds < candidate_most
    ):
        note += (
            f" The stock {BASELINE} baseline runs fewer (--baseline_rounds="
            f"{config.baseline_rounds}): it needs minutes per round on these cases."
        )
    return note


def phase_table(phases: list[tuple[str, float]], total_s: float) -> str:
    """Markdown: wall seconds of every job of the run (where the time went), and the total.

    Args:
      phases: (job label, wall seconds) in run order.
      total_s: the whole run's wall time, seconds (setup of the endpoint, publishing included).
    """
    lines = ["| job | wall s |", "|---|---|"]
    lines += [f"| {label} | {seconds:.1f} |" for label, seconds in phases]
    jobs = sum(seconds for _, seconds in phases)
    lines.append(f"| all jobs | {jobs:.1f} |")
    lines.append(f"| whole run (endpoint, setup checks, publishing included) | {total_s:.1f} |")
    return "\n".join(lines)
