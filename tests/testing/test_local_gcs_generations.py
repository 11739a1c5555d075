"""LocalGCS behaves like GCS for generations and preconditions, and stores empty objects.

Media answers carry x-goog-generation; `generation=` / `ifGenerationMatch=` on media reads and
`ifGenerationMatch` on every upload type are honoured (404 / 412 as GCS answers them).
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from http_util import connect, error_code, fetch

from gcsckpt.io import ObjectChangedError, RangeReader, RangeRequest
from gcsckpt.testing import json_api, media_path

BUCKET = "generations"


@pytest.fixture(scope="module")
def bucket(gcs):
    gcs.create_bucket(BUCKET)
    return BUCKET


def _upload_path(kind: str, name: str, if_generation_match: int | None) -> str:
    query = {"uploadType": kind, "name": name}
    if if_generation_match is not None:
        query["ifGenerationMatch"] = str(if_generation_match)
    return f"/upload/storage/v1/b/{BUCKET}/o?{urllib.parse.urlencode(query)}"


def _start_resumable(conn, path: str):
    """(status, body, session URL parts or None) of a resumable upload's first request."""
    conn.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    answer = resp.read()
    if resp.status != 200:
        return resp.status, answer, None
    return resp.status, answer, urllib.parse.urlsplit(resp.getheader("Location"))


def _finish_resumable(conn, session, data: bytes):
    """(status, body) of the one PUT that sends all of `data` to a resumable session."""
    size = len(data)
    span = f"bytes 0-{size - 1}/{size}" if size else f"bytes */{size}"
    conn.request(
        "PUT", f"{session.path}?{session.query}", body=data, headers={"Content-Range": span}
    )
    resp = conn.getresponse()
    return resp.status, resp.read()


def _upload(gcs, kind: str, name: str, data: bytes, if_generation_match: int | None):
    """(status, body) of one upload of `kind` ("media", "multipart", "resumable")."""
    path = _upload_path(kind, name, if_generation_match)
    conn = connect(gcs.endpoint)
    try:
        if kind == "media":
            conn.request("POST", path, body=data, headers={"Content-Type": "text/plain"})
        elif kind == "multipart":
            boundary = "gcsckpt-test-boundary"
            body = (
                (
                    f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                    + json.dumps({"name": name})
                    + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
                ).encode()
                + data
                + f"\r\n--{boundary}--\r\n".encode()
            )
            ctype = f'multipart/related; boundary="{boundary}"'
            conn.request("POST", path, body=body, headers={"Content-Type": ctype})
        else:
            status, answer, session = _start_resumable(conn, path)
            if session is None:
                return status, answer
            return _finish_resumable(conn, session, data)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _generation(gcs, name: str) -> int:
    conn = connect(gcs.endpoint)
    status, _, body = fetch(conn, f"/storage/v1/b/{BUCKET}/o/{json_api.quote_object(name)}")
    conn.close()
    assert status == 200, body
    return int(json.loads(body)["generation"])


def test_media_answers_carry_the_generation_and_honour_it(gcs, bucket):
    first = int(json_api.upload(gcs.endpoint, bucket, "dir/v.bin", b"version one")["generation"])
    assert _generation(gcs, "dir/v.bin") == first
    conn = connect(gcs.endpoint)
    path = media_path(bucket, "dir/v.bin")
    status, headers, body = fetch(conn, path, "bytes=0-6")
    assert (status, headers["x-goog-generation"], body) == (206, str(first), b"version")
    second = int(json_api.upload(gcs.endpoint, bucket, "dir/v.bin", b"version two")["generation"])
    assert second > first  # a later write has a larger generation, as on GCS
    status, headers, body = fetch(conn, path)
    assert (status, headers["x-goog-generation"], body) == (200, str(second), b"version two")
    status, headers, body = fetch(conn, f"{path}&generation={second}", "bytes=8-10")
    assert (status, headers["x-goog-generation"], body) == (206, str(second), b"two")
    status, _, body = fetch(conn, f"{path}&generation={first}", "bytes=8-10")
    assert status == 404 and error_code(body) == 404  # replaced: the old version is gone
    status, headers, body = fetch(conn, f"{path}&ifGenerationMatch={second}", "bytes=0-0")
    assert (status, headers["x-goog-generation"], body) == (206, str(second), b"v")
    status, _, body = fetch(conn, f"{path}&ifGenerationMatch={first}", "bytes=0-0")
    assert status == 412 and error_code(body) == 412
    status, _, _ = fetch(conn, f"{path}&generation=latest")
    assert status == 400
    conn.close()


def test_range_reader_pins_the_local_endpoints_generation(gcs, bucket):
    gcs.put(bucket, "pinned.bin", b"a" * 5000)
    old = _generation(gcs, "pinned.bin")
    with RangeReader(gcs.endpoint) as reader:
        dest = bytearray(100)
        handle = reader.submit([RangeRequest(bucket, "pinned.bin", 10, 100, dest)])
        handle.wait()
        assert handle.generations() == {(bucket, "pinned.bin"): old}
        gcs.put(bucket, "pinned.bin", b"b" * 5000)
        with pytest.raises(ObjectChangedError, match=f"generation {old} is no longer"):
            reader.read([RangeRequest(bucket, "pinned.bin", 10, 100, bytearray(100), old)])


@pytest.mark.parametrize("kind", ["media", "multipart", "resumable"])
def test_create_if_absent_is_refused_for_an_existing_object(gcs, bucket, kind):
    name = f"exists-{kind}"
    status, body = _upload(gcs, kind, name, b"first", if_generation_match=0)
    assert status == 200, body  # absent: created
    generation = int(json.loads(body)["generation"])
    status, body = _upload(gcs, kind, name, b"second", if_generation_match=0)
    assert status == 412, body
    assert error_code(body) == 412
    assert gcs.get(bucket, name) == b"first"
    assert _generation(gcs, name) == generation
    # The matching generation is accepted.
    status, body = _upload(gcs, kind, name, b"third", if_generation_match=generation)
    assert status == 200, body
    assert gcs.get(bucket, name) == b"third"


def test_resumable_upload_checks_the_precondition_when_it_completes(gcs, bucket):
    conn = connect(gcs.endpoint)
    status, _, session = _start_resumable(conn, _upload_path("resumable", "raced", 0))
    assert status == 200  # absent when the session starts
    gcs.put(bucket, "raced", b"the other writer")  # another writer creates it meanwhile
    status, body = _finish_resumable(conn, session, b"mine")
    conn.close()
    assert status == 412, body
    assert gcs.get(bucket, "raced") == b"the other writer"


@pytest.mark.parametrize("kind", ["media", "multipart", "resumable"])
def test_empty_objects_upload_and_read(gcs, bucket, kind):
    status, body = _upload(gcs, kind, f"empty-{kind}", b"", if_generation_match=None)
    assert status == 200, body
    assert json.loads(body)["size"] == "0"
    assert gcs.get(bucket, f"empty-{kind}") == b""
    conn = connect(gcs.endpoint)
    status, headers, body = fetch(conn, media_path(bucket, f"empty-{kind}"))
    conn.close()
    assert (status, body) == (200, b"")
    assert int(headers["x-goog-generation"]) == _generation(gcs, f"empty-{kind}")


def test_empty_upload_through_the_helpers(gcs, bucket):
    json_api.upload(gcs.endpoint, bucket, "empty-helper", b"")
    assert gcs.get(bucket, "empty-helper") == b""


@pytest.mark.parametrize(
    "name", ["double//slash", "/leading-slash", "dir/sub/x", "unicode-ü€", "q?x=1&y#h", "50%+"]
)
def test_generation_reads_of_odd_names(gcs, bucket, name):
    generation = int(json_api.upload(gcs.endpoint, bucket, name, b"odd content")["generation"])
    conn = connect(gcs.endpoint)
    path = media_path(bucket, name)
    status, headers, body = fetch(conn, f"{path}&generation={generation}", "bytes=4-10")
    assert (status, headers["x-goog-generation"], body) == (206, str(generation), b"content")
    status, headers, body = fetch(conn, f"{path}&ifGenerationMatch={generation}")
    assert (status, body) == (200, b"odd content")
    conn.close()


def _soft_deleted_names(gcs, bucket: str) -> list[str]:
    conn = connect(gcs.endpoint)
    status, _, body = fetch(conn, f"/storage/v1/b/{bucket}/o?softDeleted=true")
    conn.close()
    assert status == 200, body
    return [item["name"] for item in json.loads(body).get("items", [])]


@pytest.mark.parametrize("retention_s", [None, 0])
def test_soft_delete_retention_of_a_new_bucket(gcs, retention_s):
    """GCS's default keeps a soft-deleted copy of a deleted object; retention 0 keeps none
    (the benchmark's embedded bucket, which deletes every verified save round)."""
    name = f"soft-{retention_s}".lower()  # "soft-none", "soft-0": GCS bucket names
    gcs.create_bucket(name, soft_delete_retention_s=retention_s)
    gcs.put(name, "obj", b"x" * 1000)
    conn = connect(gcs.endpoint)
    deleted, _, _ = fetch(conn, f"/storage/v1/b/{name}/o/obj", method="DELETE")
    status, _, _ = fetch(conn, f"/storage/v1/b/{name}/o/obj")
    conn.close()
    assert deleted in (200, 204) and status == 404  # GCS (and this server) answer 204
    assert _soft_deleted_names(gcs, name) == ([] if retention_s == 0 else ["obj"])
