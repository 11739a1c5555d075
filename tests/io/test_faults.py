"""Fault injection between the reader and LocalGCS: exact bytes after retries, or the right
error listing the failed ranges, with stats() counting the retries."""

from __future__ import annotations

import pytest
from io_fixtures import BUCKET, FAST_RETRY, object_bytes

from gcsckpt.io import ObjectNotFoundError, RangeReader, RangeReadError, RangeRequest, RetryPolicy
from gcsckpt.testing import Fault, FaultProxy

MiB = 1 << 20
NAME = "faulty/object.distcp"
OTHER = "faulty/other.distcp"


@pytest.fixture(scope="module")
def data(gcs):
    blobs = {NAME: object_bytes(8 * MiB, seed=11), OTHER: object_bytes(2 * MiB, seed=12)}
    for name, blob in blobs.items():
        gcs.put(BUCKET, name, blob)
    return blobs


def read_one(endpoint, offset, length, **options):
    """Reads one range through a fresh reader; returns (bytes, stats)."""
    dest = bytearray(length)
    with RangeReader(endpoint, retry=options.pop("retry", FAST_RETRY), **options) as reader:
        reader.read([RangeRequest(BUCKET, NAME, offset, length, dest)])
        return bytes(dest), reader.stats()


@pytest.mark.parametrize("status", [503, 429, 500, 502, 504, 408])
def test_status_bursts_are_retried(gcs, data, status):
    with FaultProxy(gcs.endpoint, [Fault(kind="status", status=status, count=3)]) as proxy:
        got, stats = read_one(proxy.endpoint, 1000, MiB)
        assert proxy.counts["status"] == 3
    assert got == data[NAME][1000 : 1000 + MiB]
    assert stats["retries_by_cause"] == {f"http_{status}": 3}
    assert stats["retries"] == 3 and stats["requests"] == 4


@pytest.mark.parametrize(
    ("kind", "cause", "extra"),
    [
        ("reset_mid_body", "connection_reset", {}),
        ("short_body", "short_body", {}),
        ("stall", "stall", {"stall_s": 5.0}),
    ],
)
def test_mid_body_faults_resume_only_missing_bytes(gcs, data, kind, cause, extra):
    length, cut = 3 * MiB, 700_000
    fault = Fault(kind=kind, count=1, after_bytes=cut, **extra)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        # min_chunk_bytes keeps the range one GET, so the only request takes the fault.
        got, stats = read_one(
            proxy.endpoint, 4096, length, stall_timeout_s=0.5, min_chunk_bytes=8 * MiB
        )
        assert proxy.counts[kind] == 1
    assert got == data[NAME][4096 : 4096 + length]
    assert stats["retries_by_cause"] == {cause: 1}
    assert stats["requests"] == 2
    # The retry asked only for the missing bytes: nothing was downloaded twice.
    assert stats["bytes_received"] == length


def test_wrong_content_range_is_rejected_then_retried(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault(kind="wrong_content_range", count=2)]) as proxy:
        got, stats = read_one(proxy.endpoint, 10, 5000)
    assert got == data[NAME][10:5010]
    assert stats["retries_by_cause"] == {"bad_content_range": 2}
    assert stats["bytes_received"] == 5000  # rejected answers never reach the destination


def test_mixed_faults_across_many_requests(gcs, data):
    faults = [
        Fault(kind="status", status=503, nth=2),
        Fault(kind="reset_mid_body", nth=5, after_bytes=10_000),
        Fault(kind="status", status=429, nth=9),
        Fault(kind="short_body", nth=12, after_bytes=1),
    ]
    requests = [
        RangeRequest(BUCKET, NAME, i * 256 * 1024, 200_000, bytearray(200_000)) for i in range(30)
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with RangeReader(proxy.endpoint, retry=FAST_RETRY, coalesce_gap_bytes=0) as reader:
            reader.read(requests)
            stats = reader.stats()
    for r in requests:
        assert bytes(r.dest) == data[NAME][r.offset : r.offset + r.length]
    assert stats["retries"] == 4
    assert stats["retries_by_cause"] == {
        "http_503": 1,
        "connection_reset": 1,
        "http_429": 1,
        "short_body": 1,
    }
    assert stats["requests"] == 34


def test_persistent_failure_lists_every_failed_range(gcs, data):
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.005, max_backoff_s=0.02)
    faults = [Fault(kind="status", status=503, count=None, object_name=NAME)]
    requests = [
        RangeRequest(BUCKET, NAME, 0, 100, bytearray(100)),
        RangeRequest(BUCKET, OTHER, 0, 100, bytearray(100)),
        RangeRequest(BUCKET, NAME, 5 * MiB, 100, bytearray(100)),
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with RangeReader(proxy.endpoint, retry=retry, coalesce_gap_bytes=0) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read(requests)
            stats = reader.stats()
    err = info.value
    assert not isinstance(err, ObjectNotFoundError)
    assert [(f["offset"], f["status"], f["attempts"]) for f in err.failures] == [
        (0, 503, 3),
        (5 * MiB, 503, 3),
    ]
    text = str(err)
    assert "2 of 3 range request(s) failed" in text
    assert f"gs://{BUCKET}/{NAME} bytes=0-99: HTTP 503" in text
    assert f"gs://{BUCKET}/{NAME} bytes={5 * MiB}-{5 * MiB + 99}: HTTP 503" in text
    assert text.count("after 3 attempts") == 2
    assert stats["retries_by_cause"] == {"http_503": 4}
    assert stats["failures"] == 2
    assert bytes(requests[1].dest) == data[OTHER][:100]  # the healthy object still arrived


def test_persistent_wrong_content_range_is_an_error(gcs, data):
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.005, max_backoff_s=0.01)
    with FaultProxy(gcs.endpoint, [Fault(kind="wrong_content_range", count=None)]) as proxy:
        with pytest.raises(RangeReadError, match="Content-Range 'bytes 11-20/.*' does not match"):
            read_one(proxy.endpoint, 10, 10, retry=retry)


def test_not_found_is_not_retried(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault(kind="status", status=404, count=None)]) as proxy:
        with RangeReader(proxy.endpoint, retry=FAST_RETRY) as reader:
            with pytest.raises(ObjectNotFoundError) as info:
                reader.read([RangeRequest(BUCKET, NAME, 0, 10, bytearray(10))])
            assert reader.stats()["retries"] == 0
        assert proxy.requests == 1
    assert info.value.failures[0]["attempts"] == 1


def test_next_completed_raises_on_failure_and_cancels(gcs, data):
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.005, max_backoff_s=0.01)
    faults = [Fault(kind="status", status=500, count=None, object_name=OTHER)]
    requests = [RangeRequest(BUCKET, NAME, i * MiB, MiB, bytearray(MiB)) for i in range(8)]
    requests.insert(3, RangeRequest(BUCKET, OTHER, 0, 10, bytearray(10)))
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with RangeReader(proxy.endpoint, retry=retry, max_inflight_requests=2) as reader:
            handle = reader.submit(requests)
            with pytest.raises(RangeReadError, match=f"gs://{BUCKET}/{OTHER} bytes=0-9: HTTP 500"):
                while handle.next_completed():
                    pass
            assert handle.done()


def test_stall_before_headers_is_detected(gcs, data):
    # after_bytes=0 stalls before the first body byte; the retry starts from scratch.
    fault = Fault(kind="stall", count=1, stall_s=5.0, after_bytes=0)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        got, stats = read_one(proxy.endpoint, 0, 1000, stall_timeout_s=0.5)
    assert got == data[NAME][:1000]
    assert stats["retries_by_cause"] == {"stall": 1}
