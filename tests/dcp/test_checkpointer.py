"""GCSCheckpointer on 2 gloo ranks against a local endpoint: each mode's round trip exact at its
step with the state changed right after the call (staging really copied), the plan cache reused
for an unchanged layout and a fresh plan for a changed one, and PROCESS-mode saves that build
the writer's clients once in torch's checkpoint process, started with the checkpointer (before
any save) and stopped by close(); a run's steps under FSDP2 (retention,
the local tier, GCS when one rank lacks its copy)."""

from __future__ import annotations

import async_ranks
import checkpointer_ranks
import pytest

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.testing import LocalGCS

_PRELOAD = ("torch", "torch.distributed.checkpoint", "gcsckpt.dcp", "checkpointer_ranks")


def _run(fn, *args):
    return run_ranks(fn, 2, *args, preload=_PRELOAD, timeout_s=120.0)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(async_ranks.BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def process_reports(gcs, tmp_path_factory):
    """Each rank's report of every PROCESS-mode check, from one rank job (checkpointer_ranks.
    process_mode: two checkpoint process starts per rank instead of three)."""
    log_dir = tmp_path_factory.mktemp("process-reuse")
    return _run(checkpointer_ranks.process_mode, gcs.endpoint, str(log_dir))


@pytest.mark.parametrize("mode", ["sync", "thread", "process"])
def test_each_mode_saves_the_state_at_the_call(gcs, mode, request):
    if mode == "process":
        reports = [r["modes"] for r in request.getfixturevalue("process_reports")]
    else:
        reports = _run(checkpointer_ranks.modes, gcs.endpoint, mode)
    for report in reports:
        assert report["mismatches"] == [[], []]
        assert report["snapshots_differ"] is True


def test_plan_cache_reused_for_one_layout_and_renewed_when_it_changes(gcs):
    for report in _run(checkpointer_ranks.plan_cache, gcs.endpoint):
        # same layout again: reused; new key, removed key, new shape, new dtype: fresh plans
        assert report["reused"] == [0, 1, 0, 0, 0, 0]
        assert report["loaded_ok"] == [True] * 6
        assert len(report["tags"]) == 6 and len(set(report["tags"])) == 6  # own names per save


def test_process_mode_builds_the_writers_clients_once(process_reports):
    for report in (r["reuse"] for r in process_reports):
        entries = report["entries"]
        assert len(entries) == 3
        assert len({e["pid"] for e in entries}) == 1  # one checkpoint process for all saves
        assert entries[0]["pid"] != report["own_pid"]
        assert [e["builds"]["uploader"] for e in entries] == [1, 1, 1]  # built once
        assert all(e["builds"].get("store", 0) <= 1 for e in entries)
        assert len({e["uploader"] for e in entries}) == 1
        assert report["mismatches"] == [[], [], []]


def test_process_mode_starts_its_process_with_the_checkpointer_and_close_stops_it(
    process_reports,
):
    for report in (r["lifecycle"] for r in process_reports):
        assert report["new_at_construction"] is True  # one spawn child, before any save
        assert report["parent_is_rank"] is True
        assert report["running_before_save"] is True
        assert report["torch_uses_it"] is True  # torch's saves find it: they start none
        assert report["new_at_saves"] == []
        assert report["torch_uses_it_after_saves"] is True
        assert report["shared"] is True  # a second checkpointer of the rank uses the same
        assert report["running_after_first_close"] is True
        assert report["running_after_last_close"] is False
        assert report["torch_global_after_close"] is None
        assert report["children_after_close"] == []  # no orphan
        assert report["mismatches"] == [[], []]


def test_run_steps_retention_and_local_tier_on_fsdp2(gcs, tmp_path):
    for report in _run(checkpointer_ranks.run_steps, gcs.endpoint, str(tmp_path)):
        assert report["steps"] == [4, 3]  # keep_latest=2
        assert report["local"] == (4, "local") and report["local_mismatches"] == []
        assert report["gcs"] == (4, "gcs") and report["gcs_mismatches"] == []
        assert report["older"] == (3, "gcs") and report["older_mismatches"] == []
