"""dcp.async_save with GCSStorageWriter on 2 gloo ranks (FSDP2 + AdamW) against a local endpoint:
training overlaps the upload, the future completes only once `.metadata` is committed, a failed
upload surfaces in the future and leaves no `.metadata`, and two overlapping saves both complete."""

from __future__ import annotations

import re

import async_ranks
import pytest

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

_PRELOAD = ("torch", "torch.distributed.checkpoint", "gcsckpt.dcp", "async_ranks")


def _run(fn, *args):
    return run_ranks(fn, 2, *args, preload=_PRELOAD, timeout_s=90.0)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(async_ranks.BUCKET)
        yield endpoint


def test_training_continues_and_future_waits_for_metadata(gcs):
    reports = _run(async_ranks.overlap, gcs.endpoint, "overlap")
    for report in reports:
        assert report["done_while_training"] is False
        assert len(report["losses"]) == 3
        assert report["steps_after"] == 4
        assert report["metadata_after_result"] is True
        assert report["mismatches"] == []  # the checkpoint holds the state at save time
    coordinator = reports[0]
    assert coordinator["data_objects_before_finish"] == [True, True]
    assert coordinator["metadata_before_finish"] is False
    assert coordinator["done_before_finish"] is False
    assert reports[0]["losses"] == reports[1]["losses"]  # one model: ranks see the same loss


def test_failed_upload_surfaces_in_the_future_and_leaves_no_metadata(gcs):
    glob = "failing/__1_*_0.distcp"  # data object names carry the save's id
    fault = Fault(kind="status", status=503, count=None, media_only=False, object_glob=glob)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        reports = _run(async_ranks.failing, proxy.endpoint, "failing")
        assert proxy.injected_per_fault[0] >= 2  # both attempts refused
    for report in reports:
        assert report["type"] == "CheckpointException"
        assert report["failed_ranks"] == [1]
        assert re.search(
            rf"gs://{async_ranks.BUCKET}/failing/__1_[0-9a-f]{{16}}_0\.distcp", report["message"]
        ), report["message"]
        assert "503" in report["message"]
        assert report["metadata"] is False
    assert not async_ranks.exists(gcs.endpoint, "failing/.metadata")


def test_two_overlapping_saves_to_different_prefixes_both_complete(gcs):
    reports = _run(async_ranks.two_saves, gcs.endpoint, ("two/a", "two/b"))
    for report in reports:
        assert report["both_pending"] == [True, True]
        assert report["metadata"] == [True, True]
        assert report["mismatches"] == [[], []]
        assert report["snapshots_differ"] is True
