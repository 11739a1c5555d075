"""Odd object names, missing buckets/objects, ranges past the end, endpoint down, bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from io_fixtures import BUCKET, object_bytes

from gcsckpt.io import ObjectNotFoundError, RangeReader, RangeReadError, RangeRequest, RetryPolicy
from gcsckpt.testing.ports import free_port

ODD_NAMES = [
    "dir/sub/obj.distcp",
    "with space",
    "ünïcødé/€uro",
    "100%",
    "a+b",
    "hash#tag",
    "what?x=1&y",
    "mixed /%+#? é",
]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_object_names(gcs, name):
    data = object_bytes(50_000, seed=len(name))
    gcs.put(BUCKET, name, data)
    dest = bytearray(777)
    with RangeReader(gcs.endpoint) as reader:
        reader.read([RangeRequest(BUCKET, name, 12_345, 777, dest)])
    assert bytes(dest) == data[12_345 : 12_345 + 777]


def test_missing_object_names_bucket_and_object(gcs):
    with RangeReader(gcs.endpoint) as reader:
        with pytest.raises(ObjectNotFoundError) as info:
            reader.read([RangeRequest(BUCKET, "no/such.distcp", 0, 10, bytearray(10))])
        assert reader.stats()["retries"] == 0
    err = info.value
    assert isinstance(err, FileNotFoundError) and isinstance(err, RangeReadError)
    assert f"gs://{BUCKET}/no/such.distcp bytes=0-9" in str(err)
    assert f"bucket '{BUCKET}'" in str(err) and "object 'no/such.distcp'" in str(err)
    assert err.failures[0]["status"] == 404 and err.failures[0]["attempts"] == 1


def test_missing_bucket(gcs):
    with RangeReader(gcs.endpoint) as reader:
        with pytest.raises(ObjectNotFoundError, match="bucket 'no-such-bucket'"):
            reader.read([RangeRequest("no-such-bucket", "x", 5, 5, bytearray(5))])


def test_one_missing_object_fails_alone(gcs):
    data = object_bytes(10_000, seed=3)
    gcs.put(BUCKET, "present", data)
    good = [RangeRequest(BUCKET, "present", i * 1000, 1000, bytearray(1000)) for i in range(5)]
    bad = RangeRequest(BUCKET, "absent", 0, 100, bytearray(100))
    with RangeReader(gcs.endpoint) as reader:
        with pytest.raises(RangeReadError) as info:
            reader.read([*good[:2], bad, *good[2:]])
    assert [f["index"] for f in info.value.failures] == [2]
    assert "1 of 6 range request(s) failed" in str(info.value)
    for r in good:
        assert bytes(r.dest) == data[r.offset : r.offset + r.length]


def test_ranges_past_the_end(gcs):
    gcs.put(BUCKET, "short", object_bytes(1000, seed=4))
    with RangeReader(gcs.endpoint) as reader:
        with pytest.raises(RangeReadError, match="reaches past the end of the object"):
            reader.read([RangeRequest(BUCKET, "short", 900, 200, bytearray(200))])
        with pytest.raises(RangeReadError, match="HTTP 416"):
            reader.read([RangeRequest(BUCKET, "short", 5000, 10, bytearray(10))])
        assert reader.stats()["retries"] == 0


def test_endpoint_down_fails_fast_with_clear_error():
    port = free_port()  # nothing listens here
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)
    result = {}

    def run():
        with RangeReader(f"http://127.0.0.1:{port}", retry=retry) as reader:
            try:
                reader.read([RangeRequest("b", "o", 0, 10, bytearray(10))])
            except RangeReadError as e:
                result["error"] = e
            result["stats"] = reader.stats()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=60)  # a hang guard, not a speed target
    assert not worker.is_alive(), "reader hung on a dead endpoint"
    err = result["error"]
    assert "gs://b/o bytes=0-9: connection failed" in str(err)
    assert str(port) in str(err) and "after 3 attempts" in str(err)
    assert err.failures[0]["status"] is None
    assert result["stats"]["retries_by_cause"] == {"connection_refused": 2}


def test_bad_requests_name_the_request(gcs):
    with RangeReader(gcs.endpoint) as reader:
        ok = RangeRequest(BUCKET, "x", 0, 4, bytearray(4))
        with pytest.raises(
            ValueError, match=r"request 1 \(gs://reader-tests/y bytes=0-9\).*3 bytes"
        ):
            reader.submit([ok, RangeRequest(BUCKET, "y", 0, 10, bytearray(3))])
        with pytest.raises(ValueError, match="request 0.*writable"):
            reader.submit([RangeRequest(BUCKET, "y", 0, 3, b"abc")])
        with pytest.raises(ValueError, match="request 0.*C-contiguous"):
            reader.submit([RangeRequest(BUCKET, "y", 0, 8, np.zeros(16, np.uint8)[::2])])
        with pytest.raises(ValueError, match="request 0: dest tensor is not contiguous"):
            reader.submit([RangeRequest(BUCKET, "y", 0, 8, torch.zeros(4, 2).t())])
        with pytest.raises(ValueError, match="request 0: offset must be >= 0"):
            reader.submit([RangeRequest(BUCKET, "y", -1, 1, bytearray(1))])
        with pytest.raises(ValueError, match="request 0: bucket is empty"):
            reader.submit([RangeRequest("", "y", 0, 1, bytearray(1))])
        with pytest.raises(TypeError, match="request 0 must be a RangeRequest"):
            reader.submit([[BUCKET, "y", 0, 1, bytearray(1)]])
        with pytest.raises(TypeError, match="request 0: object must be a str"):
            reader.submit([(BUCKET, b"y", 0, 1, bytearray(1))])
        assert reader.stats()["requests"] == 0


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="max_inflight_requests"):
        RangeReader("http://127.0.0.1:1", max_inflight_requests=0)
    with pytest.raises(ValueError, match="chunk_bytes"):
        RangeReader("http://127.0.0.1:1", chunk_bytes=0)
    with pytest.raises(ValueError, match="coalesce_gap_bytes"):
        RangeReader("http://127.0.0.1:1", coalesce_gap_bytes=-1)
    with pytest.raises(ValueError, match="stall_timeout_s"):
        RangeReader("http://127.0.0.1:1", stall_timeout_s=0)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
