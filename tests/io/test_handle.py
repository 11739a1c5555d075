"""ReadHandle semantics (concurrent handles, cancel, timeout, byte budget, close) and the
plain-Python pieces of gcsckpt.io (RetryPolicy, errors, endpoint resolution)."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from io_fixtures import BUCKET, object_bytes

from gcsckpt.io import (
    ObjectNotFoundError,
    RangeReader,
    RangeReadError,
    RangeRequest,
    RetryPolicy,
    is_emulator_endpoint,
    resolve_endpoint,
)
from gcsckpt.testing import LocalGCS

MiB = 1 << 20


@pytest.fixture(scope="module")
def blob(gcs):
    data = object_bytes(16 * MiB, seed=21)
    gcs.put(BUCKET, "blob", data)
    return data


@pytest.fixture(scope="module")
def slow_gcs(gcs, blob):
    """The same objects behind a rate-capped (4 MB/s per request), 300 ms-latency nginx."""
    with LocalGCS(data_dir=gcs.data_dir, latency_ms=300, stream_mbps=4) as slow:
        yield slow


def test_concurrent_handles_share_one_reader(gcs, blob):
    with RangeReader(gcs.endpoint, max_inflight_requests=8, chunk_bytes=MiB) as reader:
        handles, all_requests = [], []
        for h in range(4):
            requests = [
                RangeRequest(
                    BUCKET, "blob", (h * 7 + i) * 300_000, 250_000, np.empty(250_000, np.uint8)
                )
                for i in range(10)
            ]
            handles.append(reader.submit(requests))
            all_requests += requests
        for handle in reversed(handles):
            handle.wait()
    for r in all_requests:
        assert r.dest.tobytes() == blob[r.offset : r.offset + r.length]


def test_cancel_stops_all_writes(slow_gcs, blob):
    dests = [np.zeros(MiB, np.uint8) for _ in range(16)]
    requests = [RangeRequest(BUCKET, "blob", i * MiB, MiB, d) for i, d in enumerate(dests)]
    with RangeReader(slow_gcs.endpoint, max_inflight_requests=4, chunk_bytes=MiB) as reader:
        handle = reader.submit(requests)
        first = handle.next_completed()
        assert first
        handle.cancel()
        assert handle.done()
        snapshot = [d.copy() for d in dests]
        time.sleep(0.6)  # transfers that were running would have written more by now
        for before, after in zip(snapshot, dests, strict=True):
            assert np.array_equal(before, after)
        done = [i for i, d in enumerate(dests) if d.tobytes() == blob[i * MiB : (i + 1) * MiB]]
        assert len(done) < len(dests)  # cancelled before the end
        for i in first:
            assert i in done


def test_next_completed_timeout(slow_gcs, blob):
    with RangeReader(slow_gcs.endpoint) as reader:
        handle = reader.submit([RangeRequest(BUCKET, "blob", 0, 4 * MiB, bytearray(4 * MiB))])
        with pytest.raises(TimeoutError):
            handle.next_completed(timeout_s=0.05)
        handle.cancel()


def test_byte_budget_smaller_than_a_chunk_still_progresses(gcs, blob):
    requests = [
        RangeRequest(BUCKET, "blob", i * 4 * MiB, 4 * MiB, bytearray(4 * MiB)) for i in range(4)
    ]
    with RangeReader(gcs.endpoint, max_inflight_bytes=MiB, chunk_bytes=4 * MiB) as reader:
        reader.read(requests)
    for r in requests:
        assert bytes(r.dest) == blob[r.offset : r.offset + r.length]


def test_stats_reset_and_close(gcs, blob):
    reader = RangeReader(gcs.endpoint)
    reader.read([RangeRequest(BUCKET, "blob", 0, 10, bytearray(10))])
    assert reader.stats()["requests"] == 1
    reader.reset_stats()
    stats = reader.stats()
    assert stats["requests"] == 0 and stats["bytes_received"] == 0
    assert stats["retries_by_cause"] == {} and stats["latency_p50_s"] == 0
    reader.close()
    with pytest.raises(RuntimeError, match="closed"):
        reader.submit([RangeRequest(BUCKET, "blob", 0, 1, bytearray(1))])


def test_endpoint_from_environment(gcs, blob, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint.removeprefix("http://"))
    with RangeReader() as reader:
        assert reader.endpoint == gcs.endpoint
        assert reader.credential_description == f"anonymous (emulator endpoint) at {gcs.endpoint}"
        dest = bytearray(5)
        reader.read([RangeRequest(BUCKET, "blob", 3, 5, dest)])
    assert bytes(dest) == blob[3:8]


def test_resolve_endpoint(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert resolve_endpoint() == "https://storage.googleapis.com"
    assert resolve_endpoint("127.0.0.1:9023/") == "http://127.0.0.1:9023"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://localhost:4443")
    assert resolve_endpoint() == "http://localhost:4443"
    assert resolve_endpoint("https://x.example") == "https://x.example"
    with pytest.raises(ValueError):
        resolve_endpoint("  ")
    assert is_emulator_endpoint("127.0.0.1:9023")
    assert is_emulator_endpoint("http://gcs.internal:80")
    assert not is_emulator_endpoint("https://storage.googleapis.com")
    assert not is_emulator_endpoint("https://storage.us-central1.rep.googleapis.com")


def test_policy_and_errors_pickle():
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.1, max_backoff_s=1, deadline_s=9)
    assert pickle.loads(pickle.dumps(policy)) == policy
    with pytest.raises(ValueError, match="max_backoff_s"):
        RetryPolicy(initial_backoff_s=2, max_backoff_s=1)
    with pytest.raises(ValueError, match="deadline_s"):
        RetryPolicy(deadline_s=0)
    failure = {
        "bucket": "b",
        "object": "o",
        "offset": 5,
        "length": 10,
        "status": 404,
        "error": "HTTP 404",
        "attempts": 1,
    }
    err = ObjectNotFoundError([failure], total=2)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is ObjectNotFoundError and copy.failures == [failure]
    assert (
        str(copy)
        == str(err)
        == "1 of 2 range request(s) failed:\n  gs://b/o bytes=5-14: HTTP 404 after 1 attempt"
    )
    assert isinstance(RangeReadError([failure]), OSError)


def test_reader_refuses_use_after_fork(gcs, blob):
    import multiprocessing

    with RangeReader(gcs.endpoint) as reader:
        reader.read([RangeRequest(BUCKET, "blob", 0, 10, bytearray(10))])  # workers started
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_use_after_fork, args=(reader, queue))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0
        assert "cannot be used after fork()" in queue.get(timeout=5)
        dest = bytearray(10)  # the parent's reader still works
        reader.read([RangeRequest(BUCKET, "blob", 10, 10, dest)])
    assert bytes(dest) == blob[10:20]


def _use_after_fork(reader, queue):
    try:
        reader.read([RangeRequest(BUCKET, "blob", 0, 10, bytearray(10))])
        queue.put("no error")
    except RuntimeError as e:
        queue.put(str(e))
