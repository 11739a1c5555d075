"""Saves go where they say and loads fail clearly, through LocalGCS: a save after
$STORAGE_EMULATOR_HOST changed lands on the new endpoint (clients are kept per resolved
endpoint); a data object deleted mid-load is "deleted during load" with its gs:// name and
generation; a missing checkpoint gives one error and no torch fallback tracebacks."""

from __future__ import annotations

import logging
import re

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore, RetryPolicy
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "trust"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _state(value: float):
    return {"w": torch.full((64, 1024), value), "b": torch.full((16,), value)}


def _objects(endpoint: str, prefix: str) -> list[str]:
    return ObjectStore(endpoint).list(BUCKET, prefix)


def test_a_save_after_the_emulator_host_changes_lands_on_the_new_endpoint(gcs, monkeypatch):
    with LocalGCS() as other:
        other.create_bucket(BUCKET)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
        dcp.save(_state(1.0), storage_writer=GCSStorageWriter(f"gs://{BUCKET}/first"))
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", other.endpoint)
        writer = GCSStorageWriter(f"gs://{BUCKET}/second")
        dcp.save(_state(2.0), storage_writer=writer)
        # The same writer, reset for another save: it follows the variable too.
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
        dcp.save(_state(3.0), storage_writer=writer, checkpoint_id=f"gs://{BUCKET}/third")
        on_other = _objects(other.endpoint, "")
        on_first = _objects(gcs.endpoint, "")
        assert any(n.startswith("first/") for n in on_first)
        assert not any(n.startswith("first/") for n in on_other)
        assert "second/.metadata" in on_other
        assert not any(n.startswith("second/") for n in on_first)
        assert "third/.metadata" in on_first and not any(n.startswith("third/") for n in on_other)
        # One reader, two loads: each follows the variable as it is then.
        reader = GCSStorageReader()
        state = _state(0.0)
        dcp.load(state, storage_reader=reader, checkpoint_id=f"gs://{BUCKET}/third")
        assert torch.equal(state["w"], _state(3.0)["w"])
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", other.endpoint)
        dcp.load(state, storage_reader=reader, checkpoint_id=f"gs://{BUCKET}/second")
        assert torch.equal(state["w"], _state(2.0)["w"])


def test_a_save_whose_uploads_never_finish_fails_at_the_retry_policy(gcs):
    # The endpoint loses the session at every upload's last request: the save fails, naming
    # the object and the last answer, once the sessions used up max_attempts.
    faults = [
        Fault(kind="status", status=410, count=None, media_only=False, last_upload_request=True)
    ]
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5)
    with FaultProxy(gcs.endpoint, faults) as proxy:
        writer = GCSStorageWriter(
            f"gs://{BUCKET}/never", endpoint=proxy.endpoint, thread_count=1, retry=retry
        )
        with pytest.raises(CheckpointException) as info:
            dcp.save(_state(1.0), storage_writer=writer)
        finishing_puts = proxy.injected_per_fault[0]
    message = str(info.value)
    assert re.search(
        rf"upload of gs://{BUCKET}/never/__0_\w+\.distcp failed: HTTP 410: the upload session of "
        rf"gs://{BUCKET}/never/__0_\w+\.distcp expired or was lost "
        r"\(2 upload session\(s\) started, max_attempts 2\)",
        message,
    ), message
    assert finishing_puts == 2  # one per session: attempts <= max_attempts
    assert not _objects(gcs.endpoint, "never/")


class _DeleteFirst(DefaultLoadPlanner):
    """Runs `hook` once, at the first resolve_tensor (after the listing pinned generations)."""

    def __init__(self, hook):
        super().__init__()
        self.hook = hook

    def resolve_tensor(self, read_item):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().resolve_tensor(read_item)


@pytest.mark.parametrize("fmt", list(SerializationFormat), ids=lambda f: f.value)
def test_a_data_object_deleted_mid_load_is_reported_as_deleted(gcs, fmt):
    name = f"deleted-{fmt.value}"
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint, thread_count=1, serialization_format=fmt
    )
    dcp.save(_state(1.0), storage_writer=writer)
    store = ObjectStore(gcs.endpoint)
    (data,) = [n for n in store.list(BUCKET, f"{name}/") if n.endswith(".distcp")]
    generation = store.stat(BUCKET, data).generation
    reader = GCSStorageReader(f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint)
    with pytest.raises(CheckpointException) as info:
        dcp.load(
            _state(0.0),
            storage_reader=reader,
            planner=_DeleteFirst(lambda: store.delete(BUCKET, data)),
        )
    message = str(info.value)
    assert re.search(
        rf"gs://{BUCKET}/{re.escape(data)} bytes=\d+-\d+: object deleted during load: generation "
        rf"{generation} was read from it and the object no longer exists \(HTTP 404\)",
        message,
    ), message
    assert "object changed during load" not in message


def test_a_missing_checkpoint_gives_one_error_without_fallback_tracebacks(gcs, caplog, capfd):
    caplog.set_level(logging.WARNING)
    reader = GCSStorageReader(f"gs://{BUCKET}/nothing/here", endpoint=gcs.endpoint)
    with pytest.raises(CheckpointException) as info:
        dcp.load({"a": torch.empty(1)}, storage_reader=reader)
    message = str(info.value)
    assert (
        f"no checkpoint at gs://{BUCKET}/nothing/here (gs://{BUCKET}/nothing/here/.metadata does "
        "not exist)"
    ) in message, message
    # torch's per-rank fallback: said as what it is (`.metadata` may exist and be the failure)
    assert f"no per-rank metadata (gs://{BUCKET}/nothing/here/__0.metadata does not exist)" in (
        message
    ), message
    logged = [r.getMessage() for r in caplog.records]
    assert not any("metadata is not found" in m for m in logged), logged
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Falling back" not in err, err
