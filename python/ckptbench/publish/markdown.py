"""The one Markdown table writer of the benchmark's reports (load, save and training tables, the
range-read and cold-restart tables), and its number cells."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MISSING = "n/a"  # a value the run could not measure


def _cell(text: Any) -> str:
    # A '|' inside a cell would end it; newlines would end the row.
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: one header row, one row per ``body`` entry (cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in body)
    return "\n".join(lines)


def number_cell(value: float | None, fmt: str, scale: float = 1.0, missing: str = MISSING) -> str:
    """``value / scale`` formatted with ``fmt`` (e.g. ``.2f``), or ``missing`` for None."""
    if value is None:
        return missing
    return format(value if scale == 1.0 else value / scale, fmt)
