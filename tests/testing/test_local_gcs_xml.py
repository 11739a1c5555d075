"""LocalGCS speaks the XML API's uploads as GCS does: multipart upload (what
google-cloud-storage's transfer_manager.upload_chunks_concurrently uses) and simple PUT, with
the GCS error codes, generations and preconditions; what lands reads back the same through
every client (RangeReader, ObjectStore, gcsfs, google-cloud-storage). MD5 is computed while
answering only for a request that sends one (Content-MD5, x-goog-hash: md5=): other part ETags
are opaque tokens that completion still checks, and the object's md5Hash is computed later.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import urllib.parse
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from http_util import connect, crc32c_b64, fetch, md5_b64

from gcsckpt.io import ObjectStore, RangeReader, RangeRequest
from gcsckpt.testing import LocalGCS

BUCKET = "xmlapi"
PART = 5 << 20  # the smallest part GCS takes (but the last)
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@pytest.fixture(scope="module")
def bucket(gcs):
    gcs.create_bucket(BUCKET)
    return BUCKET


def _path(name: str, query: str = "") -> str:
    return f"/{BUCKET}/{urllib.parse.quote(name, safe='')}" + (f"?{query}" if query else "")


def _request(conn, method, path, body=b"", headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def _error_code(body: bytes) -> str:
    root = ET.fromstring(body)
    assert root.tag == "Error" and root.find("Details") is not None
    return root.find("Code").text


def _initiate(conn, name: str, headers=None) -> str:
    status, _, body = _request(conn, "POST", _path(name, "uploads"), headers=headers)
    assert status == 200, body
    root = ET.fromstring(body)
    assert root.find(NS + "Key").text == name and root.find(NS + "Bucket").text == BUCKET
    return root.find(NS + "UploadId").text


def _put_part(conn, name, upload_id, number, data, headers=None) -> str:
    """Uploads one part; its ETag: the part's MD5 hex when `headers` send an MD5 (as GCS),
    else the opaque "<crc32c hex>-<size hex>-<number>"."""
    status, answer, body = _request(
        conn, "PUT", _path(name, f"partNumber={number}&uploadId={upload_id}"), data, headers
    )
    assert status == 200, body
    crc = int.from_bytes(base64.b64decode(crc32c_b64(data)), "big")
    if any(k.lower() == "content-md5" for k in headers or {}):
        assert answer["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert answer["x-goog-hash"] == f"crc32c={crc32c_b64(data)},md5={md5_b64(data)}"
    else:
        assert answer["etag"] == f'"{crc:08x}-{len(data):x}-{number}"'
        assert answer["x-goog-hash"] == f"crc32c={crc32c_b64(data)}"
    return answer["etag"]


def _check_md5_in_metadata(gcs, name: str, data: bytes) -> None:
    """The object's metadata GET and its listing entry carry the MD5 of `data`."""
    bucket = gcs.storage_client().bucket(BUCKET)
    assert bucket.get_blob(name).md5_hash == md5_b64(data)
    listed = {b.name: b.md5_hash for b in bucket.list_blobs(prefix=name)}
    assert listed[name] == md5_b64(data)


def _complete_doc(parts) -> bytes:
    items = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
    return f"<CompleteMultipartUpload>{items}</CompleteMultipartUpload>".encode()


def test_transfer_manager_upload_reads_back_through_every_client(gcs, bucket, tmp_path):
    from google.cloud.storage import transfer_manager

    data = np.random.default_rng(7).integers(0, 256, 3 * PART + 12345, dtype=np.uint8).tobytes()
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    name = "ckpt/step 1/__0_0.distcp"
    blob = gcs.storage_client().bucket(bucket).blob(name)
    transfer_manager.upload_chunks_concurrently(
        str(src), blob, chunk_size=PART, max_workers=4, worker_type=transfer_manager.THREAD
    )

    meta = gcs.storage_client().bucket(bucket).get_blob(name)
    assert meta.size == len(data)
    assert meta.crc32c == crc32c_b64(data) and meta.md5_hash == md5_b64(data)
    generation = meta.generation

    store = ObjectStore(gcs.endpoint)
    stored = store.read(bucket, name)
    assert stored.data == data and stored.generation == generation
    assert store.stat(bucket, name).generation == generation

    dest = np.zeros(len(data), np.uint8)
    with RangeReader(gcs.endpoint) as reader:
        reader.read([RangeRequest(bucket, name, 0, len(data), dest)])
    assert dest.tobytes() == data

    fs = gcs.gcsfs()
    assert fs.cat_file(f"{bucket}/{name}") == data
    assert fs.info(f"{bucket}/{name}")["crc32c"] == crc32c_b64(data)
    assert f"{bucket}/{name}" in fs.find(f"{bucket}/ckpt")

    # XML reads are nginx's, with the generation.
    status, headers, body = fetch(connect(gcs.endpoint), _path(name))
    assert status == 200 and body == data and headers["x-goog-generation"] == str(generation)


def test_complete_is_one_atomic_new_generation(gcs, bucket):
    name = "atomic"
    gcs.put(bucket, name, b"old version")
    before = ObjectStore(gcs.endpoint).stat(bucket, name).generation
    conn = connect(gcs.endpoint)
    upload_id = _initiate(conn, name, {"Content-Type": "application/x-test", "x-goog-meta-k": "v"})
    first, last = b"a" * PART, b"tail"
    parts = [(1, _put_part(conn, name, upload_id, 1, first))]
    parts.append((2, _put_part(conn, name, upload_id, 2, last)))
    # Not visible before completion.
    assert gcs.get(bucket, name) == b"old version"
    status, headers, body = _request(
        conn, "POST", _path(name, f"uploadId={upload_id}"), _complete_doc(parts)
    )
    assert status == 200, body
    root = ET.fromstring(body)
    assert root.find(NS + "Key").text == name
    # The object's ETag is nginx's for that generation's file (its media reads answer the same).
    etag = f'"{headers["x-goog-generation"]}-{len(first + last):x}"'
    assert root.find(NS + "ETag").text == etag and headers["etag"] == etag
    assert int(headers["x-goog-generation"]) > before
    assert headers["x-goog-hash"] == f"crc32c={crc32c_b64(first + last)}"
    assert gcs.get(bucket, name) == first + last
    assert fetch(connect(gcs.endpoint), _path(name), method="HEAD")[1]["etag"] == etag
    _check_md5_in_metadata(gcs, name, first + last)
    blob = gcs.storage_client().bucket(bucket).get_blob(name)
    assert blob.generation == int(headers["x-goog-generation"])
    assert blob.content_type == "application/x-test" and blob.metadata == {"k": "v"}
    # The session is gone once completed.
    status, _, body = _request(
        conn, "POST", _path(name, f"uploadId={upload_id}"), _complete_doc(parts)
    )
    assert (status, _error_code(body)) == (404, "NoSuchUpload")


def test_unknown_upload_id_is_404_no_such_upload(gcs, bucket):
    conn = connect(gcs.endpoint)
    for method, query, body in (
        ("PUT", "partNumber=1&uploadId=nope", b"x"),
        ("POST", "uploadId=nope", _complete_doc([(1, '"x"')])),
        ("DELETE", "uploadId=nope", b""),
        ("GET", "uploadId=nope", b""),
    ):
        status, _, answer = _request(conn, method, _path("whatever", query), body)
        assert (status, _error_code(answer)) == (404, "NoSuchUpload"), method


def test_bad_part_order_etag_size_and_number_are_400(gcs, bucket):
    conn = connect(gcs.endpoint)
    name = "bad-parts"
    upload_id = _initiate(conn, name)
    e1 = _put_part(conn, name, upload_id, 1, b"1" * PART)
    e2 = _put_part(conn, name, upload_id, 2, b"2" * 10)
    e3 = _put_part(conn, name, upload_id, 3, b"3" * 10)
    complete = _path(name, f"uploadId={upload_id}")
    cases = [
        ([(2, e2), (1, e1)], "InvalidPartOrder"),
        ([(1, e1), (1, e1)], "InvalidPartOrder"),
        ([(1, e1), (2, '"0123456789abcdef0123456789abcdef"')], "InvalidPart"),
        ([(1, e1), (4, e2)], "InvalidPart"),
        ([(1, e1), (2, e2), (3, e3)], "EntityTooSmall"),
    ]
    for parts, code in cases:
        status, _, body = _request(conn, "POST", complete, _complete_doc(parts))
        assert (status, _error_code(body)) == (400, code), parts
    status, _, body = _request(conn, "POST", complete, b"<CompleteMultipartUpload><Part>")
    assert (status, _error_code(body)) == (400, "MalformedXML")
    status, _, body = _request(conn, "PUT", _path(name, f"partNumber=0&uploadId={upload_id}"), b"x")
    assert (status, _error_code(body)) == (400, "InvalidArgument")
    # The failed completions left the session usable: ETags without quotes work too.
    status, _, body = _request(conn, "POST", complete, _complete_doc([(1, e1.strip('"')), (3, e3)]))
    assert status == 200, body
    assert gcs.get(bucket, name) == b"1" * PART + b"3" * 10


def test_if_generation_match_at_initiate_and_complete_is_412(gcs, bucket):
    conn = connect(gcs.endpoint)
    name = "precondition"
    gcs.put(bucket, name, b"exists")
    generation = ObjectStore(gcs.endpoint).stat(bucket, name).generation
    status, _, body = _request(
        conn, "POST", _path(name, "uploads"), headers={"x-goog-if-generation-match": "0"}
    )
    assert (status, _error_code(body)) == (412, "PreconditionFailed")

    upload_id = _initiate(conn, name, {"x-goog-if-generation-match": str(generation)})
    parts = [(1, _put_part(conn, name, upload_id, 1, b"new"))]
    gcs.put(bucket, name, b"raced")  # another writer wins in between
    status, _, body = _request(
        conn, "POST", _path(name, f"uploadId={upload_id}"), _complete_doc(parts)
    )
    assert (status, _error_code(body)) == (412, "PreconditionFailed")
    assert gcs.get(bucket, name) == b"raced"
    raced = ObjectStore(gcs.endpoint).stat(bucket, name).generation
    status, _, body = _request(
        conn,
        "POST",
        _path(name, f"uploadId={upload_id}"),
        _complete_doc(parts),
        {"x-goog-if-generation-match": str(raced)},
    )
    assert status == 200, body
    assert gcs.get(bucket, name) == b"new"


def test_abort_removes_the_upload(gcs, bucket):
    conn = connect(gcs.endpoint)
    name = "aborted"
    upload_id = _initiate(conn, name)
    e1 = _put_part(conn, name, upload_id, 1, b"x" * 100)
    status, _, body = _request(conn, "GET", _path(name, f"uploadId={upload_id}"))
    assert status == 200 and re.search(rb"<PartNumber>1</PartNumber>.*<Size>100</Size>", body)
    status, _, _ = _request(conn, "DELETE", _path(name, f"uploadId={upload_id}"))
    assert status == 204
    status, _, body = _request(
        conn, "POST", _path(name, f"uploadId={upload_id}"), _complete_doc([(1, e1)])
    )
    assert (status, _error_code(body)) == (404, "NoSuchUpload")
    assert not ObjectStore(gcs.endpoint).exists(bucket, name)
    assert not os.listdir(os.path.join(gcs.data_dir, ".uploads", "xml"))


def test_simple_put_get_head(gcs, bucket):
    conn = connect(gcs.endpoint)
    name = "simple/put"
    status, headers, body = _request(
        conn, "PUT", _path(name), b"hello", {"x-goog-if-generation-match": "0"}
    )
    assert status == 200, body
    generation = headers["x-goog-generation"]
    assert headers["etag"] == f'"{generation}-5"' and headers["x-goog-hash"] == (
        f"crc32c={crc32c_b64(b'hello')}"
    )
    _check_md5_in_metadata(gcs, name, b"hello")
    status, _, body = _request(
        conn, "PUT", _path(name), b"again", {"x-goog-if-generation-match": "0"}
    )
    assert (status, _error_code(body)) == (412, "PreconditionFailed")
    status, _, body = _request(conn, "PUT", _path(name), b"bad", {"Content-MD5": md5_b64(b"other")})
    assert (status, _error_code(body)) == (400, "BadDigest")
    status, _, body = _request(
        conn, "PUT", _path(name), b"bad", {"x-goog-hash": f"md5={md5_b64(b'other')}"}
    )
    assert (status, _error_code(body)) == (400, "BadDigest")
    status, headers, body = fetch(conn, _path(name))
    assert (status, body, headers["x-goog-generation"]) == (200, b"hello", generation)
    status, headers, body = fetch(conn, _path(name), method="HEAD")
    assert (status, headers["content-length"], body) == (200, "5", b"")
    status, _, body = fetch(conn, _path(name, f"generation={generation}"))
    assert (status, body) == (200, b"hello")
    status, _, body = fetch(conn, _path(name, "generation=1"))
    assert (status, _error_code(body)) == (404, "NoSuchKey")
    status, _, body = fetch(conn, _path("simple/absent"))
    assert (status, _error_code(body)) == (404, "NoSuchKey")
    # An empty object works too.
    status, _, body = _request(conn, "PUT", _path("simple/empty"), b"")
    assert status == 200, body
    assert gcs.get(bucket, "simple/empty") == b""
    status, _, body = _request(conn, "PUT", f"/no-such-bucket/{name}", b"x")
    assert (status, _error_code(body)) == (404, "NoSuchBucket")


def test_put_that_sends_an_md5_has_it_checked_and_answered(gcs, bucket):
    conn = connect(gcs.endpoint)
    for name, headers in (
        ("md5/content-md5", {"Content-MD5": md5_b64(b"checked")}),
        ("md5/goog-hash", {"x-goog-hash": f"md5={md5_b64(b'checked')}"}),
    ):
        status, answer, body = _request(conn, "PUT", _path(name), b"checked", headers)
        assert status == 200, body
        assert answer["etag"] == f'"{hashlib.md5(b"checked").hexdigest()}"'
        assert answer["x-goog-hash"] == f"crc32c={crc32c_b64(b'checked')},md5={md5_b64(b'checked')}"
        _check_md5_in_metadata(gcs, name, b"checked")


def test_parts_with_and_without_md5_complete_and_a_wrong_etag_is_refused(gcs, bucket):
    conn = connect(gcs.endpoint)
    name = "md5/parts"
    first, last = b"f" * PART, b"last part"
    upload_id = _initiate(conn, name)
    e1 = _put_part(conn, name, upload_id, 1, first, {"Content-MD5": md5_b64(first)})
    e2 = _put_part(conn, name, upload_id, 2, last)
    status, _, body = _request(
        conn,
        "PUT",
        _path(name, f"partNumber=2&uploadId={upload_id}"),
        last,
        {"Content-MD5": md5_b64(b"other")},
    )
    assert (status, _error_code(body)) == (400, "BadDigest")
    complete = _path(name, f"uploadId={upload_id}")
    # The opaque ETag of another part (same size, other number) is not this part's.
    assert e2.endswith('-2"')
    wrong = e2[: -len('-2"')] + '-3"'
    for parts in ([(1, e1), (2, wrong)], [(1, f'"{hashlib.md5(last).hexdigest()}"'), (2, e2)]):
        status, _, body = _request(conn, "POST", complete, _complete_doc(parts))
        assert (status, _error_code(body)) == (400, "InvalidPart"), parts
    status, _, body = _request(conn, "GET", complete)
    assert status == 200 and f"<ETag>{e2}</ETag>".encode() in body
    status, _, body = _request(conn, "POST", complete, _complete_doc([(1, e1), (2, e2)]))
    assert status == 200, body
    assert gcs.get(bucket, name) == first + last
    _check_md5_in_metadata(gcs, name, first + last)


def test_md5_in_upload_answers_gives_gcs_etags():
    with LocalGCS(md5_in_upload_answers=True) as inline:
        inline.create_bucket(BUCKET)
        conn = connect(inline.endpoint)
        status, headers, body = _request(conn, "PUT", _path("inline/put"), b"put")
        assert status == 200, body
        assert headers["etag"] == f'"{hashlib.md5(b"put").hexdigest()}"'
        assert headers["x-goog-hash"] == f"crc32c={crc32c_b64(b'put')},md5={md5_b64(b'put')}"
        upload_id = _initiate(conn, "inline/mpu")
        path = _path("inline/mpu", f"partNumber=1&uploadId={upload_id}")
        status, headers, body = _request(conn, "PUT", path, b"part")
        assert status == 200 and headers["etag"] == f'"{hashlib.md5(b"part").hexdigest()}"'
        complete = _complete_doc([(1, headers["etag"])])
        status, headers, body = _request(
            conn, "POST", _path("inline/mpu", f"uploadId={upload_id}"), complete
        )
        assert status == 200, body
        assert headers["x-goog-hash"] == f"crc32c={crc32c_b64(b'part')},md5={md5_b64(b'part')}"
