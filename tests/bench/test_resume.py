"""ckptbench.resume: which step folders count as complete, and the cold-restart rows on the tiny
OLMoE (2 gloo ranks, local endpoint): both arms find the newest complete step past a newer
interrupted save, load every tensor, and give the saved state's first step bit for bit (its
loss, and every rank's parameters and AdamW state after it)."""

from __future__ import annotations

import math

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


def test_both_arms_list_the_same_names():
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        for name in ("run/step-1/.metadata", "run/step-2/x", "run/other", "run2/step-3/x"):
            gcs.put(BUCKET, name, b"1")
        expected = ["run/step-1/.metadata", "run/step-2/x"]
        for reader in ("gcsckpt", "fsspec"):
            assert sorted(list_names(reader, BUCKET, "run", gcs.endpoint)) == expected, reader


def test_cold_restart_rows():
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        base = f"gs://{BUCKET}/run"
        firsts = prepare_checkpoint(SPEC, gcs.endpoint, base, step=4, interrupted=8)
        assert [f.loss_hex for f in firsts] == [firsts[0].loss_hex] * 2  # mean over ranks
        assert math.isfinite(float.fromhex(firsts[0].loss_hex))
        assert firsts[0].digest != firsts[1].digest  # each rank's own shards
        rows = measure_cold_restart(gcs.endpoint, base, SPEC, rounds=1, expected=firsts)
    assert [(r["reader"], r["round"]) for r in rows] == [("gcsckpt", 1), ("fsspec", 1)]
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
    assert "resume to first step: gcsckpt" in table


def test_rounds_and_readers_are_checked():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        measure_cold_restart(None, "gs://b/p", SPEC, rounds=0)
    with pytest.raises(ValueError, match="unknown"):
        measure_cold_restart(None, "gs://b/p", SPEC, readers=("msc",))
