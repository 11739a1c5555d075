"""The training benchmark's core on tiny OLMoE ep, 2 gloo ranks, local GCS: the control, the
floor, gcsckpt sync / thread and gcsckpt thread with the node-local tier train 4 steps with a
checkpoint every 2; every checkpoint (and the tier's copy of the last) is loaded back and
matches the state at its step, the rows carry every schema column and the table every arm and
the tier's on/off line; their objects and tmpfs folders are gone. A writer that reads the
tensors after its call returned is caught by the same verification."""

from __future__ import annotations

import datetime
import os

import pytest

from ckptbench.harness.launch import SpawnLauncher
from ckptbench.harness.local_ranks import run_ranks
from ckptbench.publish.schema import column_names, load_columns, validate_rows
from ckptbench.publish.train_table import train_markdown
from ckptbench.record.case_result import RunContext
from ckptbench.record.host import collect_host_facts
from ckptbench.train.run import TrainSettings, round_failure, run_training, training_rows
from ckptbench.train.train_jobs import TrainJob
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS
from tests.bench import train_ranks

BUCKET = "train-ckpt"
ARMS = ("localfs", "gcsckpt-sync", "gcsckpt-thread", "gcsckpt+local-thread")
SETTINGS = TrainSettings(
    layouts=("ep",), arms=ARMS, ranks=2, scale="tiny", steps=4, every=2, rounds=1
)


def _shm() -> set[str]:
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm") if n.startswith("gcsckpt-bench-")}


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def trained(gcs):
    before = _shm()
    lines: list[str] = []
    results = run_training(
        SETTINGS, BUCKET, gcs.endpoint, "core", SpawnLauncher(timeout_s=300), say=lines.append
    )
    context = RunContext(
        run_id="train-test",
        started_at=datetime.datetime.now(datetime.UTC),
        host=collect_host_facts(),
        gcs_bucket_name=BUCKET,
        distributed_backend="gloo",
        compute_accelerator_type="cpu",
    )
    return results, training_rows(results, context), lines, before


def test_every_arm_trains_and_every_checkpoint_matches_its_step(trained):
    results, _, lines, _ = trained
    assert [r.job.arm for r in results] == ["none", *ARMS]
    assert [r.error for r in results] == [None] * 5
    assert len(lines) == 5
    for result in results:
        (figures,) = result.rounds
        expected = 0 if result.job.arm == "none" else 2
        assert figures.checkpoints == figures.verified_checkpoints == expected
        assert figures.saved_bytes == expected * 2 * result.state_bytes
        assert result.state_bytes > 0


def test_rows_carry_every_column_and_the_table_every_arm(trained):
    _, rows, _, _ = trained
    validate_rows(rows, load_columns())
    for row in rows:
        assert set(row) == set(column_names())
        assert row["status"] == "ok" and row["checksums_verified"] is True
        assert row["workload_scenario"] == "checkpoint_train"
        assert row["benchmark_case_id"] == "train-olmoe_1b_7b_0924-tiny-ep-ws2"
        assert row["measurement_round_count"] == 1
    by_arm = {row["workload_implementation"]: row for row in rows}
    assert by_arm["none"]["train_checkpoint_count"] == 0
    assert by_arm["none"]["train_lost_seconds_per_checkpoint"] == 0.0
    for arm in ARMS:
        row = by_arm[arm]
        assert row["train_checkpoint_count"] == 2
        for column in (
            "train_lost_seconds_per_checkpoint",
            "train_blocked_seconds_per_checkpoint",
            "train_time_to_durable_seconds",
            "train_rss_peak_over_control_bytes",
            "train_client_cpu_seconds_per_gb",
            "save_rss_peak_bytes_per_rank_max",
        ):
            assert row[column] is not None, (arm, column)
    assert by_arm["gcsckpt-sync"]["train_step_inflation_ratio"] is None  # nothing in flight
    table = train_markdown(rows)
    for arm in ("none", *ARMS):
        assert f"| ep ws2 | {arm} |" in table
    assert table.count("| 2/2 |") == 4
    on, off = (by_arm[a]["train_lost_seconds_per_checkpoint"] for a in ARMS[-1:-3:-1])
    assert (
        f"- ep ws2 local tier, thread: {on:.2f} s lost per checkpoint on (gcsckpt+local-thread),"
        f" {off:.2f} s off (gcsckpt-thread), {on - off:+.2f} s"
    ) in table


def test_checkpoints_are_removed_once_verified(trained, gcs):
    _, _, _, before = trained
    store = ObjectStore(gcs.endpoint)
    try:
        assert store.list_objects(BUCKET, "core/") == []
    finally:
        store.close()
    assert _shm() == before


def test_a_writer_reading_tensors_after_its_call_returned_fails_verification(tmp_path):
    job = TrainJob("localfs", "ep", 2, "tiny", 4, 2, BUCKET, None, "lazy", local_root=str(tmp_path))
    gathered = run_ranks(train_ranks.lazy_round, 2, job, timeout_s=120.0)[0]
    for rank in gathered:
        first, last = rank.verified
        # Step 2's save ran only when the loop waited for it, after steps 3 and 4 changed the
        # parameters and moments in place; step 4's ran before anything changed.
        assert (first.step, last.step) == (2, 4)
        assert not first.ok and first.mismatch_count > 0
        assert last.ok
    assert "the checkpoint of step 2 does not match the state at that step" in round_failure(
        gathered
    )
