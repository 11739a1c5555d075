"""ckptbench.resume: which step folders count as complete, and the cold-restart rows on the tiny
OLMoE (2 gloo ranks, local endpoint): every arm (gcsckpt from GCS, gcsckpt-local from the
node-local tier, stock) finds the newest complete step past a newer interrupted save, loads every
tensor from its own source, and gives the saved state's first step bit for bit (its loss, and
every rank's parameters and AdamW state after it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ckptbench.resume import RestartSpec, format_table, measure_cold_restart, prepare_checkpoint
from ckptbench.resume.listing import list_names, split_url
from ckptbench.resume.measure import PHASES
from gcsckpt.dcp.steps import committed_steps
from gcsckpt.testing import LocalGCS

BUCKET = "resume-test"
SPEC = RestartSpec(model="olmoe_1b_7b_0924:tiny", world_size=2, timeout_s=300.0)


def test_complete_steps_need_their_metadata():
    names = [
        "run/step-4/.metadata",
        "run/step-4/__0_a_0.distcp",
        "run/step-12/__0_b_0.distcp",  # interrupted: no .metadata
        "run/step-8/__1_c_0.distcp",
        "run/step-8/.metadata",
        "run/step-x/.metadata",  # not a step
        "run/sync-step-9/.metadata",
        "other/step-20/.metadata",
    ]
    assert committed_steps(names, "run") == ([4, 8], [12])
    assert committed_steps(["step-3/.metadata", "step-5/a"], "") == ([3], [5])


def test_split_url():
    assert split_url("gs://bucket/a/b/") == ("bucket", "a/b")
    assert split_url("gs://bucket") == ("bucket", "")
    with pytest.raises(ValueError, match="not gs://bucket/prefix"):
        split_url("s3://bucket/a")


@pytest.fixture(scope="module")
def gcs():
    """One LocalGCS for the module."""
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def saved(gcs, tmp_path_factory):
    """One checkpoint for every restart of the module (a save is two spawned ranks): step-4
    under gs://BUCKET/run, through the node-local tier, beside an interrupted step-8. Returns
    (base url, tier folder, the first steps every restart must give)."""
    tier = str(tmp_path_factory.mktemp("resume") / "tier")
    base = f"gs://{BUCKET}/run"
    firsts = prepare_checkpoint(SPEC, gcs.endpoint, base, step=4, interrupted=8, local_dir=tier)
    return base, tier, firsts


def test_both_arms_list_the_same_names(gcs):
    names = "names"  # a bucket of its own: the checkpoint's objects are not in it
    gcs.create_bucket(names)
    for name in ("run/step-1/.metadata", "run/step-2/x", "run/other", "run2/step-3/x"):
        gcs.put(names, name, b"1")
    expected = ["run/step-1/.metadata", "run/step-2/x"]
    for reader in ("gcsckpt", "fsspec"):
        assert sorted(list_names(reader, names, "run", gcs.endpoint)) == expected, reader


def test_cold_restart_rows(gcs, saved):
    base, tier, firsts = saved
    assert [f.loss_hex for f in firsts] == [firsts[0].loss_hex] * 2  # mean over ranks
    assert math.isfinite(float.fromhex(firsts[0].loss_hex))
    assert firsts[0].digest != firsts[1].digest  # each rank's own shards
    copies = sorted(p.name for p in (Path(tier) / BUCKET / "run").iterdir())
    assert copies == ["rank-0-of-2", "rank-1-of-2"]
    rows = measure_cold_restart(gcs.endpoint, base, SPEC, rounds=1, expected=firsts, local_dir=tier)
    assert [(r["reader"], r["round"]) for r in rows] == [
        ("gcsckpt", 1),
        ("gcsckpt-local", 1),
        ("fsspec", 1),
    ]
    assert [r["source"] for r in rows] == ["gcs", "local", "gcs"]
    for row in rows:
        assert row["step"] == 4  # the newest complete step, past the interrupted step-8
        assert row["loss_hex"] == firsts[0].loss_hex
        assert row["state_digest"] == rows[0]["state_digest"]
        assert row["all_tensors_loaded"] and row["verified"]
        assert row["tensor_bytes"] == rows[0]["tensor_bytes"] > 0
        assert (row["model"], row["strategy"], row["world_size"]) == (SPEC.model, "fsdp", 2)
        assert row["total_s"] == pytest.approx(sum(row[p] for p in PHASES))
    table = format_table(rows)
    assert table.count("\n| gcsckpt | 1 |") == 1 and "| fsspec mean | 1 |" in table
    assert table.count("\n| gcsckpt-local | 1 |") == 1 and "| gcsckpt-local mean | 1 |" in table
    assert "| 4 | local | yes |" in table
    assert "resume to first step: gcsckpt" in table
    assert "from the node-local tier: gcsckpt-local" in table and "faster than fsspec" in table


def test_a_local_restart_that_reads_gcs_is_not_verified(gcs, saved, tmp_path):
    # The tier holds no copy (an empty folder, not the one the checkpoint was saved through):
    # the manager loads from GCS, which gives the right state but is not the arm's measurement.
    base, _, firsts = saved
    (row,) = measure_cold_restart(
        gcs.endpoint,
        base,
        SPEC,
        readers=("gcsckpt-local",),
        expected=firsts,
        local_dir=str(tmp_path),
    )
    assert row["step"] == 4 and row["loss_hex"] == firsts[0].loss_hex
    assert row["source"] == "gcs" and not row["from_expected_source"] and not row["verified"]


def test_rounds_and_readers_are_checked():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        measure_cold_restart(None, "gs://b/p", SPEC, rounds=0)
    with pytest.raises(ValueError, match="unknown"):
        measure_cold_restart(None, "gs://b/p", SPEC, readers=("msc",))
    with pytest.raises(ValueError, match="gcsckpt-local arm needs local_dir"):
        measure_cold_restart(None, "gs://b/p", SPEC, readers=("gcsckpt-local",))
