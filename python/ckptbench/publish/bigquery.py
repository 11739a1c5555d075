"""Publish result rows to a BigQuery table: create it from bigquery_schema.json if absent, check
an existing table has every column, validate rows, then stream them with ``insertAll``.

Credentials: Application Default Credentials (google-auth) for real BigQuery; anonymous when an
``api_endpoint`` is given (a local emulator such as bqemulator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from google.api_core.client_options import ClientOptions
from google.api_core.exceptions import NotFound
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from ckptbench.publish.schema import Column, load_columns, validate_rows

# insertAll accepts up to 50,000 rows / 10 MB per request; our rows are ~3 KB each.
_INSERT_BATCH_ROWS = 500
# Project ids may be domain-scoped ("example.com:my-project"); only then may they hold dots.
_TABLE_ID = re.compile(
    r"^((?:[a-z][a-z0-9.\-]*:)?[a-z][a-z0-9\-]*[a-z0-9])\.([A-Za-z0-9_]+)\.([A-Za-z0-9_\-$]+)$"
)


class BigQueryPublishError(RuntimeError):
    """The table cannot take the rows (missing columns) or BigQuery rejected some rows."""


def parse_table_id(table_id: str) -> tuple[str, str, str]:
    """Splits ``project.dataset.table`` into its parts.

    Raises:
      ValueError: the id does not have that form (the message quotes it).
    """
    match = _TABLE_ID.match(table_id or "")
    if not match:
        raise ValueError(
            f"BigQuery table {table_id!r} must look like project.dataset.table "
            "(e.g. my-project.benchmarks.checkpoint_read)"
        )
    return match.group(1), match.group(2), match.group(3)


def make_client(project: str, api_endpoint: str | None = None) -> bigquery.Client:
    """A BigQuery client for ``project``; anonymous against ``api_endpoint`` when one is given."""
    if api_endpoint:
        return bigquery.Client(
            project=project,
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=api_endpoint),
        )
    return bigquery.Client(project=project)


def schema_fields(columns: Sequence[Column]) -> list[bigquery.SchemaField]:
    """BigQuery SchemaFields for the columns, descriptions included."""
    return [
        bigquery.SchemaField(c.name, c.type, mode=c.mode, description=c.description or None)
        for c in columns
    ]


def ensure_table(
    client: bigquery.Client,
    table_id: str,
    columns: Sequence[Column],
    create_dataset: bool = False,
) -> bigquery.Table:
    """Returns the table, creating it (and, if asked, its dataset) when absent.

    Raises:
      BigQueryPublishError: an existing table lacks some of ``columns`` (they are named).
      google.api_core.exceptions.NotFound: the dataset is missing and ``create_dataset`` is False.
    """
    project, dataset, _ = parse_table_id(table_id)
    try:
        table = client.get_table(table_id)
    except NotFound:
        if create_dataset:
            client.create_dataset(f"{project}.{dataset}", exists_ok=True)
        table = client.create_table(
            bigquery.Table(table_id, schema=schema_fields(columns)), exists_ok=True
        )
    present = {field.name for field in table.schema}
    missing = [c.name for c in columns if c.name not in present]
    if missing:
        raise BigQueryPublishError(
            f"BigQuery table {table_id} lacks columns {missing}; add them (see "
            "python/ckptbench/publish/bigquery_schema.json) before publishing"
        )
    return table


def _row_id(row: Mapping[str, Any]) -> str:
    # insertAll de-duplicates retried inserts by this id (best effort, about a minute).
    return f"{row['run_id']}/{row['benchmark_case_id']}/{row['workload_implementation']}"


def publish_rows(
    rows: Sequence[Mapping[str, Any]],
    table_id: str,
    client: bigquery.Client | None = None,
    schema_path: Path | str | None = None,
    create_dataset: bool = False,
    api_endpoint: str | None = None,
) -> int:
    """Validates ``rows`` against the schema, ensures the table exists, inserts one row each.

    Args:
      rows: result rows (``metrics.case_row``); TIMESTAMP values are ISO strings.
      table_id: ``project.dataset.table``.
      client: a client to use; by default one for the table's project (see ``make_client``).
      schema_path: schema file; defaults to bigquery_schema.json.
      create_dataset: create the dataset too when the table is absent.
      api_endpoint: BigQuery REST endpoint to use instead of Google's (emulators).

    Returns:
      The number of rows inserted.

    Raises:
      ValueError: a malformed ``table_id``.
      RowValidationError: a row does not fit the schema (nothing is sent).
      BigQueryPublishError: the table lacks columns, or BigQuery rejected rows (with its reasons).
    """
    project, _, _ = parse_table_id(table_id)
    columns = load_columns(schema_path)
    validate_rows(rows, columns)
    if not rows:
        return 0
    client = client or make_client(project, api_endpoint)
    table = ensure_table(client, table_id, columns, create_dataset=create_dataset)
    names = [c.name for c in columns]
    for start in range(0, len(rows), _INSERT_BATCH_ROWS):
        batch = rows[start : start + _INSERT_BATCH_ROWS]
        payload = [{n: row[n] for n in names if row.get(n) is not None} for row in batch]
        errors = client.insert_rows_json(table, payload, row_ids=[_row_id(r) for r in batch])
        if errors:
            raise BigQueryPublishError(
                f"BigQuery rejected rows {start}..{start + len(batch) - 1} of {table_id}: "
                f"{errors[:5]}"
            )
    return len(rows)
