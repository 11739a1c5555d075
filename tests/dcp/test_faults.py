"""Endpoint faults (gcsckpt.testing.FaultProxy) during loads and saves: transient ones are
retried and the values are exact; permanent ones end in one clear error and nothing is loaded."""

from __future__ import annotations

import gc
import os
import re
import socket

import google_crc32c
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore, ObjectStoreError, RetryPolicy
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "faults"
META = "good/.metadata"
DATA_GLOB = "good/__0_*.distcp"  # data object names carry the save's id
DATA = DATA_GLOB  # the saved name, set by the `gcs` fixture


def _state():
    return {
        "w": torch.arange(512 * 1024, dtype=torch.float32),  # 2 MiB: faults can strike mid-body
        "b": torch.ones(8, 8, dtype=torch.bfloat16),
        "m": {"step": 3},
    }


def _blank():
    return {
        "w": torch.zeros(512 * 1024),
        "b": torch.zeros(8, 8, dtype=torch.bfloat16),
        "m": {"step": 0},
    }


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        writer = GCSStorageWriter(f"gs://{BUCKET}/good", endpoint=endpoint.endpoint, thread_count=1)
        dcp.save(_state(), storage_writer=writer)
        global DATA
        (DATA,) = [n for n in ObjectStore(endpoint.endpoint).list(BUCKET, "good/") if n != META]
        yield endpoint


def _load(endpoint, url=f"gs://{BUCKET}/good", **kw):
    state = _blank()
    reader = GCSStorageReader(url, endpoint=endpoint, **kw)
    dcp.load(state, storage_reader=reader)
    return state, reader.load_stats


def _exact(state):
    want = _state()
    return (
        torch.equal(state["w"], want["w"])
        and torch.equal(state["b"], want["b"])
        and state["m"] == want["m"]
    )


@pytest.mark.parametrize(
    "fault",
    [
        Fault(kind="status", status=503, count=3, object_glob=DATA_GLOB),
        Fault(kind="status", status=429, count=1, object_glob=DATA_GLOB),
        Fault(kind="reset_mid_body", count=2, object_glob=DATA_GLOB),
        Fault(kind="short_body", count=1, object_glob=DATA_GLOB),
        Fault(kind="wrong_content_range", count=1, object_glob=DATA_GLOB),
        Fault(kind="stall", stall_s=1.0, count=1, object_glob=DATA_GLOB),
    ],
    ids=lambda f: f"{f.kind}-{f.status}" if f.kind == "status" else f.kind,
)
def test_transient_data_faults_are_retried(gcs, fault):
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        state, stats = _load(proxy.endpoint, retry=RetryPolicy(initial_backoff_s=0.01))
        assert proxy.counts[fault.kind] >= 1
    assert _exact(state)
    if fault.kind != "stall":  # a stall only delays the answer
        assert stats.retries >= 1


def test_metadata_get_is_retried(gcs):
    fault = Fault(kind="status", status=503, count=2, object_name="good/.metadata")
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        state, stats = _load(proxy.endpoint)
        assert proxy.counts["status"] == 2
    assert _exact(state) and stats.metadata_requests == 1


@pytest.mark.parametrize(("status", "label"), [(503, "HTTP 503"), (404, "404")])
def test_permanent_failure_is_one_clear_error(gcs, status, label):
    fault = Fault(kind="status", status=status, count=None, object_glob=DATA_GLOB)
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        state = _blank()
        reader = GCSStorageReader(f"gs://{BUCKET}/good", endpoint=proxy.endpoint, retry=retry)
        with pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader)
    message = str(info.value)
    # Which ranges are listed depends on which GETs failed before the rest were cancelled.
    expected = rf"rank 0: checkpoint load failed: gs://{BUCKET}/{DATA} bytes=\d+-\d+"
    assert re.search(expected, message)
    assert label in message
    assert torch.count_nonzero(state["w"]) == 0 and state["m"] == {"step": 0}


def test_loads_release_their_file_descriptors(gcs):
    # A new reader per load, as a training job restarting from checkpoints makes them; with the
    # cyclic collector off, what a load leaves open stays open unless the load closes it.
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    _load(gcs.endpoint)  # imports, the first client's one-off files
    gc.collect()
    gc.disable()
    try:
        before = open_fds()
        for _ in range(8):
            state, stats = _load(gcs.endpoint)
            assert _exact(state) and stats.requests >= 1
        after = open_fds()
    finally:
        gc.enable()
    assert after <= before, f"{after - before} file descriptors left open by 8 loads"


def test_upload_faults_are_retried(gcs):
    faults = [
        Fault(
            kind="status", status=503, count=2, media_only=False, object_name="retried/.metadata"
        ),
        Fault(
            kind="status", status=500, count=1, media_only=False, object_glob="retried/__0_*.distcp"
        ),
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        writer = GCSStorageWriter(f"gs://{BUCKET}/retried", endpoint=proxy.endpoint, thread_count=1)
        dcp.save(_state(), storage_writer=writer)
        assert proxy.injected_per_fault[1] == 1 and proxy.injected_per_fault[0] >= 1
    state, _ = _load(gcs.endpoint, url=f"gs://{BUCKET}/retried")
    assert _exact(state)


def test_data_upload_resumes_after_a_refused_chunk(gcs):
    # 256 KiB chunks: the ~2 MiB data object goes up in 9 PUTs; the second one is refused, so
    # the uploader asks the session for its offset and sends from there.
    fault = Fault(
        kind="status", status=503, nth=3, media_only=False, object_glob="resumed/__0_*.distcp"
    )
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        writer = GCSStorageWriter(
            f"gs://{BUCKET}/resumed", endpoint=proxy.endpoint, thread_count=1, chunk_bytes=256 << 10
        )
        dcp.save(_state(), storage_writer=writer)
        assert proxy.injected_per_fault == [1]
    (upload,) = writer.uploads
    assert upload.retries == 1 and upload.status_queries == 1 and upload.restarts == 0
    assert upload.resent_bytes == 256 << 10
    stored = gcs.get(BUCKET, upload.object)
    assert upload.crc32c == int.from_bytes(google_crc32c.Checksum(stored).digest(), "big")
    state, _ = _load(gcs.endpoint, url=f"gs://{BUCKET}/resumed")
    assert _exact(state)


def test_data_upload_reset_after_its_last_chunk_completes_from_the_status_query(gcs):
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/reset-ref", endpoint=gcs.endpoint, thread_count=1, chunk_bytes=256 << 10
    )
    dcp.save(_state(), storage_writer=writer)
    last = 1 + -(-writer.uploads[0].size // (256 << 10))  # the start, then one PUT per chunk
    fault = Fault(
        kind="reset_mid_body",
        nth=last,
        after_bytes=10,
        media_only=False,
        object_glob="reset/__0_*.distcp",
    )
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        writer = GCSStorageWriter(
            f"gs://{BUCKET}/reset", endpoint=proxy.endpoint, thread_count=1, chunk_bytes=256 << 10
        )
        dcp.save(_state(), storage_writer=writer)
        assert proxy.counts["reset_mid_body"] == 1
    (upload,) = writer.uploads
    # The endpoint had written the object: the status query answers it (200), nothing is re-sent.
    assert upload.status_queries == 1 and upload.restarts == 0 and upload.resent_bytes == 0
    state, _ = _load(gcs.endpoint, url=f"gs://{BUCKET}/reset")
    assert _exact(state)


def test_silent_endpoint_fails_within_the_retry_policy():
    # Accepts connections and never answers: `.metadata` must fail after the policy's attempts,
    # not after attempts x a long socket timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05)
        reader = GCSStorageReader(
            f"gs://{BUCKET}/silent", endpoint=endpoint, retry=retry, stall_timeout_s=0.5
        )
        state = _blank()
        with pytest.raises((CheckpointException, ObjectStoreError)) as info:
            dcp.load(state, storage_reader=reader)
    message = str(info.value)
    assert f"gs://{BUCKET}/silent/.metadata" in message or ".metadata" in message
    assert "after 2 attempts" in message
    assert torch.count_nonzero(state["w"]) == 0


def test_commit_whose_answers_are_lost_keeps_the_objects_its_metadata_names(gcs):
    # Every request for `.metadata` after the pre-check is reset once its answer has started:
    # the first POST lands upstream, its answer and the retries' answers (412) are lost, and so
    # is the check whether it landed. The save fails, but deleting its data objects would leave
    # a committed `.metadata` that names deleted objects: they must stay.
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)
    faults = [
        Fault(kind="reset_mid_body", nth=n, media_only=False, object_name="lost/.metadata")
        for n in range(2, 12)
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        writer = GCSStorageWriter(
            f"gs://{BUCKET}/lost", endpoint=proxy.endpoint, thread_count=1, retry=retry
        )
        with pytest.raises(CheckpointException) as info:
            dcp.save(_state(), storage_writer=writer)
    message = str(info.value)
    assert f"gs://{BUCKET}/lost/.metadata" in message
    assert "could not tell whether" in message and "kept" in message
    names = ObjectStore(gcs.endpoint).list(BUCKET, "lost/")
    assert "lost/.metadata" in names and len(names) == 2
    state, _ = _load(gcs.endpoint, url=f"gs://{BUCKET}/lost")
    assert _exact(state)


def test_overwrite_whose_commit_answer_is_lost_still_deletes_the_replaced_objects(gcs):
    # overwrite=True commits `.metadata` at the generation it read: its first POST lands but
    # the answer is reset, the retry meets 412 (our own `.metadata`). The save must see that it
    # committed and delete the replaced checkpoint's objects, as without the fault.
    url = f"gs://{BUCKET}/replaced"
    first = GCSStorageWriter(url, endpoint=gcs.endpoint, thread_count=4)
    dcp.save({f"w{i}": torch.full((1024,), float(i)) for i in range(4)}, storage_writer=first)
    store = ObjectStore(gcs.endpoint)
    assert len(store.list(BUCKET, "replaced/")) == 5
    # The commit's requests: stat, read of the old `.metadata`, then the POST (3rd).
    fault = Fault(kind="reset_mid_body", nth=3, media_only=False, object_name="replaced/.metadata")
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        writer = GCSStorageWriter(url, endpoint=proxy.endpoint, thread_count=1, overwrite=True)
        dcp.save(_state(), storage_writer=writer)
        assert proxy.injected_per_fault == [1]
    (upload,) = writer.uploads
    assert sorted(store.list(BUCKET, "replaced/")) == ["replaced/.metadata", upload.object]
    state, _ = _load(gcs.endpoint, url=url)
    assert _exact(state)
