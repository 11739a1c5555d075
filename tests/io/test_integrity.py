"""One version per read, exact range semantics and honest errors, against scripted servers.

Each case is a hostile or changing server the reader must not be fooled by: an object replaced
between two GETs of one read, a ranged GET answered with the whole object, a connection that
is cut after an exact byte count, a merged GET that meets the object's end, and an error body
that echoes the request's Authorization header.
"""

from __future__ import annotations

import pickle
import time

import pytest
from io_fixtures import BUCKET, FAST_RETRY, object_bytes
from scripted_gcs import Script, ScriptedGCS

from gcsckpt.io import (
    ObjectChangedError,
    ObjectNotFoundError,
    RangeReader,
    RangeReadError,
    RangeRequest,
)
from gcsckpt.io.redact import redact

MiB = 1 << 20
OBJ = "ckpt/__0_0.distcp"
TOKEN = "ya29.tok-SECRET-123"  # noqa: S105 (a fake token the server echoes)


def sequential_reader(endpoint: str, **options) -> RangeReader:
    """One request in flight and 2 MiB GETs: a 16 MiB read is exactly 8 GETs, in order."""
    options.setdefault("retry", FAST_RETRY)
    return RangeReader(
        endpoint, max_inflight_requests=1, chunk_bytes=2 * MiB, min_chunk_bytes=2 * MiB, **options
    )


# one generation per object per read ------------------------------------------------------------


@pytest.mark.parametrize("on_old_generation", ["404", "412", "ignore"])
def test_overwrite_between_gets_fails_as_object_changed(on_old_generation):
    old, new = object_bytes(16 * MiB, seed=1), object_bytes(16 * MiB, seed=2)
    script = Script([old, new], switch_after=3, on_old_generation=on_old_generation)
    dest = bytearray(16 * MiB)
    with ScriptedGCS(script) as server, sequential_reader(server.endpoint) as reader:
        handle = reader.submit([RangeRequest(BUCKET, OBJ, 0, 16 * MiB, dest)])
        assert handle.num_fetches == 8
        with pytest.raises(ObjectChangedError) as info:
            handle.wait()
        # The server records a GET after answering it: let the last answer's record land.
        deadline = time.monotonic() + 10.0
        while len(server.seen) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = server.seen
    err = info.value
    assert not isinstance(err, ObjectNotFoundError)  # not a misleading "does not exist"
    assert "object changed during read" in str(err)
    assert f"gs://{BUCKET}/{OBJ}" in str(err)
    assert "generation 1000" in str(err)
    changed = err.changed
    assert changed and all(f["pinned_generation"] == 1000 for f in changed)
    if on_old_generation == "ignore":  # the server answered the new version: both are named
        assert "generation 1001" in str(err)
        assert changed[0]["seen_generation"] == 1001
    else:
        assert changed[0]["status"] == int(on_old_generation)
    # The first answer pinned generation 1000; every later GET asked for exactly it, and none
    # of generation 1001's bytes was accepted.
    assert len(seen) == 8
    assert [s.status for s in seen[:3]] == [206] * 3
    assert "generation" not in seen[0].query
    assert all(s.query.get("generation") == "1000" for s in seen[1:])


def test_overwrite_through_the_local_endpoint_between_gets_fails(gcs):
    """The same race against LocalGCS (nginx + emulator), overwritten after exactly 3 GETs.

    The token provider runs before every attempt (its tokens are already expired), so it can
    replace the object at an exact point of the read.
    """
    name = "ckpt/raced.distcp"
    old, new = object_bytes(16 * MiB, seed=11), object_bytes(16 * MiB, seed=12)
    gcs.put(BUCKET, name, old)
    calls = []

    def token_then_overwrite():
        calls.append(1)
        if len(calls) == 5:  # 1: submit, 2-4: GETs 1-3, 5: before GET 4
            gcs.put(BUCKET, name, new)
        return "unused-by-the-emulator", 1.0  # expired: asked again before every attempt

    dest = bytearray(16 * MiB)
    with sequential_reader(
        gcs.endpoint, token_provider=token_then_overwrite, send_token=True
    ) as reader:
        with pytest.raises(ObjectChangedError, match="object changed during read") as info:
            reader.read([RangeRequest(BUCKET, name, 0, 16 * MiB, dest)])
    changed = info.value.changed[0]
    assert changed["status"] == 404 and changed["pinned_generation"] > 0
    assert changed["bytes_received"] == 0  # GET 4 and later: nothing of the new version
    assert bytes(dest[: 6 * MiB]) == old[: 6 * MiB]
    assert gcs.get(BUCKET, name) == new


def test_requested_generation_is_sent_on_every_get_and_checked():
    old, new = object_bytes(4 * MiB, seed=3), object_bytes(4 * MiB, seed=4)
    with ScriptedGCS(Script([old, new])) as server, sequential_reader(server.endpoint) as reader:
        got = bytearray(4 * MiB)
        handle = reader.submit([RangeRequest(BUCKET, OBJ, 0, 4 * MiB, got, 1001)])
        handle.wait()
        assert handle.generations() == {(BUCKET, OBJ): 1001}
        assert bytes(got) == new
        with pytest.raises(ObjectChangedError, match="generation 1000 is no longer"):
            reader.read([RangeRequest(BUCKET, OBJ, 0, 4 * MiB, bytearray(4 * MiB), 1000)])
        seen = server.seen
    assert [s.query.get("generation") for s in seen] == ["1001", "1001", "1000", "1000"]


def test_pinned_generation_applies_to_every_range_of_the_object():
    old, new = object_bytes(6 * MiB, seed=5), object_bytes(6 * MiB, seed=6)
    script = Script([old, new], switch_after=1, on_old_generation="ignore")
    requests = [RangeRequest(BUCKET, OBJ, i * 2 * MiB, MiB, bytearray(MiB)) for i in range(3)]
    with ScriptedGCS(script) as server, sequential_reader(server.endpoint) as reader:
        with pytest.raises(ObjectChangedError) as info:
            reader.read(requests)
    # Request 0 read generation 1000; 1 and 2 met 1001 and failed instead of mixing versions.
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
def test_whole_object_answer_gives_exactly_the_range(offset):
    data = object_bytes(3 * MiB, seed=7)
    dest = bytearray(MiB)
    with ScriptedGCS(Script([data], whole_object=True)) as server:
        with RangeReader(server.endpoint, retry=FAST_RETRY) as reader:
            reader.read([RangeRequest(BUCKET, OBJ, offset, MiB, dest)])
            stats = reader.stats()
        seen = server.seen
    assert bytes(dest) == data[offset : offset + MiB]
    assert stats["whole_object_answers"] == 1 and stats["retries"] == 0
    assert stats["bytes_received"] == MiB
    assert [s.range for s in seen] == [f"bytes={offset}-{offset + MiB - 1}"]


def test_whole_object_answer_shorter_than_the_range_fails_at_once():
    data = object_bytes(MiB, seed=8)
    with ScriptedGCS(Script([data], whole_object=True)) as server:
        with RangeReader(server.endpoint, retry=FAST_RETRY) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, OBJ, MiB - 10, 100, bytearray(100))])
            assert reader.stats()["retries"] == 0
        seen = server.seen
    message = str(info.value)
    assert "range not honoured" in message and "after 1 attempt" in message
    assert "HTTP 200 (whole object)" not in message
    assert [s.range for s in seen] == [f"bytes={MiB - 10}-{MiB + 89}"]


# errors say how far they got -------------------------------------------------------------------


def test_exhausted_retries_report_bytes_received_and_offset_reached():
    data = object_bytes(16 * MiB, seed=9)
    script = Script([data], cut_after_total=16_095_232)
    with ScriptedGCS(script) as server:
        with RangeReader(
            server.endpoint, retry=FAST_RETRY, chunk_bytes=16 * MiB, min_chunk_bytes=16 * MiB
        ) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, OBJ, 4096, 16 * MiB, bytearray(16 * MiB))])
        seen = server.seen
    failure = info.value.failures[0]
    assert failure["bytes_received"] == 16_095_232
    assert failure["offset_reached"] == 4096 + 16_095_232
    assert failure["attempts"] == 6
    assert "16,095,232 of 16,777,216 bytes" in str(info.value)
    assert "up to offset 16,099,328" in str(info.value)
    assert "after 6 attempts" in str(info.value)
    # Each retry asked for exactly the bytes still missing.
    assert seen[1].range == f"bytes={4096 + 16_095_232}-{4096 + 16 * MiB - 1}"


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
def test_header_echoing_error_bodies_never_show_the_token(status):
    with ScriptedGCS(Script([b"x" * 100], echo_status=status)) as server:
        with RangeReader(
            server.endpoint, retry=FAST_RETRY, token_provider=lambda: TOKEN, send_token=True
        ) as reader:
            with pytest.raises(RangeReadError) as info:
                reader.read([RangeRequest(BUCKET, OBJ, 0, 10, bytearray(10))])
    err = info.value
    assert f"HTTP {status}" in str(err)
    # The body was quoted with the token cut out, and only the token: the echo's closing
    # quote and braces, the text after it and the reader's progress note all stay.
    assert '"Range": "bytes=0-9", "Authorization": "Bearer <redacted>"}}} raw token: <redacted>' + (
        " (0 of 10 bytes of GET bytes=0-9 received, up to offset 0)"
    ) in str(err)
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
    # The token only (RFC 6750 token characters), as the C++ engine redacts it.
    assert redact('{"Authorization":"Bearer ya29.a-b_c~d+e/f==","n":1} (0 of 10 bytes') == (
        '{"Authorization":"Bearer <redacted>","n":1} (0 of 10 bytes'
    )
    assert redact('{"h":"Bearer abc/+~.x=","n":1}') == '{"h":"Bearer <redacted>","n":1}'
    assert redact("bearer abc)(0 of 10 bytes") == "bearer <redacted>)(0 of 10 bytes"
