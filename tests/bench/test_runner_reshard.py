"""Resharded loads through the runner: tiny OLMoE saved under one layout, loaded into another.

Each pair of the catalogue's reshard axis, at world sizes 1-2 (fsdp -> ep, ep -> fsdp, fsdp at
another world size, tp -> fsdp): the setup saves under the saving layout (once for the two
cases that share it), gcsckpt loads into the other, and every rank's tensors must equal a
save-seed state built directly in the load layout.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from ckptbench.cases.catalogue import Case, SavedLayout
from ckptbench.runner.benchmark import run_benchmark
from gcsckpt.testing import LocalGCS
from tests.bench.runner_fixtures import tiny_run_config

BUCKET = "runner-reshard"
MODEL = "olmoe_1b_7b_0924:tiny"
FSDP2 = SavedLayout("fsdp", 2, data_parallel_size=2)
CASES = [
    Case(MODEL, "ep", 2, data_parallel_size=2, expert_parallel_size=2, saved_from=FSDP2),
    Case(
        MODEL,
        "fsdp",
        2,
        data_parallel_size=2,
        saved_from=SavedLayout("ep", 2, data_parallel_size=2, expert_parallel_size=2),
    ),
    Case(MODEL, "fsdp", 1, saved_from=FSDP2),
    Case(
        MODEL,
        "fsdp",
        2,
        data_parallel_size=2,
        saved_from=SavedLayout("tp", 2, tensor_parallel_size=2),
    ),
]
CASES = [dataclasses.replace(c, axis="reshard", rounds=1) for c in CASES]
NAMES = [
    "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2-from-fsdp-ws2",
    "load-olmoe_1b_7b_0924-fsdp-ws2-from-ep-dp2ep2-ws2",
    "load-olmoe_1b_7b_0924-fsdp-ws1-from-fsdp-ws2",
    "load-olmoe_1b_7b_0924-fsdp-ws2-from-tp-tp2-ws2",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        out = io.StringIO()
        output_dir = tmp_path_factory.mktemp("reshard")
        config = tiny_run_config(
            gcs.endpoint,
            f"gs://{BUCKET}/bench",
            output_dir,
            readers=("gcsckpt",),
            world_size_override=None,
            download_ceiling_rounds=1,
        )
        outcome = run_benchmark(config, out=out, live_progress=False, cases=CASES)
        yield outcome, out.getvalue(), json.loads((output_dir / "results.json").read_text())


def test_each_reshard_pair_loads_every_tensor_verified(run):
    outcome, _, _ = run
    assert [c.name for c in CASES] == NAMES
    assert [(r.case.name, r.reader, r.status) for r in outcome.results] == [
        (name, "gcsckpt", "ok") for name in NAMES
    ]
    assert all(r.checksums_verified for r in outcome.results)


def test_the_saving_layout_is_saved_once_and_shared(run):
    _, text, _ = run
    # fsdp ws2 is saved for the first case and reused by the third.
    assert (
        text.count(
            "reusing the checkpoint at gs://runner-reshard/bench/"
            "load-olmoe_1b_7b_0924-fsdp-ws2/checkpoint"
        )
        == 1
    )


def test_rows_name_the_saving_layout(run):
    _, _, rows = run
    assert [
        (r["benchmark_case_id"], r["config_sweep_axis"], r["checkpoint_saved_layout"]) for r in rows
    ] == [
        (NAMES[0], "reshard", "fsdp-ws2"),
        (NAMES[1], "reshard", "ep-dp2ep2-ws2"),
        (NAMES[2], "reshard", "fsdp-ws2"),
        (NAMES[3], "reshard", "tp-tp2-ws2"),
    ]
    assert [r["world_size"] for r in rows] == [2, 2, 1, 2]
    assert all(r["checksums_verified"] and r["status"] == "ok" for r in rows)


def test_the_download_ceiling_and_the_costs_of_each_load(run):
    _, text, rows = run
    (line,) = [t for t in text.splitlines() if t.startswith("Download ceiling of the endpoint: ")]
    assert "16 x 8 MiB ranged GETs of 256 MiB" in line
    assert "## Loads: time, download ceiling, CPU per GB, storage bytes" in text
    for row in rows:
        assert row["endpoint_ceiling_bytes_per_second"] > 0
        assert row["checkpoint_read_throughput_ratio_to_ceiling"] > 0
        assert row["client_cpu_seconds_per_gb"] > 0  # the ranks' CPU in the timed load
        # A caller-run emulator (as here) is not ours to sample; the embedded one is.
        assert row["endpoint_cpu_seconds_per_gb"] is None
        assert row["storage_bytes_per_checkpoint_byte"] > 0  # gcsckpt counts what it fetched
