"""BigQuery publishing: the schema file, row validation, and a real round trip through a local
bqemulator (DuckDB-backed BigQuery REST) started by the test."""

import datetime
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import duckdb
import pytest
from google.cloud import bigquery

from ckptbench.publish.bigquery import (
    BigQueryPublishError,
    make_client,
    parse_table_id,
    publish_rows,
    schema_fields,
)
from ckptbench.publish.schema import (
    SCHEMA_PATH,
    Column,
    RowValidationError,
    column_names,
    load_columns,
    validate_rows,
)
from ckptbench.record.columns import READ, WRITE
from tests.bench.publish_fixtures import RUN, MiB, save_rows, two_reader_rows

PROJECT = "gcsckpt-test"


def test_schema_file_parses_with_the_bigquery_library():
    columns = load_columns()
    offline = make_client(PROJECT, api_endpoint="http://127.0.0.1:9")  # parses locally, no calls
    parsed = offline.schema_from_json(str(SCHEMA_PATH))
    assert [f.name for f in parsed] == column_names()
    assert [f.field_type for f in parsed] == [c.type for c in columns]
    assert all(f.description for f in parsed)
    required = {c.name for c in columns if c.mode == "REQUIRED"}
    assert required == {
        "run_id",
        "run_started_at",
        "benchmark_case_id",
        "workload_implementation",
        "status",
    }
    assert [f.to_api_repr() for f in schema_fields(columns)] == [f.to_api_repr() for f in parsed]


COLUMNS = [
    Column("n", "INTEGER", "REQUIRED", ""),
    Column("x", "FLOAT", "NULLABLE", ""),
    Column("ok", "BOOLEAN", "NULLABLE", ""),
    Column("at", "TIMESTAMP", "NULLABLE", ""),
    Column("s", "STRING", "NULLABLE", ""),
]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"x": 1.0}, "column 'n': is REQUIRED but null"),
        ({"n": True}, "column 'n': expected INTEGER, got bool True"),
        ({"n": 2**63}, "outside INT64"),
        ({"n": 1, "x": float("nan")}, "column 'x': nan is not finite"),
        ({"n": 1, "ok": 1}, "column 'ok': expected BOOLEAN, got int 1"),
        ({"n": 1, "at": "2026-11-30T12:00:00"}, "has no time zone"),
        ({"n": 1, "at": "yesterday"}, "not an ISO-8601 timestamp"),
        ({"n": 1, "s": 5}, "column 's': expected STRING, got int 5"),
        ({"n": 1, "extra": "?"}, "column 'extra' is not in the schema"),
    ],
)
def test_validation_names_row_column_and_reason(row, problem):
    with pytest.raises(RowValidationError, match=problem) as err:
        validate_rows([{"n": 1}, row], COLUMNS)
    assert err.value.problems[0].startswith("row 1 ")


def test_valid_values_pass():
    validate_rows([{"n": 3, "x": 2, "ok": False, "at": "2026-11-30T12:00:00Z", "s": ""}], COLUMNS)


@pytest.mark.parametrize("bad", ["", "dataset.table", "p.d.t.x", "P.d.t", "p.d-x.t"])
def test_table_id_must_be_project_dataset_table(bad):
    with pytest.raises(ValueError, match="project.dataset.table"):
        parse_table_id(bad)


def test_table_id_parts():
    assert parse_table_id("my-proj.bench_results.checkpoint_read") == (
        "my-proj",
        "bench_results",
        "checkpoint_read",
    )
    assert parse_table_id("example.com:proj.d.t") == ("example.com:proj", "d", "t")


def _link_spatial_extension(home: Path) -> None:
    """bqemulator runs ``INSTALL spatial``, which downloads unless the extension is already in
    ``$HOME/.duckdb/extensions/<version>/<platform>``; link the offline wheel's copy there."""
    package = Path(find_spec("duckdb_extension_spatial").submodule_search_locations[0])
    version = f"v{duckdb.__version__}"
    source = package / "extensions" / version / "spatial.duckdb_extension"
    platform = duckdb.connect().execute("PRAGMA platform").fetchone()[0]
    target = home / ".duckdb" / "extensions" / version / platform
    target.mkdir(parents=True)
    (target / "spatial.duckdb_extension").symlink_to(source)


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:  # keep draining so the emulator never blocks on a full pipe
        lines.put(line)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """URL of a fresh bqemulator on a free port (in-memory DuckDB)."""
    home = tmp_path_factory.mktemp("bq-home")
    _link_spatial_extension(home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bqemulator", "start", "--rest-port", "0", "--grpc-port", "0"]
        + ["--project", PROJECT, "--log-format", "json", "--log-level", "info"],
        env={**os.environ, "HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    port, seen, deadline = None, [], time.monotonic() + 90
    try:
        while port is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"bqemulator did not report its port; output: {''.join(seen)}")
            seen.append(line)
            if '"rest.listen"' in line:
                port = json.loads(line)["port"]
        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/bigquery/v2/projects/{PROJECT}/datasets", timeout=10):
            pass
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read_back(client, table_id, run_id):
    query = f"SELECT * FROM `{table_id}` WHERE run_id = @run ORDER BY benchmark_case_id DESC"
    config = bigquery.QueryJobConfig(
        query_parameters=[bigquery.ScalarQueryParameter("run", "STRING", run_id)]
    )
    return [dict(r) for r in client.query(query, job_config=config).result()]


def test_publish_creates_table_inserts_and_reads_back_every_value(endpoint):
    client = make_client(PROJECT, api_endpoint=endpoint)
    table_id = f"{PROJECT}.bench.checkpoint_read"
    rows = two_reader_rows()
    assert publish_rows(rows, table_id, client=client, create_dataset=True) == 4

    table = client.get_table(table_id)
    assert [f.name for f in table.schema] == column_names()
    stored = _read_back(client, table_id, RUN.run_id)
    assert len(stored) == 4
    by_key = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in stored}
    started = datetime.datetime.fromisoformat(rows[0]["run_started_at"])
    for row in rows:
        back = by_key[(row["benchmark_case_id"], row["workload_implementation"])]
        for name, value in row.items():
            expected = started if name == "run_started_at" else value
            assert back[name] == expected, name
    ep = by_key[("load-olmoe_1b_7b_0924-ep-dp2ep2-ws2", "gcsckpt")]
    assert ep[READ.mean] == 1e9
    assert ep[WRITE.mean] is None and ep["writer_options_json"] is None
    assert ep["checkpoint_read_throughput_ratio_to_baseline"] == pytest.approx(50.0)
    assert by_key[("load-olmoe_1b_7b_0924-fsdp-ws2", "fsspec")]["status"] == "failed"

    # A second run appends to the existing table.
    second = [dict(r, run_id="run-2") for r in rows[:2]]
    assert publish_rows(second, table_id, client=client) == 2
    assert len(_read_back(client, table_id, "run-2")) == 2
    assert len(_read_back(client, table_id, RUN.run_id)) == 4


def test_invalid_rows_are_never_sent(endpoint):
    client = make_client(PROJECT, api_endpoint=endpoint)
    table_id = f"{PROJECT}.bench.invalid_rows"
    rows = two_reader_rows()
    publish_rows(rows[:1], table_id, client=client, create_dataset=True)
    bad = [dict(r, run_id="run-bad") for r in rows]
    bad[2]["read_amplification_ratio"] = float("inf")
    with pytest.raises(RowValidationError, match="row 2 .*read_amplification_ratio"):
        publish_rows(bad, table_id, client=client)
    # The emulator is still healthy (an invalid row would have made it answer 500 from now on)
    # and no row of the rejected batch landed.
    assert _read_back(client, table_id, "run-bad") == []
    assert len(_read_back(client, table_id, RUN.run_id)) == 1


def test_existing_table_missing_columns_is_refused(endpoint):
    client = make_client(PROJECT, api_endpoint=endpoint)
    client.create_dataset(f"{PROJECT}.legacy", exists_ok=True)
    table_id = f"{PROJECT}.legacy.old_schema"
    old = [f for f in schema_fields(load_columns()) if f.name != "read_amplification_ratio"]
    client.create_table(bigquery.Table(table_id, schema=old))
    with pytest.raises(BigQueryPublishError, match=r"lacks columns \['read_amplification_ratio'\]"):
        publish_rows(two_reader_rows(), table_id, client=client)
    assert list(client.list_rows(table_id)) == []


def test_save_rows_round_trip_with_memory_phase_and_reference_columns(endpoint):
    client = make_client(PROJECT, api_endpoint=endpoint)
    table_id = f"{PROJECT}.bench.checkpoint_write"
    rows = [dict(r, run_id="run-saves") for r in save_rows()]
    assert publish_rows(rows, table_id, client=client, create_dataset=True) == 3
    stored = {r["workload_implementation"]: r for r in _read_back(client, table_id, "run-saves")}
    started = datetime.datetime.fromisoformat(rows[0]["run_started_at"])
    for row in rows:
        back = stored[row["workload_implementation"]]
        for name, value in row.items():
            expected = started if name == "run_started_at" else value
            assert back[name] == expected, name
    ours = stored["gcsckpt"]
    assert ours["save_rss_peak_bytes_per_rank_max"] == 300 * MiB
    assert ours["save_rss_peak_within_bound"] is True
    assert stored["localfs"]["save_rss_peak_within_bound"] is False
    assert ours["save_data_phase_throughput_mean_bytes_per_second"] == 1e9
    assert ours["reference_implementation"] == "localfs"
    assert ours["checkpoint_write_throughput_ratio_to_reference"] == pytest.approx(0.5)
    assert ours[WRITE.mean] == 5e8 and ours[READ.mean] is None
    assert ours["writer_options_json"] == '{"class": "gcsckpt"}'
    assert ours["reader_options_json"] is None
    assert ours["best_peer_implementation"] == "msc"
