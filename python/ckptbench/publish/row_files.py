"""results.json and results.csv: the run's rows on disk, in schema column order; other JSON
documents (the range-read benchmark's) written the same way.

The CSV has every schema column (null as an empty field, booleans as true/false) so it can be
loaded into BigQuery by column name, as the gcsfs subsystem benchmarks load theirs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ckptbench.publish.schema import Column, load_columns, validate_rows

JSON_NAME = "results.json"
CSV_NAME = "results.csv"


@dataclasses.dataclass(frozen=True)
class ResultFiles:
    """Paths of the written files."""

    json_path: Path
    csv_path: Path


def _csv_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float
    return str(value)


def _replace_atomically(path: Path, write: Any) -> None:
    # A reader (or a crashed run) never sees a half-written file.
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        write(f)
    os.replace(tmp, path)


def write_results(
    rows: Sequence[Mapping[str, Any]],
    output_dir: Path | str,
    columns: Sequence[Column] | None = None,
) -> ResultFiles:
    """Validates ``rows`` and writes ``results.json`` (a list of objects) and ``results.csv``.

    Args:
      rows: result rows (``metrics.case_row``).
      output_dir: folder to write into; created if missing.
      columns: schema columns; defaults to bigquery_schema.json.

    Raises:
      RowValidationError: a row does not fit the schema (nothing is written).
      OSError: the folder or files cannot be written.
    """
    columns = list(columns) if columns is not None else load_columns()
    validate_rows(rows, columns)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [c.name for c in columns]
    ordered = [{name: row.get(name) for name in names} for row in rows]

    def write_json(f: Any) -> None:
        json.dump(ordered, f, indent=1, allow_nan=False)
        f.write("\n")

    def write_csv(f: Any) -> None:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(names)
        for row in ordered:
            writer.writerow([_csv_text(row[name]) for name in names])

    files = ResultFiles(json_path=out / JSON_NAME, csv_path=out / CSV_NAME)
    _replace_atomically(files.json_path, write_json)
    _replace_atomically(files.csv_path, write_csv)
    return files


def write_json_document(path: Path | str, document: Any) -> None:
    """Writes any JSON-serializable ``document`` to ``path`` (indented, replaced atomically).

    Raises:
      TypeError: a value is not JSON-serializable. OSError: the file cannot be written.
    """

    def write(f: Any) -> None:
        json.dump(document, f, indent=1)
        f.write("\n")

    _replace_atomically(Path(path), write)


def read_results_json(path: Path | str) -> list[dict[str, Any]]:
    """Reads rows back from a results.json. Raises ValueError if it is not a list of objects."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: expected a JSON list of row objects")
    return rows
