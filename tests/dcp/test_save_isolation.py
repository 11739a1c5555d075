"""A save never touches another save's bytes: per-save object names, create-if-absent commits,
cleanup of refused, failed and overwritten saves, and empty objects, through LocalGCS."""

from __future__ import annotations

import io
import pickle
import uuid

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.api import CheckpointException

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore, Uploader
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "isolation"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _names(gcs, prefix):
    return sorted(ObjectStore(gcs.endpoint).list(BUCKET, f"{prefix}/"))


def _load(gcs, name, state):
    dcp.load(state, storage_reader=GCSStorageReader(f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint))
    return state


def _referenced(gcs, name):
    metadata = pickle.loads(gcs.get(BUCKET, f"{name}/.metadata"))
    paths = {f"{name}/{info.relative_path}" for info in metadata.storage_data.values()}
    return metadata, sorted(paths)


class _CommitsLate(GCSStorageWriter):
    """Runs `before_commit` (another whole save) just before committing its own `.metadata`:
    both saves passed the overwrite check and wrote their data, as racing jobs do."""

    def __init__(self, *args, before_commit, **kwargs):
        super().__init__(*args, **kwargs)
        self.before_commit = before_commit

    def finish(self, metadata, results):
        self.before_commit()
        super().finish(metadata, results)


def _race(gcs, name, *, loser_endpoint):
    def winner():
        state = {"x": torch.full((4,), 9.0), "tag": "new"}
        writer = GCSStorageWriter(f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint, thread_count=1)
        dcp.save(state, storage_writer=writer)

    loser = _CommitsLate(
        f"gs://{BUCKET}/{name}", endpoint=loser_endpoint, thread_count=1, before_commit=winner
    )
    with pytest.raises(CheckpointException) as info:
        dcp.save({"x": torch.ones(4), "tag": "old"}, storage_writer=loser)
    return str(info.value)


def _check_one_complete_checkpoint(gcs, name, message):
    assert "Checkpoint already exists and overwrite=False" in message
    assert f"gs://{BUCKET}/{name}/.metadata was committed by another save" in message
    assert "deleted this save's objects (1 name(s), best effort)" in message
    metadata, referenced = _referenced(gcs, name)
    assert _names(gcs, name) == sorted([f"{name}/.metadata", *referenced])  # nothing of the loser
    state = _load(gcs, name, {"x": torch.zeros(4), "tag": ""})
    assert torch.equal(state["x"], torch.full((4,), 9.0)) and state["tag"] == "new"


def test_racing_saves_leave_one_checkpoint_by_the_real_precondition(gcs):
    # No fault injected: the endpoint itself refuses the loser's create-if-absent (412). The
    # proxy only records which upload the writer's commit is (one request, multipart).
    with FaultProxy(gcs.endpoint, []) as proxy:
        message = _race(gcs, "race", loser_endpoint=proxy.endpoint)
        commits = [
            path
            for method, path in proxy.request_log
            if method == "POST" and "ifGenerationMatch=0" in path
        ]
        assert proxy.counts == dict.fromkeys(proxy.counts, 0)
    assert len(commits) == 1 and "uploadType=multipart" in commits[0], commits
    _check_one_complete_checkpoint(gcs, "race", message)


def test_racing_saves_loser_is_refused_and_cleans_up(gcs):
    # As GCS answers the loser's create-if-absent: 412. Its requests for `.metadata`: the
    # overwrite check (1st), the commit (2nd).
    name = "race-proxy"
    refuse = Fault(
        kind="status", status=412, nth=2, media_only=False, object_name=f"{name}/.metadata"
    )
    with FaultProxy(gcs.endpoint, [refuse]) as proxy:
        message = _race(gcs, name, loser_endpoint=proxy.endpoint)
        assert proxy.injected_per_fault == [1]
    _check_one_complete_checkpoint(gcs, name, message)


def test_data_object_names_carry_the_save(gcs):
    writer = GCSStorageWriter(f"gs://{BUCKET}/named", endpoint=gcs.endpoint, thread_count=2)
    dcp.save({"a": torch.ones(10), "b": torch.zeros(20)}, storage_writer=writer)
    metadata, referenced = _referenced(gcs, "named")
    tag = uuid.UUID(metadata.storage_meta.save_id).hex[:16]
    assert referenced == [f"named/__0_{tag}_0.distcp", f"named/__0_{tag}_1.distcp"]


def test_overwrite_with_fewer_objects_leaves_no_stale_objects(gcs):
    many = {f"t{i}": torch.full((100,), float(i)) for i in range(4)}
    writer = GCSStorageWriter(f"gs://{BUCKET}/shrink", endpoint=gcs.endpoint, thread_count=4)
    dcp.save(many, storage_writer=writer)
    assert len(_names(gcs, "shrink")) == 5
    few = {f"t{i}": torch.full((100,), -float(i)) for i in range(4)}
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/shrink", endpoint=gcs.endpoint, thread_count=1, overwrite=True
    )
    dcp.save(few, storage_writer=writer)
    _, referenced = _referenced(gcs, "shrink")
    assert len(referenced) == 1
    assert _names(gcs, "shrink") == sorted(["shrink/.metadata", *referenced])
    state = _load(gcs, "shrink", {f"t{i}": torch.zeros(100) for i in range(4)})
    assert all(torch.equal(state[f"t{i}"], few[f"t{i}"]) for i in range(4))


class _FailsOn(DefaultSavePlanner):
    def resolve_data(self, write_item):
        if write_item.index.fqn == "boom":
            raise RuntimeError("serializer died")
        return super().resolve_data(write_item)


def test_failed_save_deletes_what_it_wrote(gcs):
    state = {"a": torch.ones(1000), "boom": torch.ones(10)}
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/failed",
        endpoint=gcs.endpoint,
        thread_count=1,
        single_file_per_rank=False,  # `a` is a whole object before `boom` fails
    )
    with pytest.raises(CheckpointException) as info:
        dcp.save(state, storage_writer=writer, planner=_FailsOn())
    assert "serializer died" in str(info.value)
    assert "deleted this save's objects (2 name(s), best effort)" in str(info.value)
    assert _names(gcs, "failed") == []


class _RawBytesSave(DefaultSavePlanner):
    """Writes BytesIO values as their raw bytes (the default planner torch.saves them)."""

    def resolve_data(self, write_item):
        value = self.lookup_object(write_item.index)
        if isinstance(value, io.BytesIO):
            return io.BytesIO(value.getvalue())
        return super().resolve_data(write_item)


class _RawBytes(DefaultLoadPlanner):
    """Keeps BYTE_IO items as raw bytes (the default planner would torch.load them)."""

    def __init__(self):
        super().__init__()
        self.loaded: dict[str, bytes] = {}

    def load_bytes(self, read_item, value):
        self.loaded[read_item.dest_index.fqn] = value.read()


def test_zero_byte_objects_round_trip(gcs):
    store = ObjectStore(gcs.endpoint)
    store.upload(BUCKET, "zero/plain", b"")
    with Uploader(gcs.endpoint) as uploader:  # the data path's resumable upload
        uploader.upload(BUCKET, "zero/streamed", b"")
    for name in ("zero/plain", "zero/streamed"):
        assert store.read(BUCKET, name).data == b"" and store.size(BUCKET, name) == 0

    # One object per item: the empty BYTE_IO blob is a 0-byte object.
    url = f"gs://{BUCKET}/zero/blob"
    state = {"blob": io.BytesIO(b""), "x": torch.arange(3.0)}
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint, single_file_per_rank=False)
    dcp.save(state, storage_writer=writer, planner=_RawBytesSave())
    sizes = {o.name: o.size for o in store.list_objects(BUCKET, "zero/blob/")}
    assert sorted(sizes.values())[0] == 0 and len(sizes) == 3
    target = {"blob": io.BytesIO(), "x": torch.zeros(3)}
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    planner = _RawBytes()
    dcp.load(target, storage_reader=reader, planner=planner)
    assert planner.loaded == {"blob": b""} and torch.equal(target["x"], torch.arange(3.0))


def test_rank_without_items_round_trip(gcs):
    url = f"gs://{BUCKET}/zero/none"
    dcp.save({}, storage_writer=GCSStorageWriter(url, endpoint=gcs.endpoint))
    assert _names(gcs, "zero/none") == ["zero/none/.metadata"]  # no empty data objects
    dcp.load({}, storage_reader=GCSStorageReader(url, endpoint=gcs.endpoint))
