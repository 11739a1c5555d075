"""The C++ uploader through gcsckpt.io.Uploader against LocalGCS (and FaultProxy in front of it):
chunked resumable uploads checked by size, generation and CRC-32C; a failed chunk resumed from
the offset the session reports; 503 and 429 retried; a reset after the last chunk completed
from the status query's 200 (nothing re-sent); 412 as UploadPreconditionError; a
permanent failure naming object, offset and attempts; crc32c against google-crc32c; an
object given as a list of parts (buffers and tensors) is their concatenation, each part held
until the upload finished."""

from __future__ import annotations

import gc
import pickle
import weakref

import google_crc32c
import numpy as np
import pytest
import torch
from io_fixtures import BUCKET, FAST_RETRY, object_bytes

from gcsckpt.io import (
    ObjectStore,
    RetryPolicy,
    Uploader,
    UploadError,
    UploadPreconditionError,
    crc32c,
)
from gcsckpt.testing import Fault, FaultProxy

CHUNK = 256 << 10
SIZE = 4 * CHUNK + 77  # four full chunks and a short one: start + 5 PUTs


def _google_crc(data: bytes) -> int:
    return int.from_bytes(google_crc32c.Checksum(data).digest(), "big")


def test_crc32c_matches_google_crc32c():
    data = object_bytes(1 << 20, 5)
    assert crc32c(data) == _google_crc(data)
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(data[1000:], crc32c(data[:1000])) == crc32c(data)
    assert crc32c(np.frombuffer(data, dtype=np.uint8)) == crc32c(data)
    assert crc32c(torch.frombuffer(bytearray(data), dtype=torch.float32)) == crc32c(data)


def test_upload_in_chunks_round_trips(gcs):
    data = object_bytes(SIZE, 1)
    with Uploader(gcs.endpoint, chunk_bytes=CHUNK) as up:
        result = up.upload(BUCKET, "up/plain.distcp", memoryview(data))
        stats = up.stats()
    assert result.size == SIZE
    assert result.crc32c == _google_crc(data)
    assert result.requests == 6 and result.retries == 0 and result.status_queries == 0
    assert gcs.get(BUCKET, "up/plain.distcp") == data
    info = ObjectStore(gcs.endpoint).stat(BUCKET, "up/plain.distcp")
    assert info.generation == result.generation and info.size == SIZE
    assert stats["requests"] == 6 and stats["bytes_sent"] == SIZE and stats["uploads_done"] == 1


def test_many_uploads_in_flight_from_tensors(gcs):
    tensors = [torch.arange(i * 1000, i * 1000 + 70_000, dtype=torch.float32) for i in range(8)]
    with Uploader(gcs.endpoint, max_inflight_requests=8) as up:
        handles = [up.submit(BUCKET, f"up/many/{i}", t) for i, t in enumerate(tensors)]
        results = [h.wait() for h in handles]
    for i, (t, r) in enumerate(zip(tensors, results, strict=True)):
        raw = t.numpy().tobytes()
        assert r.size == len(raw) and r.crc32c == _google_crc(raw)
        assert gcs.get(BUCKET, f"up/many/{i}") == raw


@pytest.mark.parametrize("status", [503, 429])
def test_a_failed_chunk_resumes_from_the_committed_offset(gcs, status):
    # Request 3 is the second chunk: refused by the proxy, so the session holds one chunk.
    name = f"up/resume{status}.distcp"
    data = object_bytes(SIZE, 2)
    fault = Fault(kind="status", status=status, nth=3, media_only=False, object_name=name)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        with Uploader(proxy.endpoint, chunk_bytes=CHUNK, retry=FAST_RETRY) as up:
            result = up.upload(BUCKET, name, data)
            stats = up.stats()
        assert proxy.injected_per_fault == [1]
        methods = [m for m, _ in proxy.request_log]
    assert result.retries == 1 and result.status_queries == 1 and result.restarts == 0
    assert result.resent_bytes == CHUNK  # the refused chunk, sent again from offset CHUNK
    assert methods == ["POST"] + ["PUT"] * 7  # start, 2 chunks, query, 3 chunks
    assert stats["retries_by_cause"] == {f"http_{status}": 1}
    assert gcs.get(BUCKET, name) == data


def test_a_reset_after_the_last_chunk_completes_from_the_status_query(gcs):
    # The endpoint wrote the object before the connection dropped: as GCS, it answers the status
    # query with the object (200), so nothing is sent again and no second generation is made.
    name = "up/reset.distcp"
    data = object_bytes(SIZE, 3)
    fault = Fault(kind="reset_mid_body", nth=6, media_only=False, object_name=name, after_bytes=10)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        with Uploader(proxy.endpoint, chunk_bytes=CHUNK, retry=FAST_RETRY) as up:
            result = up.upload(BUCKET, name, data)
            stats = up.stats()
        assert proxy.counts["reset_mid_body"] == 1
        methods = [m for m, _ in proxy.request_log]
    assert result.status_queries == 1 and result.restarts == 0 and result.resent_bytes == 0
    assert methods == ["POST"] + ["PUT"] * 6  # start, 5 chunks (the last one reset), query
    assert stats["retries_by_cause"] == {"connection_reset": 1}
    assert gcs.get(BUCKET, name) == data
    assert result.generation == ObjectStore(gcs.endpoint).stat(BUCKET, name).generation


def test_precondition_failure_is_its_own_error(gcs):
    name = "up/exists.distcp"
    with Uploader(gcs.endpoint) as up:
        first = up.upload(BUCKET, name, b"first", if_generation_match=0)
        with pytest.raises(UploadPreconditionError) as info:
            up.upload(BUCKET, name, b"second", if_generation_match=0)
        err = info.value
        assert isinstance(err, FileExistsError)
        assert err.failure["cause"] == "precondition_failed" and err.failure["status"] == 412
        assert f"ifGenerationMatch=0 does not hold for gs://{BUCKET}/{name}" in str(err)
        assert err.failure["requests"] == 1  # not retried
        replaced = up.upload(BUCKET, name, b"third", if_generation_match=first.generation)
    assert replaced.generation > first.generation
    assert gcs.get(BUCKET, name) == b"third"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is UploadPreconditionError and again.failure == err.failure


def test_permanent_failure_names_object_offset_and_attempts(gcs):
    name = "up/doomed.distcp"
    faults = [Fault(kind="status", status=503, count=None, media_only=False, object_name=name)]
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.01)
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with Uploader(proxy.endpoint, chunk_bytes=CHUNK, retry=retry) as up:
            with pytest.raises(UploadError) as info:
                up.upload(BUCKET, name, object_bytes(SIZE, 4))
        assert proxy.injected_per_fault == [3]
    failure = info.value.failure
    assert failure["cause"] == "http_503" and failure["status"] == 503
    assert failure["attempts"] == 3 and failure["requests"] == 3 and failure["committed"] == 0
    message = str(info.value)
    assert f"upload of gs://{BUCKET}/{name} failed: HTTP 503" in message
    assert "0 of 1,048,653 bytes committed, offset reached 0; 3 attempt(s) of the last request" in (
        message
    )
    with pytest.raises(FileNotFoundError):
        gcs.get(BUCKET, name)


@pytest.mark.parametrize("status", [404, 410])
def test_an_endpoint_failing_every_last_request_ends_at_the_policy(gcs, status):
    # Every upload's finishing PUT answers "session gone": each restart is a new session, and
    # the sessions count against max_attempts (before, the uploader restarted without end).
    name = f"up/never-commits-{status}.distcp"
    faults = [
        Fault(kind="status", status=status, count=None, media_only=False, last_upload_request=True)
    ]
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5)
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with Uploader(proxy.endpoint, chunk_bytes=CHUNK, retry=retry) as up:
            with pytest.raises(UploadError) as info:
                up.upload(BUCKET, name, object_bytes(SIZE, 5))
        assert proxy.injected_per_fault == [2]  # one finishing PUT per session
        starts = [p for m, p in proxy.request_log if m == "POST" and "uploadType=resumable" in p]
    assert len(starts) == 2
    failure = info.value.failure
    assert failure["cause"] == "session_expired" and failure["status"] == status
    assert failure["restarts"] == 1
    message = str(info.value)
    assert f"upload of gs://{BUCKET}/{name} failed: HTTP {status}" in message, message
    assert "(2 upload session(s) started, max_attempts 2)" in message, message
    with pytest.raises(FileNotFoundError):
        gcs.get(BUCKET, name)


def test_bad_options_are_refused(gcs):
    with pytest.raises(ValueError, match="multiple of 256 KiB"):
        Uploader(gcs.endpoint, chunk_bytes=1000)
    with pytest.raises(ValueError, match="max_inflight_requests"):
        Uploader(gcs.endpoint, max_inflight_requests=0)
    with Uploader(gcs.endpoint) as up:
        with pytest.raises(ValueError, match="if_generation_match"):
            up.submit(BUCKET, "x", b"1", if_generation_match=-5)


def test_an_object_of_parts_is_their_concatenation(gcs):
    tensor = torch.arange(100_000, dtype=torch.float32)  # 400,000 bytes
    head, tail = object_bytes(1000, 2), object_bytes(CHUNK + 3, 4)
    parts = [
        head,
        b"",
        tensor,
        bytearray(b"xyz"),
        memoryview(tail)[1:],
        np.arange(7, dtype=np.int16),
    ]
    want = (
        head + tensor.numpy().tobytes() + b"xyz" + tail[1:] + np.arange(7, dtype=np.int16).tobytes()
    )
    assert crc32c(parts) == crc32c(want) == _google_crc(want)
    with Uploader(gcs.endpoint, chunk_bytes=CHUNK) as up:
        result = up.upload(BUCKET, "up/parts.distcp", tuple(parts))
        empty = up.upload(BUCKET, "up/empty-parts.distcp", [b"", bytearray()])
    assert result.size == len(want) and result.crc32c == _google_crc(want)
    assert result.requests == 1 + 3  # start + ceil(len / CHUNK) PUTs: spans do not add any
    assert gcs.get(BUCKET, "up/parts.distcp") == want
    assert empty.size == 0 and gcs.get(BUCKET, "up/empty-parts.distcp") == b""


def test_the_handle_holds_every_part_until_done(gcs):
    class Part(bytearray):  # bytearray exports a buffer and can be weakly referenced
        pass

    parts = [Part(object_bytes(CHUNK, i)) for i in range(3)]
    want = b"".join(parts)
    refs = [weakref.ref(p) for p in parts]
    with Uploader(gcs.endpoint, chunk_bytes=CHUNK) as up:
        handle = up.submit(BUCKET, "up/held.distcp", parts)
        del parts
        gc.collect()
        assert all(r() is not None for r in refs)  # the handle holds them
        handle.wait()
        gc.collect()
        assert all(r() is None for r in refs)  # released once done
    assert gcs.get(BUCKET, "up/held.distcp") == want


def test_a_part_that_is_no_buffer_is_named(gcs):
    with Uploader(gcs.endpoint) as up:
        with pytest.raises(TypeError, match=r"element 1 \(str\) is no C-contiguous buffer"):
            up.submit(BUCKET, "x", [b"ok", "text"])
        with pytest.raises(ValueError, match="request 1: dest tensor is not contiguous"):
            up.submit(BUCKET, "x", [b"ok", torch.zeros(4, 4).t()])
