"""End to end: the runner on tiny OLMoE (fsdp and ep, 2 gloo ranks), both readers, local GCS.

One run sets up both checkpoints and loads them with gcsckpt (2 rounds) and the ep case with the
stock fsspec baseline (1 round; ``baseline_cases``, as the main job does); a second run must
reuse the stored checkpoints.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from ckptbench.publish.schema import column_names
from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.config import RunConfig
from gcsckpt.testing import LocalGCS
from tests.bench.runner_fixtures import EP, FSDP, FSDP_BASE, tiny_run_config

BUCKET = "runner-e2e"


def _config(endpoint: str, output_dir, **changes) -> RunConfig:
    changes = {"rounds": 2, "baseline_rounds": 1, "baseline_cases": ("*-ep-*",), **changes}
    return tiny_run_config(endpoint, f"gs://{BUCKET}/bench", output_dir, **changes)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def first_run(gcs, tmp_path_factory):
    out = io.StringIO()
    output_dir = tmp_path_factory.mktemp("first")
    outcome = run_benchmark(_config(gcs.endpoint, output_dir), out=out, live_progress=False)
    return outcome, out.getvalue(), output_dir


def test_every_case_and_reader_loads_and_verifies(first_run):
    outcome, _, _ = first_run
    assert [(r.case.name, r.reader) for r in outcome.results] == [
        (FSDP, "gcsckpt"),
        (EP, "gcsckpt"),
        (EP, "fsspec"),
    ]
    assert outcome.failures == []
    assert all(r.checksums_verified for r in outcome.results)
    assert [len(r.rounds) for r in outcome.results] == [2, 2, 1]


def test_results_files_carry_every_schema_column(first_run):
    outcome, _, output_dir = first_run
    rows = json.loads((output_dir / "results.json").read_text())
    names = column_names()
    assert len(rows) == 3
    assert all(list(row) == names for row in rows)
    with open(output_dir / "results.csv", newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == names
        assert len(list(reader)) == 3
    for row in rows:
        assert row["status"] == "ok" and row["checksums_verified"] is True
        assert row["world_size"] == 2 and row["model_scale"] == "tiny"
        assert row["checkpoint_physical_size_bytes"] > 0
        assert row["checkpoint_read_throughput_mean_bytes_per_second"] > 0
        assert row["storage_endpoint"] == "emulator" and row["gcs_bucket_name"] == BUCKET
        assert row["distributed_backend"] == "gloo"
        assert row["read_request_count_per_rank_max"] >= 1


def test_ratio_and_counters_compare_readers(first_run):
    outcome, text, _ = first_run
    rows = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in outcome.report.rows}
    assert rows[(FSDP, "gcsckpt")]["checkpoint_read_throughput_ratio_to_baseline"] is None
    for case in (EP,):
        ours, stock = rows[(case, "gcsckpt")], rows[(case, "fsspec")]
        ratio = ours["checkpoint_read_throughput_ratio_to_baseline"]
        expected = (
            ours["checkpoint_read_throughput_mean_bytes_per_second"]
            / stock["checkpoint_read_throughput_mean_bytes_per_second"]
        )
        assert ratio == pytest.approx(expected)
        assert stock["checkpoint_read_throughput_ratio_to_baseline"] == 1.0
        assert f"{ratio:.1f}x" in text
        # Both readers load the same items and need the same bytes; only gcsckpt counts retries.
        for column in ("dcp_read_items_per_rank_max", "read_bytes_needed_per_rank_max"):
            assert ours[column] == stock[column] > 0
        assert ours["read_retry_count_total"] == 0 and stock["read_retry_count_total"] is None
    # Whole experts per rank: fewer, larger items than slicing every expert (the PR's claim).
    assert (
        rows[(EP, "gcsckpt")]["dcp_read_items_per_rank_max"]
        < rows[(FSDP, "gcsckpt")]["dcp_read_items_per_rank_max"]
    )
    assert "| case | gcsckpt MB/s | fsspec MB/s | gcsckpt/fsspec |" in text
    assert "Timed rounds per case: gcsckpt 2, fsspec 1 on 1 of 2 cases." in text
    assert f"| {FSDP} | " in text and " | n/a | n/a |" in text  # no stock row: no ratio


def test_png_chart_is_written(first_run):
    outcome, _, output_dir = first_run
    assert outcome.report.plot_path == output_dir / "throughput.png"
    assert outcome.report.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_second_run_reuses_the_stored_checkpoints(gcs, first_run, tmp_path):
    out = io.StringIO()
    config = _config(gcs.endpoint, tmp_path, readers=("gcsckpt",), rounds=1)
    outcome = run_benchmark(config, out=out, live_progress=False)
    text = out.getvalue()
    assert outcome.failures == []
    assert f"{FSDP}: reusing the checkpoint at gs://{BUCKET}/bench/{FSDP_BASE}/checkpoint" in text
    assert f"{EP}: reusing the checkpoint" in text
    sizes = {r.case.name: r.checkpoint_physical_size_bytes for r in outcome.results}
    assert sizes == {r.case.name: r.checkpoint_physical_size_bytes for r in first_run[0].results}
