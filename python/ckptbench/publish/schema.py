"""The result table's columns (from bigquery_schema.json) and validation of rows against them.

Rows are validated before they are written or inserted: bqemulator answers 500 to every later
request once it has been sent an invalid row, and BigQuery rejects the whole insert batch.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).parent / "bigquery_schema.json"

_TYPES = ("STRING", "INTEGER", "FLOAT", "BOOLEAN", "TIMESTAMP")
_MODES = ("NULLABLE", "REQUIRED")
_INT64 = (-(2**63), 2**63 - 1)
_MAX_LISTED = 20


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: BigQuery standard type name, mode (NULLABLE or REQUIRED), description."""

    name: str
    type: str
    mode: str
    description: str


class RowValidationError(ValueError):
    """Rows do not fit the schema; ``problems`` lists each one (row index, column, why)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listed = "\n  ".join(self.problems[:_MAX_LISTED])
        more = len(self.problems) - _MAX_LISTED
        suffix = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(f"{len(self.problems)} schema problem(s):\n  {listed}{suffix}")


def load_columns(path: Path | str | None = None) -> list[Column]:
    """Reads a BigQuery JSON schema file (a list of {name, type, mode, description}).

    Raises:
      ValueError: duplicate names, or a type/mode this project does not emit (naming the column).
    """
    schema_path = Path(path) if path is not None else SCHEMA_PATH
    with open(schema_path, encoding="utf-8") as f:
        fields = json.load(f)
    columns: list[Column] = []
    seen: set[str] = set()
    for field in fields:
        column = Column(
            name=field["name"],
            type=field["type"].upper(),
            mode=field.get("mode", "NULLABLE").upper(),
            description=field.get("description", ""),
        )
        if column.name in seen:
            raise ValueError(f"{schema_path}: column {column.name!r} is declared twice")
        if column.type not in _TYPES or column.mode not in _MODES:
            raise ValueError(
                f"{schema_path}: column {column.name!r} has unsupported type/mode "
                f"{column.type}/{column.mode}"
            )
        seen.add(column.name)
        columns.append(column)
    return columns


def column_names(path: Path | str | None = None) -> list[str]:
    """Column names in schema order."""
    return [c.name for c in load_columns(path)]


def _value_problem(column: Column, value: Any) -> str | None:
    """Why ``value`` does not fit ``column``, or None if it fits."""
    if value is None:
        return "is REQUIRED but null" if column.mode == "REQUIRED" else None
    kind = column.type
    if kind == "STRING" and isinstance(value, str):
        return None
    if kind == "BOOLEAN" and isinstance(value, bool):
        return None
    if kind == "INTEGER" and isinstance(value, int) and not isinstance(value, bool):
        return None if _INT64[0] <= value <= _INT64[1] else f"{value} is outside INT64"
    if kind == "FLOAT" and isinstance(value, int | float) and not isinstance(value, bool):
        return None if math.isfinite(value) else f"{value} is not finite"
    if kind == "TIMESTAMP" and isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            return f"{value!r} is not an ISO-8601 timestamp"
        return None if moment.tzinfo is not None else f"{value!r} has no time zone"
    return f"expected {kind}, got {type(value).__name__} {value!r}"


def _row_label(index: int, row: Mapping[str, Any]) -> str:
    case, reader = row.get("benchmark_case_id"), row.get("workload_implementation")
    return f"row {index} (case {case!r}, reader {reader!r})"


def validate_rows(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    """Checks every row: known column names, REQUIRED columns present, values of the right type.

    STRING needs str, INTEGER an int in INT64 (not bool), FLOAT a finite int/float, BOOLEAN a
    bool, TIMESTAMP an ISO-8601 string with a time zone; NULLABLE columns may be missing/None.

    Raises:
      RowValidationError: listing every problem as "row i (case, reader): column c: why".
    """
    by_name = {c.name: c for c in columns}
    problems: list[str] = []
    for index, row in enumerate(rows):
        label = _row_label(index, row)
        for name in row:
            if name not in by_name:
                problems.append(f"{label}: column {name!r} is not in the schema")
        for column in columns:
            problem = _value_problem(column, row.get(column.name))
            if problem:
                problems.append(f"{label}: column {column.name!r}: {problem}")
    if problems:
        raise RowValidationError(problems)
