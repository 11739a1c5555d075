"""metrics.case_row / add_baseline_ratios and the CaseResult and SaveResult inputs: exact
values, null rules, each scenario in its own columns."""

import dataclasses
import json

import numpy as np
import pytest

from ckptbench.cases.catalogue import Case
from ckptbench.publish.schema import column_names, load_columns, validate_rows
from ckptbench.record.case_result import CaseInfo, CaseResult, SaveResult
from ckptbench.record.columns import DATA_PHASE_THROUGHPUT_COLUMN, READ, WRITE
from ckptbench.record.compare import add_baseline_ratios
from ckptbench.record.metrics import case_row, round_duration_columns
from ckptbench.record.rank_rounds import RankCounters, RankSave, RoundRecord, rss_bound_bytes
from ckptbench.record.save_columns import SAVE_COLUMNS
from ckptbench.workloads.parallel.dims import SIZE_NAMES, ParallelDims
from ckptbench.workloads.parallel.strategies import LayoutError
from tests.bench.publish_fixtures import (
    RUN,
    SIZE,
    STATE,
    USAGE,
    MiB,
    case,
    counters,
    failed,
    rank_save,
    result,
    round_of,
    save_result,
    save_rows,
)


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
    assert row[READ.mean] == pytest.approx(625e6)
    assert row["checkpoint_read_throughput_min_bytes_per_second"] == pytest.approx(250e6)
    assert row["checkpoint_read_throughput_max_bytes_per_second"] == pytest.approx(1e9)
    assert row["checkpoint_physical_size_bytes"] == SIZE
    assert row["checkpoint_read_count"] == 1
    assert all(row[name] is None for name in WRITE.all)  # a load writes nothing
    assert row["writer_options_json"] is None


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
    assert row[READ.mean] == pytest.approx(2 * SIZE / 2.0)


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
    assert row["read_bytes_verified_per_round_mean"] == 1999.0
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
    assert row[READ.mean] is None
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
    assert rows[0][READ.ratio("baseline")] == pytest.approx(40.0)
    assert rows[0]["baseline_implementation"] == "fsspec"
    assert rows[1][READ.ratio("baseline")] == 1.0
    assert rows[2][READ.ratio("baseline")] is None  # no baseline for that case
    assert rows[2]["baseline_implementation"] is None


def test_baseline_ratio_skips_a_failed_baseline():
    rows = add_baseline_ratios(
        [case_row(result("gcsckpt", [1.0]), RUN), case_row(failed("fsspec"), RUN)]
    )
    assert rows[0][READ.ratio("baseline")] is None


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CaseInfo("c", "m", ParallelDims("fsdp", 0)), "world_size"),
        (lambda: CaseInfo("", "m", ParallelDims("fsdp", 1)), "name"),
        (lambda: RoundRecord([0.0, 0.0], [1.0]), "one start and one end"),
        (lambda: RoundRecord([0.0, 2.0], [1.0, 1.0]), "rank 1"),
        (lambda: RankCounters(requests=-1), "requests"),
        (lambda: RankCounters.from_mapping({"requests": 1, "gets": 2}, rank=5), "rank 5"),
        (lambda: CaseResult(case(), "gcsckpt", [round_of([(0, 1)] * 3)]), "world_size is 2"),
        (lambda: CaseResult(case(), "gcsckpt", status="failed"), "error_message"),
        (lambda: CaseResult(case(), "gcsckpt", status="skipped"), "status"),
        (lambda: CaseResult(case(), "gcsckpt"), "at least one round"),
        (lambda: CaseResult(case(), ""), "reader name is empty"),
        (lambda: SaveResult(case(), ""), "writer name is empty"),
        (lambda: SaveResult(case(), "msc", status="failed"), "writer 'msc': a failed result"),
        (lambda: SaveResult(case(), "msc", [round_of([(0, 1)] * 3)]), "world_size is 2"),
        (
            lambda: SaveResult(case(), "msc", checkpoint_physical_size_bytes=-1, status="x"),
            "status must be",
        ),
    ],
)
def test_bad_inputs_raise_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_from_case_records_the_catalogue_case_and_its_dims():
    case = Case(
        model="olmoe_1b_7b_0924:scaled",
        strategy="ep",
        world_size=8,
        data_parallel_size=8,
        expert_parallel_size=8,
        axis="strategy",
    )
    info = CaseInfo.from_case(case, model_scale="scaled")
    assert info == CaseInfo(
        name="load-olmoe_1b_7b_0924-ep-dp8ep8-ws8",
        model_id="olmoe_1b_7b_0924",
        dims=ParallelDims("ep", 8, dp_shard=8, ep=8),
        sweep_axis="strategy",
        model_scale="scaled",
    )
    row = case_row(CaseResult(info, "gcsckpt", [round_of([(0, 1)] * 8)]), RUN)
    assert {k: row[k] for k in SIZE_NAMES.values()} == {
        "pipeline_parallel_size": 1,
        "data_parallel_replicate_size": 1,
        "data_parallel_size": 8,
        "tensor_parallel_size": 1,
        "expert_parallel_size": 8,
    }
    # A case whose sizes do not fit its strategy gets no record (the layout's own check).
    with pytest.raises(LayoutError, match="strategy"):
        CaseInfo.from_case(dataclasses.replace(case, strategy="tp"))
    with pytest.raises(TypeError, match="ParallelDims"):
        CaseInfo("load-x", "x", dims=case)


def test_reader_options_must_be_json():
    bad = CaseResult(
        case(),
        "gcsckpt",
        [round_of([(0, 1), (0, 1)])],
        checkpoint_physical_size_bytes=1,
        reader_options={"token_provider": object()},
    )
    with pytest.raises(ValueError, match="reader_options_json of 'gcsckpt'"):
        case_row(bad, RUN)
    worse = SaveResult(
        case(),
        "msc",
        [round_of([(0, 1), (0, 1)])],
        checkpoint_physical_size_bytes=1,
        writer_options={"profile": object()},
    )
    with pytest.raises(ValueError, match="writer_options_json of 'msc'"):
        case_row(worse, RUN)
    with pytest.raises(TypeError, match="CaseResult or SaveResult, got dict"):
        case_row({}, RUN)


def test_a_save_row_has_write_columns_and_leaves_the_read_columns_null():
    saved = save_result("gcsckpt", [2.0, 4.0], [1.0, 1.0])
    saved = dataclasses.replace(saved, resources=dataclasses.replace(USAGE, client_cpu_seconds=3.0))
    assert (saved.scenario, saved.implementation) == ("checkpoint_write", "gcsckpt")
    row = case_row(saved, RUN)
    assert row["workload_scenario"] == "checkpoint_write"
    assert row["workload_implementation"] == "gcsckpt"
    # SIZE bytes written per save, in 2 s and 4 s: mean of per-round rates, 375 MB/s.
    assert row[WRITE.mean] == pytest.approx((SIZE / 2.0 + SIZE / 4.0) / 2)
    assert row["checkpoint_write_throughput_min_bytes_per_second"] == pytest.approx(SIZE / 4.0)
    assert row["checkpoint_write_throughput_max_bytes_per_second"] == pytest.approx(SIZE / 2.0)
    assert row["checkpoint_write_throughput_p50_bytes_per_second"] == pytest.approx(375e6)
    assert json.loads(row["writer_options_json"]) == {"class": "gcsckpt"}
    assert row["reader_options_json"] is None
    assert all(row[name] is None for name in READ.all)
    assert row["checkpoint_read_count"] is None and row["checkpoint_object_count"] is None
    assert row["storage_bytes_per_checkpoint_byte"] is None
    assert row["rank_counters_json"] is None and row["read_retry_count_total"] is None
    # CPU per GB counts the bytes written, once per save: 2 saves x SIZE.
    assert row["client_cpu_seconds_per_gb"] == pytest.approx(3.0 / (2 * SIZE / 1e9))
    assert set(row) == set(column_names())
    validate_rows([row], load_columns())
    # A writer that matches the baseline's name gets a write ratio to it, never a read one.
    rows = add_baseline_ratios([row, case_row(save_result("fsspec", [8.0], [1.0]), RUN)])
    assert rows[0][WRITE.ratio("baseline")] == pytest.approx(row[WRITE.mean] / (SIZE / 8.0))
    assert rows[1][WRITE.ratio("baseline")] == 1.0
    assert rows[0][READ.ratio("baseline")] is None


def test_save_columns_memory_per_rank_against_the_bound():
    rows = {r["workload_implementation"]: r for r in save_rows()}
    ours = rows["gcsckpt"]
    assert ours["save_state_bytes_per_rank_max"] == STATE + 10 * MiB
    assert ours["save_rss_start_bytes_per_rank_max"] == 200 * MiB
    assert ours["save_rss_peak_bytes_per_rank_max"] == 300 * MiB
    # Both ranks peak at 300 MiB: the first (rank 0, 100 MiB of state) is reported.
    assert ours["save_rss_bound_bytes_at_peak_rank"] == int(1.1 * STATE) + 256 * MiB
    assert ours["save_rss_peak_within_bound"] is True
    assert ours["save_rss_increase_bytes_per_rank_max"] == 100 * MiB
    local = rows["localfs"]  # rank 1 peaks at 600 MiB, over 1.1 x 110 MiB + 256 MiB
    assert local["save_rss_peak_bytes_per_rank_max"] == 600 * MiB
    assert local["save_rss_bound_bytes_at_peak_rank"] == rss_bound_bytes(STATE + 10 * MiB)
    assert rss_bound_bytes(STATE + 10 * MiB) == int(1.1 * 110 * MiB) + 256 * MiB
    assert local["save_rss_peak_within_bound"] is False
    assert local["save_rss_increase_bytes_per_rank_max"] == 400 * MiB


def test_save_columns_data_phase_is_the_longest_ranks_and_its_throughput():
    rows = {r["workload_implementation"]: r for r in save_rows()}
    ours = rows["gcsckpt"]  # 2 s save; rank 0's data phase 1 s, rank 1's 0.5 s
    assert ours["save_data_phase_mean_seconds"] == pytest.approx(1.0)
    assert ours["save_outside_data_phase_mean_seconds"] == pytest.approx(1.0)
    assert ours[DATA_PHASE_THROUGHPUT_COLUMN] == pytest.approx(SIZE / 1.0)
    assert ours[WRITE.mean] == pytest.approx(SIZE / 2.0)
    assert ours["save_plan_seconds_per_rank_max"] == pytest.approx(0.02)
    assert ours["save_finish_mean_seconds"] == pytest.approx(0.25)
    local = rows["localfs"]  # two rounds of 1 s, data phase 0.25 s each
    assert local["measurement_round_count"] == 2
    assert local["save_data_phase_mean_seconds"] == pytest.approx(0.25)
    assert local["save_outside_data_phase_mean_seconds"] == pytest.approx(0.75)
    assert local[DATA_PHASE_THROUGHPUT_COLUMN] == pytest.approx(SIZE / 0.25)
    per_rank = json.loads(local["rank_saves_json"])
    assert [r["state_bytes"] for r in per_rank] == [STATE, STATE + 10 * MiB]
    assert [r["finish_s"] for r in per_rank] == [0.25, None]
    assert per_rank[1]["rss_peak_bytes"] == 600 * MiB
    validate_rows(list(rows.values()), load_columns())


def test_the_reference_is_never_the_best_peer_and_has_its_own_ratio():
    rows = {r["workload_implementation"]: r for r in save_rows()}
    ours = rows["gcsckpt"]
    # localfs (1 GB/s) is faster than msc (250 MB/s) but is a reference, not a peer.
    assert ours["best_peer_implementation"] == "msc"
    assert ours["checkpoint_write_throughput_ratio_to_best_peer"] == pytest.approx(2.0)
    assert ours["reference_implementation"] == "localfs"
    assert ours["checkpoint_write_throughput_ratio_to_reference"] == pytest.approx(0.5)
    assert rows["msc"][WRITE.ratio("reference")] is None
    assert rows["localfs"][WRITE.ratio("best_peer")] is None
    for row in rows.values():  # the read ratios stay null on save rows
        assert all(row[name] is None for name in READ.all), row["workload_implementation"]
    only_reference = add_baseline_ratios(
        [
            case_row(save_result("gcsckpt", [2.0], [1.0]), RUN),
            case_row(save_result("localfs", [1.0], [0.25]), RUN),
        ]
    )
    assert only_reference[0]["best_peer_implementation"] is None
    assert only_reference[0]["reference_implementation"] == "localfs"


def test_save_columns_are_null_for_loads_and_timings_null_when_failed():
    load = case_row(result("gcsckpt", [1.0]), RUN)
    assert all(load[name] is None for name in SAVE_COLUMNS)
    assert load["rank_saves_json"] is None and load[READ.ratio("reference")] is None
    ok = save_result("gcsckpt", [2.0], [1.0])
    broken = SaveResult(
        case=ok.case,
        writer="gcsckpt",
        rounds=ok.rounds,
        status="failed",
        error_message="rank 1: checksum mismatch",
        checkpoint_physical_size_bytes=SIZE,
    )
    row = case_row(broken, RUN)
    assert row["save_rss_peak_bytes_per_rank_max"] == 300 * MiB  # kept, for diagnosis
    assert row["save_data_phase_mean_seconds"] is None
    assert row[DATA_PHASE_THROUGHPUT_COLUMN] is None
    assert row["save_outside_data_phase_mean_seconds"] is None
    # One rank without measures: every save column is null, never a partial figure.
    partial = RoundRecord([0.0, 0.0], [2.0, 2.0], rank_saves=None)
    row = case_row(
        SaveResult(
            case=ok.case,
            writer="gcsckpt",
            rounds=[ok.rounds[0], partial],
            checksums_verified=True,
            checkpoint_physical_size_bytes=SIZE,
        ),
        RUN,
    )
    assert all(row[name] is None for name in SAVE_COLUMNS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rss_peak_bytes": 100}, "peak RSS 100 is below the start RSS"),
        ({"state_bytes": -1}, "state_bytes must be an int >= 0"),
        ({"data_end_unix_s": 1.0}, "data phase ends (1.0) before it starts"),
        ({"plan_s": float("nan")}, "plan_s must be finite and >= 0"),
    ],
)
def test_bad_save_measures_raise_naming_the_field(changes, message):
    good = rank_save(0, 100.0, 1.0, 300 * MiB)
    fields = {**good.as_dict(), **changes}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RankSave(**fields)
    with pytest.raises(ValueError, match="save measures for 1 ranks but timings for 2"):
        RoundRecord([0.0, 0.0], [1.0, 1.0], rank_saves=[good])
