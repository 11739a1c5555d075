"""The load/save cost columns from fixture rows: client and endpoint CPU per GB, storage bytes per
checkpoint byte, the download ceiling and each arm's fraction of it, and the load table."""

from __future__ import annotations

import dataclasses

import pytest

from ckptbench.publish.schema import load_columns, validate_rows
from ckptbench.publish.table import format_report, load_table, save_table
from ckptbench.record.compare import add_ceiling_columns
from ckptbench.record.metrics import case_row
from tests.bench.publish_fixtures import (
    RUN,
    SAVE_CASE,
    SIZE,
    USAGE,
    failed,
    result,
    round_of,
    save_result,
)

EP = "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2"
# Inside the timed rounds: the ranks used 3 CPU seconds, the endpoint 1.5.
SPLIT = dataclasses.replace(USAGE, client_cpu_seconds=3.0, endpoint_cpu_seconds=1.5)


def _with_usage(res, usage=SPLIT):
    return dataclasses.replace(res, resources=usage)


def test_cpu_per_gb_counts_every_round_loaded():
    # Two rounds of SIZE (1 GB) bytes: 2 GB loaded.
    row = case_row(_with_usage(result("gcsckpt", [1.0, 1.0])), RUN)
    assert (row["client_cpu_seconds"], row["endpoint_cpu_seconds"]) == (3.0, 1.5)
    assert row["client_cpu_seconds_per_gb"] == pytest.approx(1.5)
    assert row["endpoint_cpu_seconds_per_gb"] == pytest.approx(0.75)
    unsplit = case_row(result("gcsckpt", [1.0, 1.0]), RUN)  # USAGE: no split measured
    assert unsplit["client_cpu_seconds_per_gb"] is None
    assert unsplit["endpoint_cpu_seconds_per_gb"] is None
    gone = case_row(_with_usage(failed("gcsckpt")), RUN)
    assert gone["client_cpu_seconds_per_gb"] is None  # no valid rounds, no bytes loaded


def test_save_rows_count_bytes_written():
    row = case_row(_with_usage(save_result("gcsckpt", [2.0], [1.0])), RUN)
    assert row["client_cpu_seconds_per_gb"] == pytest.approx(3.0)  # one save of 1 GB
    assert row["storage_bytes_per_checkpoint_byte"] is None  # a load-only column


def test_storage_bytes_per_checkpoint_byte():
    row = case_row(result("gcsckpt", [1.0]), RUN)
    # Fixture ranks fetch 1000 and 1010 bytes of a SIZE-byte checkpoint.
    assert row["storage_bytes_per_checkpoint_byte"] == pytest.approx(2010 / SIZE)
    replicas = dataclasses.replace(result("gcsckpt", [1.0]), checkpoint_physical_size_bytes=1005)
    assert case_row(replicas, RUN)["storage_bytes_per_checkpoint_byte"] == pytest.approx(2.0)
    uncounted = [round_of([(0.0, 1.0), (0.0, 1.0)], with_counters=False)]
    msc = case_row(dataclasses.replace(result("msc", [1.0]), rounds=uncounted), RUN)
    assert msc["storage_bytes_per_checkpoint_byte"] is None


def _rows():
    rows = [
        case_row(_with_usage(result("gcsckpt", [1.0, 1.0])), RUN),  # 1000 MB/s
        case_row(_with_usage(result("msc", [4.0]), USAGE), RUN),  # 250 MB/s, no split
        case_row(_with_usage(save_result("gcsckpt", [2.0], [1.0])), RUN),
    ]
    return add_ceiling_columns(rows, {EP: 2000e6, SAVE_CASE: 1000e6})


def test_ceiling_columns_and_each_arms_fraction():
    ours, msc, save = _rows()
    assert ours["endpoint_ceiling_bytes_per_second"] == 2000e6
    assert ours["checkpoint_read_throughput_ratio_to_ceiling"] == pytest.approx(0.5)
    assert msc["checkpoint_read_throughput_ratio_to_ceiling"] == pytest.approx(0.125)
    assert save["checkpoint_write_throughput_ratio_to_ceiling"] == pytest.approx(0.5)
    assert save["checkpoint_read_throughput_ratio_to_ceiling"] is None  # a save reads nothing
    assert ours["checkpoint_write_throughput_ratio_to_ceiling"] is None
    bare = add_ceiling_columns([case_row(result("gcsckpt", [1.0]), RUN)], None)[0]
    assert bare["endpoint_ceiling_bytes_per_second"] is None
    validate_rows(_rows(), load_columns())  # the new columns are in the schema


def test_load_table_gives_fraction_cpu_and_storage_per_arm():
    lines = load_table(_rows()).splitlines()
    assert lines[0] == (
        "| case | reader | status | mean s | MB/s | / download ceiling | client CPU s/GB "
        "| endpoint CPU s/GB | storage bytes / checkpoint bytes | verified |"
    )
    # The fixture's counters: 1,000 and 999 bytes verified of 1,000 each, per rank.
    verified = "verified 0.0 of 0.0 MB"
    assert (
        lines[2]
        == f"| {EP} | gcsckpt | ok | 1.00 | 1000.0 | 0.50 | 1.50 | 0.75 | 0.00 | {verified} |"
    )
    assert lines[3] == f"| {EP} | msc | ok | 4.00 | 250.0 | 0.12 | n/a | n/a | 0.00 | {verified} |"
    assert len(lines) == 4  # the save row is in the save table
    saves = save_table(_rows(), ceilings={SAVE_CASE: 1000e6}).splitlines()
    assert f"| {SAVE_CASE} | gcsckpt | ok | 2.00 | 500.0 | 0.50 | 3.00 | 1.50 |" in saves[2]
    text = format_report(_rows())
    assert "## Loads: time, download ceiling, CPU per GB, storage bytes" in text
    assert "endpoint = the local endpoint's nginx and server" in text
