"""metrics.case_row / add_baseline_ratios and the CaseResult inputs: exact values, null rules."""

import json

import numpy as np
import pytest

from gcsckpt.bench.publish.schema import column_names, load_columns, validate_rows
from gcsckpt.bench.record.case_result import CaseInfo, CaseResult, RankCounters, RoundRecord
from gcsckpt.bench.record.metrics import (
    RATIO_COLUMN,
    THROUGHPUT_COLUMN,
    add_baseline_ratios,
    case_row,
    round_duration_columns,
)
from tests.bench.publish_fixtures import RUN, SIZE, USAGE, case, counters, failed, result, round_of


def test_every_emitted_column_is_in_the_schema_and_every_schema_column_is_emitted():
    for row in (case_row(result("gcsckpt", [1.0]), RUN), case_row(failed("fsspec"), RUN)):
        assert set(row) == set(column_names())
    validate_rows([case_row(result("gcsckpt", [1.0]), RUN)], load_columns())


def test_round_durations_span_first_start_to_last_end():
    # Rank 1 starts 0.5 s after rank 0; both end at t0 + d, so each round lasts d.
    row = case_row(result("gcsckpt", [1.0, 2.0, 3.0, 4.0]), RUN)
    assert row["measurement_round_count"] == 4
    assert row["round_duration_min_seconds"] == 1.0
    assert row["round_duration_max_seconds"] == 4.0
    assert row["round_duration_mean_seconds"] == 2.5
    assert row["round_duration_p50_seconds"] == 2.5
    assert row["round_duration_p90_seconds"] == pytest.approx(3.7)
    assert row["round_duration_p99_seconds"] == pytest.approx(3.97)
    assert row["round_duration_stddev_seconds"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert row["measurement_window_start_unix_seconds"] == 1_800_000_000
    assert row["measurement_window_end_unix_seconds"] == 1_800_000_034


def test_single_round_has_no_stddev():
    columns = round_duration_columns([2.0])
    assert columns["round_duration_p99_seconds"] == 2.0
    assert columns["round_duration_stddev_seconds"] is None


def test_throughput_is_mean_of_per_round_rates():
    row = case_row(result("gcsckpt", [1.0, 4.0]), RUN)
    # 1e9 B / 1 s and 1e9 B / 4 s -> mean 625 MB/s (not 1e9 / 2.5 s = 400 MB/s).
    assert row[THROUGHPUT_COLUMN] == pytest.approx(625e6)
    assert row["checkpoint_read_throughput_min_bytes_per_second"] == pytest.approx(250e6)
    assert row["checkpoint_read_throughput_max_bytes_per_second"] == pytest.approx(1e9)
    assert row["checkpoint_physical_size_bytes"] == SIZE
    assert row["checkpoint_read_count"] == 1


def test_replicated_layout_reads_the_checkpoint_once_per_replica_group():
    replicated = CaseResult(
        case=case("load-x-hsdp-dpr2dp2-ws4", replicate=2),
        reader="gcsckpt",
        rounds=[round_of([(0.0, 2.0)] * 4)],
        checksums_verified=True,
        checkpoint_physical_size_bytes=SIZE,
    )
    row = case_row(replicated, RUN)
    assert row["checkpoint_read_count"] == 2
    assert row[THROUGHPUT_COLUMN] == pytest.approx(2 * SIZE / 2.0)


def test_counter_columns_over_ranks_and_rounds():
    row = case_row(result("gcsckpt", [1.0, 1.0]), RUN)
    # counters(rank): read_items 100+r, requests 10+r, needed 1000, fetched 1000+10r, retries r.
    assert row["dcp_read_items_per_rank_max"] == 101
    assert row["dcp_read_items_per_rank_mean"] == 100.5
    assert row["read_range_count_per_rank_max"] == 4
    assert row["read_request_count_per_rank_max"] == 11
    assert row["read_request_count_per_rank_mean"] == 10.5
    assert row["read_request_count_per_round_mean"] == 21.0
    assert row["read_bytes_needed_per_rank_max"] == 1000
    assert row["read_bytes_fetched_per_rank_max"] == 1010
    assert row["read_bytes_needed_per_round_mean"] == 2000.0
    assert row["read_bytes_fetched_per_round_mean"] == 2010.0
    assert row["read_amplification_ratio"] == pytest.approx(1.005)
    assert row["read_amplification_per_rank_max"] == pytest.approx(1.01)
    assert row["read_retry_count_total"] == 2  # rank 1 retried once in each of two rounds
    assert row["read_retry_count_per_rank_max"] == 1
    assert row["read_fetch_seconds_per_rank_max"] == 0.5
    assert row["read_deserialize_seconds_per_rank_max"] == 0.25
    assert row["read_copy_seconds_per_rank_max"] == 0.125
    last_round = json.loads(row["rank_counters_json"])
    assert [c["requests"] for c in last_round] == [10, 11]


def test_a_counter_missing_on_any_rank_is_null_not_partial():
    # The stock baseline can count read items but not requests on rank 1.
    partial = RoundRecord(
        rank_start_unix_s=[0.0, 0.0],
        rank_end_unix_s=[1.0, 1.0],
        rank_counters=[counters(0), RankCounters(read_items=7)],
    )
    baseline = CaseResult(case(), "fsspec", [partial], checkpoint_physical_size_bytes=1)
    row = case_row(baseline, RUN)
    assert row["dcp_read_items_per_rank_max"] == 100
    assert row["read_request_count_per_rank_max"] is None
    assert row["read_amplification_ratio"] is None
    assert row["read_retry_count_total"] is None


def test_resource_and_host_columns():
    row = case_row(result("gcsckpt", [1.0]), RUN)
    assert row["cpu_usage_peak_cores"] == USAGE.cpu_peak_cores
    assert row["memory_usage_peak_bytes"] == 3 * 2**30
    assert row["memory_usage_peak_bytes_per_process_max"] == 2**30
    assert row["network_received_bytes"] == 8_000_000
    assert row["network_received_mean_bytes_per_sec"] == 2_000_000.0
    assert row["network_sent_mean_bytes_per_sec"] == 1_000_000.0
    assert row["host_vcpu_count"] == 2
    assert row["torch_version"] == "2.13.0+cpu"
    assert row["run_started_at"] == "2026-11-30T12:00:00.250000Z"
    assert json.loads(row["reader_options_json"]) == {
        "chunk_bytes": 8 << 20,
        "max_inflight_requests": 16,
    }


def test_failed_case_has_no_timing_but_keeps_its_error():
    row = case_row(failed("fsspec", message="rank 3: object gs://b/c/__0_0.distcp truncated"), RUN)
    assert row["status"] == "failed"
    assert row["error_message"].startswith("rank 3")
    assert row["checksums_verified"] is False
    assert row[THROUGHPUT_COLUMN] is None
    assert row["round_duration_mean_seconds"] is None
    assert row["measurement_round_count"] == 0
    assert row["dcp_read_items_per_rank_max"] is None


def test_baseline_ratio_pairs_rows_of_the_same_case_and_run():
    rows = add_baseline_ratios(
        [
            case_row(result("gcsckpt", [1.0]), RUN),
            case_row(result("fsspec", [40.0]), RUN),
            case_row(result("gcsckpt", [1.0], name="other-case"), RUN),
        ]
    )
    assert rows[0][RATIO_COLUMN] == pytest.approx(40.0)
    assert rows[0]["baseline_implementation"] == "fsspec"
    assert rows[1][RATIO_COLUMN] == 1.0
    assert rows[2][RATIO_COLUMN] is None  # no baseline for that case
    assert rows[2]["baseline_implementation"] is None


def test_baseline_ratio_skips_a_failed_baseline():
    rows = add_baseline_ratios(
        [case_row(result("gcsckpt", [1.0]), RUN), case_row(failed("fsspec"), RUN)]
    )
    assert rows[0][RATIO_COLUMN] is None


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CaseInfo("c", "m", "fsdp", 0), "world_size"),
        (lambda: CaseInfo("", "m", "fsdp", 1), "name"),
        (lambda: RoundRecord([0.0, 0.0], [1.0]), "one start and one end"),
        (lambda: RoundRecord([0.0, 2.0], [1.0, 1.0]), "rank 1"),
        (lambda: RankCounters(requests=-1), "requests"),
        (lambda: RankCounters.from_mapping({"requests": 1, "gets": 2}, rank=5), "rank 5"),
        (lambda: CaseResult(case(), "gcsckpt", [round_of([(0, 1)] * 3)]), "world_size is 2"),
        (lambda: CaseResult(case(), "gcsckpt", status="failed"), "error_message"),
        (lambda: CaseResult(case(), "gcsckpt", status="skipped"), "status"),
        (lambda: CaseResult(case(), "gcsckpt"), "at least one round"),
    ],
)
def test_bad_inputs_raise_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_from_case_reads_catalogue_attributes():
    class CatalogueCase:  # the attributes of gcsckpt.bench.cases.Case
        name = "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"
        model = "olmoe_1b_7b_0924:scaled"
        model_slug = "olmoe_1b_7b_0924"
        strategy = "ep"
        world_size = 8
        data_parallel_size = 8
        data_parallel_replicate_size = 1
        tensor_parallel_size = 1
        pipeline_parallel_size = 1
        expert_parallel_size = 8
        axis = "strategy"

    info = CaseInfo.from_case(CatalogueCase(), model_scale="scaled")
    assert info == CaseInfo(
        name="load-olmoe_1b_7b_0924-ep-dp8ep8-ws8",
        model_id="olmoe_1b_7b_0924",
        strategy="ep",
        world_size=8,
        data_parallel_size=8,
        expert_parallel_size=8,
        sweep_axis="strategy",
        model_scale="scaled",
    )
    with pytest.raises(ValueError, match="strategy"):
        CaseInfo.from_case(type("Partial", (), {"name": "x", "model": "m", "world_size": 1})())


def test_reader_options_must_be_json():
    bad = CaseResult(
        case(),
        "gcsckpt",
        [round_of([(0, 1), (0, 1)])],
        checkpoint_physical_size_bytes=1,
        reader_options={"token_provider": object()},
    )
    with pytest.raises(ValueError, match="reader options of 'gcsckpt'"):
        case_row(bad, RUN)
