"""Publish one run's rows everywhere it asked for: files, Markdown on stdout, PNG, BigQuery."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ckptbench.publish.plot import THROUGHPUT_PNG, write_charts
from ckptbench.publish.row_files import ResultFiles, write_results
from ckptbench.publish.schema import load_columns, validate_rows
from ckptbench.publish.table import print_report
from ckptbench.record.compare import add_baseline_ratios, add_ceiling_columns

PLOT_NAME = THROUGHPUT_PNG


@dataclasses.dataclass(frozen=True)
class PublishedReport:
    """What ``publish_report`` produced.

    Attributes:
      rows: the rows as published (baseline ratios filled in).
      files: results.json / results.csv paths.
      plot_path: the throughput chart (PNG).
      charts: every chart written, file name -> path (``plot.write_charts``).
      markdown: the tables printed.
      bigquery_rows: rows inserted into BigQuery (0 when no table was given).
    """

    rows: list[dict[str, Any]]
    files: ResultFiles
    plot_path: Path
    charts: dict[str, Path]
    markdown: str
    bigquery_rows: int


def publish_report(
    rows: Sequence[Mapping[str, Any]],
    output_dir: Path | str,
    bigquery_table: str | None = None,
    candidate: str = "gcsckpt",
    baseline: str = "fsspec",
    out: TextIO | None = None,
    bigquery_endpoint: str | None = None,
    ceilings: Mapping[str, float] | None = None,
    extra_rows: Sequence[Mapping[str, Any]] = (),
) -> PublishedReport:
    """Adds baseline ratios, validates once, then writes files, prints tables, plots, inserts.

    ``ceilings`` (case id -> the endpoint's raw ceiling, bytes/s: the upload ceiling for
    ``save-...`` cases, the download ceiling for load cases) adds a ceiling column and the
    candidate's fraction of it to the summary, each arm's fraction to the load and save tables
    and the ceiling columns of the rows.

    ``extra_rows`` (e.g. the training phase's, tabulated by their own module) are validated,
    written and inserted with the others but left out of these tables; their lost times get a
    chart of their own.

    Rows are validated before anything is written, so a bad row leaves no partial output.

    Raises:
      ValueError: no rows.
      RowValidationError, BigQueryPublishError, OSError: see the publishers.
    """
    if not rows:
        raise ValueError("no result rows to publish (no case ran)")
    ratio_rows = add_ceiling_columns(
        add_baseline_ratios(rows, baseline=baseline, candidate=candidate), ceilings
    )
    columns = load_columns()
    every_row = [*ratio_rows, *extra_rows]
    validate_rows(every_row, columns)
    files = write_results(every_row, output_dir, columns)
    markdown = print_report(
        ratio_rows, out=out, candidate=candidate, baseline=baseline, ceilings=ceilings
    )
    charts = write_charts(
        ratio_rows, output_dir, training_rows=extra_rows, candidate=candidate, baseline=baseline
    )
    inserted = 0
    if bigquery_table:
        from ckptbench.publish.bigquery import publish_rows  # heavy import, only when used

        inserted = publish_rows(every_row, bigquery_table, api_endpoint=bigquery_endpoint)
    return PublishedReport(
        rows=ratio_rows,
        files=files,
        plot_path=charts[PLOT_NAME],
        charts=charts,
        markdown=markdown,
        bigquery_rows=inserted,
    )
