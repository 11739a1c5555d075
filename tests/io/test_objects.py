"""ObjectStore (google-cloud-storage) against LocalGCS: reads with generation, stat, list, delete,
create-if-absent uploads, the RetryPolicy on control-plane requests, error mapping."""

from __future__ import annotations

import os
import threading

import pytest
import requests
from io_fixtures import BUCKET, FAST_RETRY, object_bytes

from gcsckpt.io import ObjectStore, ObjectStoreError, RetryPolicy, defaults
from gcsckpt.io.objects import BUCKET_METADATA_LOOKUP_ENV
from gcsckpt.io.retry import RETRYABLE_STATUSES, api_core_retry, is_retryable
from gcsckpt.testing import Fault, FaultProxy


@pytest.fixture(scope="module")
def store(gcs):
    with ObjectStore(gcs.endpoint, retry=FAST_RETRY) as s:
        yield s


def test_upload_read_stat_list_delete(gcs, store):
    data = object_bytes(100_000, seed=1)
    generation = store.upload(BUCKET, "objects/a b/one", data)
    got = store.read(BUCKET, "objects/a b/one")
    assert got.data == data and gcs.get(BUCKET, "objects/a b/one") == data
    info = store.stat(BUCKET, "objects/a b/one")
    assert info.name == "objects/a b/one" and info.size == 100_000
    assert info.generation == generation and generation is not None and generation > 0
    store.upload(BUCKET, "objects/two", b"xy")
    listed = store.list_objects(BUCKET, "objects/")
    assert [(o.name, o.size) for o in listed] == [("objects/a b/one", 100_000), ("objects/two", 2)]
    assert store.list(BUCKET, "objects/t") == ["objects/two"]
    store.delete(BUCKET, "objects/two")
    assert not store.exists(BUCKET, "objects/two") and store.size(BUCKET, "objects/two") is None
    store.delete(BUCKET, "objects/two")  # missing_ok
    with pytest.raises(FileNotFoundError, match=rf"gs://{BUCKET}/objects/two: not found"):
        store.delete(BUCKET, "objects/two", missing_ok=False)
    with pytest.raises(FileNotFoundError, match=rf"gs://{BUCKET}/objects/two: not found"):
        store.read(BUCKET, "objects/two")


def test_policy_drives_control_plane_retries(gcs):
    name = "retry/.metadata"
    gcs.put(BUCKET, name, b"meta")
    fault = Fault(kind="status", status=503, count=2, media_only=False, object_name=name)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            assert s.download(BUCKET, name) == b"meta"
        assert proxy.injected_per_fault == [2] and proxy.requests == 3
    policy = RetryPolicy(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.002)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        with ObjectStore(proxy.endpoint, retry=policy) as s:
            with pytest.raises(ObjectStoreError) as info:
                s.download(BUCKET, name)
        assert proxy.requests == 2
    message = str(info.value)
    assert message.startswith(
        f"GET gs://{BUCKET}/retry/.metadata failed after 2 attempts: HTTP 503"
    )


def test_non_retryable_status_fails_at_once(gcs):
    fault = Fault(kind="status", status=403, count=None, media_only=False)
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            with pytest.raises(ObjectStoreError, match=r"after 1 attempt: HTTP 403"):
                s.upload(BUCKET, "forbidden", b"x")
        assert proxy.requests == 1


class _OtherServersErrors:
    """A transport adapter answering every LIST as a non-GCS server does: `status` with a JSON
    body whose "error" is a string (google-api-core raises AttributeError on it unmended)."""

    def __init__(self, inner, status: int, body: bytes):
        self.inner, self.status, self.body = inner, status, body

    def send(self, request, **kwargs):
        if "/o?" not in request.url or "alt=media" in request.url:
            return self.inner.send(request, **kwargs)
        response = requests.Response()
        response.status_code, response._content = self.status, self.body
        response.request, response.url = request, request.url
        response.headers["Content-Type"] = "application/json"
        return response

    def close(self):
        self.inner.close()


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (404, b'{"error": "Not Found"}', FileNotFoundError, "not found (HTTP 404)"),
        (404, b'"gone"', FileNotFoundError, "not found (HTTP 404)"),
        (403, b'{"error": "forbidden here"}', ObjectStoreError, "HTTP 403 'forbidden here'"),
    ],
)
def test_error_bodies_of_other_servers_give_clear_errors(gcs, status, body, error, message):
    with ObjectStore(gcs.endpoint, retry=FAST_RETRY) as store:
        store.list(BUCKET, "")  # makes the client and its session
        session = store._session
        session.mount("http://", _OtherServersErrors(session.get_adapter("http://"), status, body))
        with pytest.raises(error) as info:
            store.list_objects(BUCKET, "ckpt/", delimiter="/")
    assert f"gs://{BUCKET}/ckpt/*" in str(info.value) and message in str(info.value)
    assert "AttributeError" not in str(info.value)


def test_create_if_absent_refusal_and_lost_answer(gcs, store):
    name = "absent/.metadata"
    refused = Fault(kind="status", status=412, count=None, media_only=False, object_name=name)
    with FaultProxy(gcs.endpoint, [refused]) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            with pytest.raises(FileExistsError, match=rf"gs://{BUCKET}/{name}: precondition"):
                s.upload(BUCKET, name, b"new", if_generation_match=0)
        assert proxy.requests == 1
    # The first attempt lands but its answer is lost; the retry is refused (the object exists):
    # the same bytes are there, so the upload succeeded.
    faults = [
        Fault(kind="reset_mid_body", nth=1, media_only=False, object_name=name, after_bytes=0),
        Fault(kind="status", status=412, nth=2, media_only=False, object_name=name),
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            generation = s.upload(BUCKET, name, b"mine", if_generation_match=0)
        assert proxy.injected_per_fault == [1, 1]
    assert gcs.get(BUCKET, name) == b"mine"
    assert generation == store.stat(BUCKET, name).generation


def test_conditional_upload_whose_answers_are_all_lost_is_recognised_by_its_bytes(gcs, store):
    # Every attempt's answer is reset (the first lands, the retries meet 412 unseen): the
    # upload gives up, reads the object back, finds its own bytes at a new generation: success.
    name = "lost-all/.metadata"
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002)
    faults = [
        Fault(kind="reset_mid_body", nth=n, media_only=False, object_name=name, after_bytes=0)
        for n in (1, 2, 3)
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        with ObjectStore(proxy.endpoint, retry=policy) as s:
            generation = s.upload(BUCKET, name, b"mine", if_generation_match=0)
        assert proxy.injected_per_fault == [1, 1, 1]
    assert gcs.get(BUCKET, name) == b"mine"
    assert generation == store.stat(BUCKET, name).generation


def test_replace_at_generation_with_a_lost_answer_returns_the_new_generation(gcs, store):
    name = "replace/.metadata"
    old = store.upload(BUCKET, name, b"old")
    lost = Fault(kind="reset_mid_body", nth=1, media_only=False, object_name=name, after_bytes=0)
    with FaultProxy(gcs.endpoint, [lost]) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            generation = s.upload(BUCKET, name, b"new", if_generation_match=old)
        assert proxy.injected_per_fault == [1]
    assert gcs.get(BUCKET, name) == b"new"
    assert generation == store.stat(BUCKET, name).generation and generation != old
    # Another writer's replacement is refused, not mistaken for ours.
    with pytest.raises(FileExistsError, match=rf"gs://{BUCKET}/{name}: precondition"):
        store.upload(BUCKET, name, b"late", if_generation_match=old)
    assert gcs.get(BUCKET, name) == b"new"


def test_landed_tells_bytes_and_generation(store):
    name = "landed/.metadata"
    generation = store.upload(BUCKET, name, b"ours")
    assert store.landed(BUCKET, name, b"ours") is True
    assert store.landed(BUCKET, name, bytearray(b"ours")) is True
    assert store.landed(BUCKET, name, b"theirs") is False
    assert store.landed(BUCKET, "landed/absent", b"ours") is False
    # Still at the generation the upload meant to replace: not the upload's own object.
    assert store.landed(BUCKET, name, b"ours", if_generation_match=generation) is False


def test_failed_conditional_upload_says_whether_it_landed(gcs):
    policy = RetryPolicy(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.002)
    name = "failed/.metadata"
    # Both POSTs are answered 503 without reaching the endpoint; the read-back finds nothing.
    refused = [
        Fault(kind="status", status=503, nth=n, media_only=False, object_name=name) for n in (1, 2)
    ]
    with FaultProxy(gcs.endpoint, refused) as proxy:
        with ObjectStore(proxy.endpoint, retry=policy) as s:
            with pytest.raises(ObjectStoreError, match="after 2 attempts: HTTP 503") as info:
                s.upload(BUCKET, name, b"x", if_generation_match=0)
        assert proxy.requests == 3  # 2 POSTs, 1 read-back
    assert info.value.landed is False
    # Every request fails, the read-back too: whether it landed is unknown.
    down = Fault(kind="status", status=503, count=None, media_only=False, object_name=name)
    with FaultProxy(gcs.endpoint, [down]) as proxy:
        with ObjectStore(proxy.endpoint, retry=policy) as s:
            with pytest.raises(ObjectStoreError) as info:
                s.upload(BUCKET, name, b"x", if_generation_match=0)
    assert info.value.landed is None
    with pytest.raises(FileNotFoundError):
        gcs.get(BUCKET, name)
    # The first POST lands unseen, the retry meets the endpoint's 412, the read-back fails:
    # neither "ours" nor "theirs" can be told, so the refusal is not reported as one.
    unknown = [
        Fault(kind="reset_mid_body", nth=1, media_only=False, object_name=name, after_bytes=0),
        Fault(kind="status", status=503, nth=3, media_only=False, object_name=name),
        Fault(kind="status", status=503, nth=4, media_only=False, object_name=name),
    ]
    with FaultProxy(gcs.endpoint, unknown) as proxy:
        with ObjectStore(proxy.endpoint, retry=policy) as s:
            with pytest.raises(ObjectStoreError, match="whether an earlier attempt landed") as info:
                s.upload(BUCKET, name, b"x", if_generation_match=0)
        assert proxy.injected_per_fault == [1, 1, 1]
    assert info.value.landed is None and not isinstance(info.value, FileExistsError)
    assert gcs.get(BUCKET, name) == b"x"


def test_retry_policy_refusals_name_field_and_value():
    with pytest.raises(ValueError, match=r"RetryPolicy.initial_backoff_s must be >= 0, got -1"):
        RetryPolicy(initial_backoff_s=-1)
    with pytest.raises(ValueError, match=r"max_backoff_s must be >= initial_backoff_s \(2\)"):
        RetryPolicy(initial_backoff_s=2, max_backoff_s=1)
    with pytest.raises(ValueError, match=r"RetryPolicy.max_attempts must be an int, got 2.5"):
        RetryPolicy(max_attempts=2.5)


def test_retry_conversion_keeps_the_policy():
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.25, max_backoff_s=1.5, deadline_s=7)
    retry = api_core_retry(policy)
    assert (retry._initial, retry._maximum, retry._multiplier, retry._timeout) == (
        0.25,
        1.5,
        2.0,
        7,
    )
    calls = []

    def flaky():
        calls.append(1)
        raise ConnectionResetError("reset")

    fast = api_core_retry(RetryPolicy(max_attempts=3, initial_backoff_s=0, max_backoff_s=0))
    with pytest.raises(ConnectionResetError) as info:
        fast(flaky)()
    assert len(calls) == 3 and info.value.gcsckpt_attempts == 3
    from google.api_core import exceptions

    assert RETRYABLE_STATUSES == {408, 429, 500, 502, 503, 504}
    for status in (408, 429, 500, 502, 503, 504):
        assert is_retryable(exceptions.from_http_status(status, "x"))
    for status in (400, 401, 403, 404, 412, 416):
        assert not is_retryable(exceptions.from_http_status(status, "x"))
    assert not is_retryable(ValueError("bad"))


@pytest.mark.parametrize(
    "size, upload_type",
    [
        (5, "multipart"),  # `.metadata` as the writer commits it
        ((8 << 20) + 1, "resumable"),  # past google-cloud-storage's multipart limit
    ],
)
def test_create_if_absent_is_refused_by_the_endpoint(gcs, size, upload_type):
    # No fault injected: LocalGCS itself answers 412, as GCS does, on every upload path the
    # ObjectStore takes (media uploads, which it never sends, are covered in tests/testing).
    name = f"absent-real/upload-{size}"
    first, second = object_bytes(size, seed=1), object_bytes(size, seed=2)

    def create(s, data):
        return s.upload(BUCKET, name, data, if_generation_match=0)

    with FaultProxy(gcs.endpoint, []) as proxy:
        with ObjectStore(proxy.endpoint, retry=FAST_RETRY) as s:
            create(s, first)
            with pytest.raises(FileExistsError, match=rf"gs://{BUCKET}/{name}: precondition"):
                create(s, second)
        starts = [
            path
            for method, path in proxy.request_log
            if method == "POST" and "ifGenerationMatch=0" in path
        ]
        assert proxy.counts == dict.fromkeys(proxy.counts, 0)
    assert len(starts) == 2 and all(f"uploadType={upload_type}" in p for p in starts), starts
    assert gcs.get(BUCKET, name) == first


def _join_bucket_lookups() -> int:
    """Waits for google-cloud-storage's bucket-lookup threads (started for span labels; their
    target is ``BucketMetadataCache._fetch_background``) and returns how many were running."""
    lookups = [t for t in threading.enumerate() if t.name.endswith("(_fetch_background)")]
    for thread in lookups:
        thread.join(timeout=30)
    return len(lookups)


def test_no_bucket_lookup_races_the_store_requests(gcs, monkeypatch):
    """Why ObjectStore sets google-cloud-storage's switch: a plain client's first use of a bucket
    adds a bucket GET from a background thread (FaultProxy rules and request counts would see a
    request nobody sent); with the switch the store sends exactly its own requests."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    gcs.put(BUCKET, "lookup/one", b"abc")
    monkeypatch.delenv(BUCKET_METADATA_LOOKUP_ENV, raising=False)
    bucket_get = ("GET", f"/storage/v1/b/{BUCKET}?projection=noAcl&prettyPrint=false")
    with FaultProxy(gcs.endpoint, []) as proxy:
        client = storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": proxy.endpoint},
        )
        assert client.bucket(BUCKET).blob("lookup/one").download_as_bytes() == b"abc"
        _join_bucket_lookups()
        assert bucket_get in proxy.request_log, proxy.request_log
        client.close()

    monkeypatch.delenv(BUCKET_METADATA_LOOKUP_ENV, raising=False)
    with FaultProxy(gcs.endpoint, []) as proxy, ObjectStore(proxy.endpoint) as s:
        assert s.read(BUCKET, "lookup/one").data == b"abc"
        assert s.stat(BUCKET, "lookup/one").size == 3
        assert os.environ[BUCKET_METADATA_LOOKUP_ENV] == "true"
        assert _join_bucket_lookups() == 0
        paths = [path.split("?")[0] for _, path in proxy.request_log]
        assert paths == [
            f"/download/storage/v1/b/{BUCKET}/o/lookup%2Fone",
            f"/storage/v1/b/{BUCKET}/o/lookup%2Fone",
        ]


def test_timeouts_default_to_the_range_reader_defaults():
    store = ObjectStore("http://127.0.0.1:1")
    assert store.timeout_s == (defaults.CONNECT_TIMEOUT_S, defaults.STALL_TIMEOUT_S)
    assert ObjectStore("http://127.0.0.1:1", stall_timeout_s=7).timeout_s[1] == 7.0
