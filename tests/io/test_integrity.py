"""One version per read, exact range semantics and honest errors, against hostile servers.

Each case is LocalGCS, with FaultProxy rules where a server must misbehave: an object replaced
between two GETs of one read (answered 404, 412, or with the new version whatever generation
was asked), a ranged GET answered with the whole object, a connection cut after an exact byte
count, a merged GET that meets the object's end, and an error body that echoes the request's
Authorization header.
"""

from __future__ import annotations

import pickle
import urllib.parse

import pytest
from io_fixtures import BUCKET, FAST_RETRY, object_bytes

from gcsckpt.io import (
    ObjectChangedError,
    ObjectNotFoundError,
    RangeReader,
    RangeReadError,
    RangeRequest,
)
from gcsckpt.io.redact import redact
from gcsckpt.testing import Fault, FaultProxy, quote_object

MiB = 1 << 20
OBJ = "ckpt/__0_0.distcp"
TOKEN = "ya29.tok-SECRET-123"  # noqa: S105 (a fake token the server echoes)


def sequential_reader(endpoint: str, **options) -> RangeReader:
    """One request in flight and 2 MiB GETs: a 16 MiB read is exactly 8 GETs, in order."""
    options.setdefault("retry", FAST_RETRY)
    return RangeReader(
        endpoint, max_inflight_requests=1, chunk_bytes=2 * MiB, min_chunk_bytes=2 * MiB, **options
    )


def _asked_generation(path: str) -> str | None:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query)).get("generation")


def _overwrite_before_call(gcs, proxy, name: str, data: bytes, call: int, then: list[Fault]):
    """A token provider (its tokens are already expired, so it runs before every attempt) that
    overwrites gs://BUCKET/name with `data` at its `call`th call and from then on applies the
    FaultProxy rules `then`. Returns (provider, record): record["generation"] is the new
    generation, record["before"] the proxy's request log up to the overwrite."""
    calls, record = [], {}

    def provider():
        calls.append(1)
        if len(calls) == call:
            record["generation"] = gcs.put(BUCKET, name, data)
            record["before"] = proxy.request_log
            proxy.set_faults(then)
        return "unused-by-the-local-endpoint", 1.0

    return provider, record


# one generation per object per read ------------------------------------------------------------

_AFTER_OVERWRITE = {
    "404": [],  # LocalGCS itself: the pinned generation is gone
    "412": [Fault("status", status=412, count=None)],
    "ignore": [Fault("ignore_generation", count=None)],  # the new version, whatever was asked
}


@pytest.mark.parametrize("on_old_generation", ["404", "412", "ignore"])
def test_overwrite_between_gets_fails_as_object_changed(gcs, on_old_generation):
    name = f"ckpt/raced-{on_old_generation}.distcp"
    old, new = object_bytes(16 * MiB, seed=1), object_bytes(16 * MiB, seed=2)
    old_generation = gcs.put(BUCKET, name, old)
    media_before = len(gcs.media_requests())
    dest = bytearray(16 * MiB)
    with FaultProxy(gcs.endpoint) as proxy:
        # 1: submit, 2-4: GETs 1-3, 5: before GET 4.
        provider, record = _overwrite_before_call(
            gcs, proxy, name, new, 5, _AFTER_OVERWRITE[on_old_generation]
        )
        with sequential_reader(proxy.endpoint, token_provider=provider, send_token=True) as reader:
            handle = reader.submit([RangeRequest(BUCKET, name, 0, 16 * MiB, dest)])
            assert handle.num_fetches == 8
            with pytest.raises(ObjectChangedError) as info:
                handle.wait()
        seen = record["before"] + proxy.request_log
    new_generation = record["generation"]
    err = info.value
    assert not isinstance(err, ObjectNotFoundError)  # not a misleading "does not exist"
    assert "object changed during read" in str(err)
    assert f"gs://{BUCKET}/{name}" in str(err)
    assert f"generation {old_generation}" in str(err)
    changed = err.changed
    assert changed and all(f["pinned_generation"] == old_generation for f in changed)
    if on_old_generation == "ignore":  # the server answered the new version: both are named
        assert f"generation {new_generation}" in str(err)
        assert changed[0]["seen_generation"] == new_generation
    else:
        assert changed[0]["status"] == int(on_old_generation)
        assert changed[0]["bytes_received"] == 0  # GET 4 and later: nothing of the new version
    assert bytes(dest[: 6 * MiB]) == old[: 6 * MiB]
    assert gcs.get(BUCKET, name) == new
    # The first answer pinned the old generation; every later GET asked for exactly it, and
    # none of the new generation's bytes was accepted.
    assert len(seen) == 8
    ours = [r for r in gcs.media_requests()[media_before:] if quote_object(name) in r.uri]
    assert [r.status for r in ours[:3]] == [206] * 3
    assert _asked_generation(seen[0][1]) is None
    assert all(_asked_generation(path) == str(old_generation) for _, path in seen[1:])


def test_requested_generation_is_sent_on_every_get_and_checked(gcs):
    name = "ckpt/requested.distcp"
    old, new = object_bytes(4 * MiB, seed=3), object_bytes(4 * MiB, seed=4)
    old_generation = gcs.put(BUCKET, name, old)
    new_generation = gcs.put(BUCKET, name, new)
    with FaultProxy(gcs.endpoint) as proxy, sequential_reader(proxy.endpoint) as reader:
        got = bytearray(4 * MiB)
        handle = reader.submit([RangeRequest(BUCKET, name, 0, 4 * MiB, got, new_generation)])
        handle.wait()
        assert handle.generations() == {(BUCKET, name): new_generation}
        assert bytes(got) == new
        with pytest.raises(ObjectChangedError, match=f"generation {old_generation} is no longer"):
            reader.read(
                [RangeRequest(BUCKET, name, 0, 4 * MiB, bytearray(4 * MiB), old_generation)]
            )
        seen = [_asked_generation(path) for _, path in proxy.request_log]
    assert seen == [str(new_generation)] * 2 + [str(old_generation)] * 2


def test_pinned_generation_applies_to_every_range_of_the_object(gcs):
    name = "ckpt/pinned.distcp"
    old, new = object_bytes(6 * MiB, seed=5), object_bytes(6 * MiB, seed=6)
    gcs.put(BUCKET, name, old)
    requests = [RangeRequest(BUCKET, name, i * 2 * MiB, MiB, bytearray(MiB)) for i in range(3)]
    with FaultProxy(gcs.endpoint) as proxy:
        # 1: submit, 2: GET 1, 3: before GET 2; then the server ignores generation=.
        then = [Fault("ignore_generation", count=None)]
        provider, _ = _overwrite_before_call(gcs, proxy, name, new, 3, then)
        with sequential_reader(proxy.endpoint, token_provider=provider, send_token=True) as reader:
            with pytest.raises(ObjectChangedError) as info:
                reader.read(requests)
    # Request 0 read the old generation; 1 and 2 met the new one and failed instead of mixing.
    assert [f["index"] for f in info.value.failures] == [1, 2]
    assert bytes(requests[0].dest) == old[:MiB]


def test_conflicting_generations_in_one_submit_are_refused():
    with RangeReader("http://127.0.0.1:1") as reader:
        with pytest.raises(ValueError, match="generation 7 differs from generation 6"):
            reader.submit(
                [
                    RangeRequest(BUCKET, OBJ, 0, 1, bytearray(1), 6),
                    RangeRequest(BUCKET, OBJ, 5, 1, bytearray(1), 7),
                ]
            )


# a 200 with the whole object for a ranged GET --------------------------------------------------


@pytest.mark.parametrize("offset", [0, MiB + 5])
def test_whole_object_answer_gives_exactly_the_range(gcs, offset):
    name = "ckpt/whole.distcp"
    data = object_bytes(3 * MiB, seed=7)
    gcs.put(BUCKET, name, data)
    dest = bytearray(MiB)
    with FaultProxy(gcs.endpoint, [Fault("ignore_range", count=None)]) as proxy:
        with RangeReader(proxy.endpoint, retry=FAST_RETRY) as reader:
            reader.read([RangeRequest(BUCKET, name, offset, MiB, dest)])
            stats = reader.stats()
        ranges = proxy.request_ranges
    assert bytes(dest) == data[offset : offset + MiB]
    assert stats["whole_object_answers"] == 1 and stats["retries"] == 0
    assert stats["bytes_received"] == MiB
    assert ranges == [f"bytes={offset}-{offset + MiB - 1}"]


def test_whole_object_answer_shorter_than_the_range_fails_at_once(gcs):
    name = "ckpt/whole-short.distcp"
    gcs.put(BUCKET, name, object_bytes(MiB, seed=8))
    with FaultProxy(gcs.endpoint, [Fault("ignore_range", count=None)]) as proxy:
        with RangeReader(proxy.endpoint, retry=FAST_RETRY) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, name, MiB - 10, 100, bytearray(100))])
            assert reader.stats()["retries"] == 0
        ranges = proxy.request_ranges
    message = str(info.value)
    assert "range not honoured" in message and "after 1 attempt" in message
    assert "HTTP 200 (whole object)" not in message
    assert ranges == [f"bytes={MiB - 10}-{MiB + 89}"]


# errors say how far they got -------------------------------------------------------------------


def test_exhausted_retries_report_bytes_received_and_offset_reached(gcs):
    name = "ckpt/cut.distcp"
    gcs.put(BUCKET, name, object_bytes(16 * MiB, seed=9))
    # 16,095,232 body bytes in all: the first GET is cut there, every retry gets none.
    cuts = [
        Fault("short_body", after_bytes=16_095_232, count=1),
        Fault("short_body", after_bytes=0, count=None),
    ]
    with FaultProxy(gcs.endpoint, cuts) as proxy:
        with RangeReader(
            proxy.endpoint, retry=FAST_RETRY, chunk_bytes=16 * MiB, min_chunk_bytes=16 * MiB
        ) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, name, 4096, 16 * MiB, bytearray(16 * MiB))])
        ranges = proxy.request_ranges
    failure = info.value.failures[0]
    assert failure["bytes_received"] == 16_095_232
    assert failure["offset_reached"] == 4096 + 16_095_232
    assert failure["attempts"] == 6
    assert "16,095,232 of 16,777,216 bytes" in str(info.value)
    assert "up to offset 16,099,328" in str(info.value)
    assert "after 6 attempts" in str(info.value)
    # Each retry asked for exactly the bytes still missing.
    assert ranges[1] == f"bytes={4096 + 16_095_232}-{4096 + 16 * MiB - 1}"


# blame only the ranges at fault ----------------------------------------------------------------


def test_merged_get_past_the_end_fails_only_the_ranges_past_the_end(gcs):
    size = 3_277_824
    data = object_bytes(size, seed=10)
    gcs.put(BUCKET, "short/merged.distcp", data)
    requests = [
        RangeRequest(BUCKET, "short/merged.distcp", i * MiB, MiB, bytearray(MiB)) for i in range(4)
    ]
    with RangeReader(gcs.endpoint) as reader:
        handle = reader.submit(requests)
        assert handle.num_fetches == 2  # default coalescing: [0, 2 MiB) and [2 MiB, 4 MiB)
        with pytest.raises(RangeReadError) as info:
            handle.wait()
        assert reader.stats()["retries"] == 0
    err = info.value
    assert [f["index"] for f in err.failures] == [3]
    assert "1 of 4 range request(s) failed" in str(err)
    assert f"bytes={3 * MiB}-{4 * MiB - 1}: reaches past the end of the object (size {size}" in (
        str(err)
    )
    for r in requests[:3]:
        assert bytes(r.dest) == data[r.offset : r.offset + r.length]


# no secret in any error ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 500])
def test_header_echoing_error_bodies_never_show_the_token(gcs, status):
    echo = Fault("status", status=status, count=None, echo_headers=True)
    with FaultProxy(gcs.endpoint, [echo]) as proxy:
        with RangeReader(
            proxy.endpoint, retry=FAST_RETRY, token_provider=lambda: TOKEN, send_token=True
        ) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, OBJ, 0, 10, bytearray(10))])
    err = info.value
    assert f"HTTP {status}" in str(err)
    # The body was quoted with the token cut out, and only the token: the echo's closing
    # quote and braces after FaultProxy's raw credential and the reader's progress note stay.
    assert 'credential <redacted>"}} (0 of 10 bytes of GET bytes=0-9 received, up to offset 0)' in (
        str(err)
    )
    texts = [str(err), repr(err), repr(err.failures), repr(err.args), repr(pickle.dumps(err))]
    texts.append(str(pickle.loads(pickle.dumps(err))))
    for text in texts:
        assert "tok-SECRET" not in text


def test_errors_built_from_any_source_redact_bearer_tokens():
    failure = {
        "bucket": "b",
        "object": "o",
        "offset": 0,
        "length": 0,
        "status": 403,
        "error": "HTTP 403: echo authorization: Bearer abc.DEF-123 and bearer\txyz",
        "attempts": 1,
    }
    err = RangeReadError([failure])
    for text in (str(err), repr(err), repr(err.failures), repr(pickle.dumps(err))):
        assert "abc.DEF-123" not in text and "xyz" not in text
    assert redact("token s3cr3t here", ["s3cr3t"]) == "token <redacted> here"
    assert redact("Authorization: Bearer t0k") == "Authorization: Bearer <redacted>"
    # The token only (RFC 6750 token characters), as the C++ side redacts it.
    assert redact('{"Authorization":"Bearer ya29.a-b_c~d+e/f==","n":1} (0 of 10 bytes') == (
        '{"Authorization":"Bearer <redacted>","n":1} (0 of 10 bytes'
    )
    assert redact('{"h":"Bearer abc/+~.x=","n":1}') == '{"h":"Bearer <redacted>","n":1}'
    assert redact("bearer abc)(0 of 10 bytes") == "bearer <redacted>)(0 of 10 bytes"
