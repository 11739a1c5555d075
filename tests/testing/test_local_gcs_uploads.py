"""LocalGCS's JSON API uploads (media, multipart, resumable), as GCS answers them: crc32c in
every answer, md5Hash in the answer when the request sent an MD5 to check (400 when it does not
match) and in every metadata GET and listing, the resumable status query (308 + Range) that a
client resumes from, concurrent uploads and create-if-absent races, and the latency model.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse

import numpy as np
import pytest
from http_util import connect, crc32c_b64, md5_b64

from gcsckpt.io import ObjectStore, Uploader
from gcsckpt.testing import LocalGCS, quote_object

BUCKET = "uploads"
QUANTUM = 256 * 1024


@pytest.fixture(scope="module")
def bucket(gcs):
    gcs.create_bucket(BUCKET)
    return BUCKET


def _request(conn, method, path, body=b"", headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def _media(conn, name, data, query=""):
    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={quote_object(name)}{query}"
    return _request(conn, "POST", path, data, {"Content-Type": "application/octet-stream"})


def _data(n: int, seed: int = 1) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _check_object(gcs, name: str, answer: dict, data: bytes, md5_sent: bool = False) -> None:
    """The upload answer has the bytes' crc32c (and md5Hash only when the request sent one to
    check); the metadata GET and the listing have both."""
    assert int(answer["size"]) == len(data)
    assert answer["crc32c"] == crc32c_b64(data)
    assert answer.get("md5Hash") == (md5_b64(data) if md5_sent else None)
    bucket = gcs.storage_client().bucket(BUCKET)
    blob = bucket.get_blob(name)
    assert (blob.crc32c, blob.md5_hash, blob.generation) == (
        crc32c_b64(data),
        md5_b64(data),
        int(answer["generation"]),
    )
    listed = {b.name: (b.md5_hash, b.generation) for b in bucket.list_blobs(prefix=name)}
    assert listed[name] == (md5_b64(data), int(answer["generation"]))
    assert gcs.get(BUCKET, name) == data


def test_media_upload_answers_checksums(gcs, bucket):
    data = _data(3 << 20)
    status, _, body = _media(connect(gcs.endpoint), "media/a", data)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["metageneration"] == "1" and answer["name"] == "media/a"
    _check_object(gcs, "media/a", answer, data)
    status, _, body = _media(connect(gcs.endpoint), "media/empty", b"")
    assert status == 200, body
    _check_object(gcs, "media/empty", json.loads(body), b"")


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_multipart_upload_either_line_break(gcs, bucket, eol):
    data = _data(100_000) + b"\r"  # a content ending in CR stays whole with LF framing too
    name = f"multipart/{len(eol)}"
    meta = json.dumps({"name": name, "contentType": "text/x-test", "metadata": {"k": "v"}})
    body = eol.join(
        [
            b"--BOUND",
            b"Content-Type: application/json; charset=UTF-8",
            b"",
            meta.encode(),
            b"--BOUND",
            b"Content-Type: application/octet-stream",
            b"",
            data,
            b"--BOUND--",
            b"",
        ]
    )
    status, _, answer = _request(
        connect(gcs.endpoint),
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart",
        body,
        {"Content-Type": 'multipart/related; boundary="BOUND"'},
    )
    assert status == 200, answer
    obj = json.loads(answer)
    _check_object(gcs, name, obj, data)
    blob = gcs.storage_client().bucket(BUCKET).get_blob(name)
    assert blob.content_type == "text/x-test" and blob.metadata == {"k": "v"}


def test_multipart_checksum_the_bytes_do_not_match_is_400(gcs, bucket):
    meta = json.dumps({"name": "multipart/bad", "md5Hash": md5_b64(b"other")})
    body = (
        f"--B\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--B\r\n"
        "Content-Type: application/octet-stream\r\n\r\npayload\r\n--B--\r\n"
    ).encode()
    status, _, answer = _request(
        connect(gcs.endpoint),
        "POST",
        f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart",
        body,
        {"Content-Type": "multipart/related; boundary=B"},
    )
    assert status == 400 and "md5Hash" in json.loads(answer)["error"]["message"]
    assert not ObjectStore(gcs.endpoint).exists(BUCKET, "multipart/bad")


def _multipart_body(meta: dict, data: bytes) -> bytes:
    return (
        b"--B\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps(meta).encode()
        + b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n"
        + data
        + b"\r\n--B--\r\n"
    )


def test_an_md5_sent_is_checked_and_answered(gcs, bucket):
    conn = connect(gcs.endpoint)
    data = _data(1 << 20, 6)
    multipart = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart"
    kind = {"Content-Type": "multipart/related; boundary=B"}
    status, _, body = _request(
        conn,
        "POST",
        multipart,
        _multipart_body({"name": "md5/multi", "md5Hash": md5_b64(data)}, data),
        kind,
    )
    assert status == 200, body
    _check_object(gcs, "md5/multi", json.loads(body), data, md5_sent=True)

    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=md5%2Fmedia"
    good = {"x-goog-hash": f"crc32c={crc32c_b64(data)},md5={md5_b64(data)}"}
    status, _, body = _request(conn, "POST", path, data, good)
    assert status == 200, body
    _check_object(gcs, "md5/media", json.loads(body), data, md5_sent=True)
    for wrong in (f"md5={md5_b64(b'other')}", f"crc32c={crc32c_b64(b'other')}"):
        status, _, body = _request(
            conn, "POST", path.replace("media%2F", "bad%2F"), data, {"x-goog-hash": wrong}
        )
        field = "md5Hash" if wrong.startswith("md5") else "crc32c"
        assert status == 400 and field in json.loads(body)["error"]["message"], wrong
    assert not ObjectStore(gcs.endpoint).exists(BUCKET, "md5/bad")

    # Resumable: the x-goog-hash on the request that completes it.
    session = _start(conn, "md5/resumable")
    last = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}", **good}
    status, _, body = _request(conn, "PUT", session, data, last)
    assert status == 200, body
    _check_object(gcs, "md5/resumable", json.loads(body), data, md5_sent=True)
    session = _start(conn, "md5/resumable-bad")
    status, _, _ = _request(
        conn, "PUT", session, data[:QUANTUM], {"Content-Range": f"bytes 0-{QUANTUM - 1}/*"}
    )
    assert status == 308
    last = {
        "Content-Range": f"bytes {QUANTUM}-{len(data) - 1}/{len(data)}",
        "x-goog-hash": f"md5={md5_b64(b'other')}",
    }
    status, _, body = _request(conn, "PUT", session, data[QUANTUM:], last)
    assert status == 400 and "md5Hash" in json.loads(body)["error"]["message"]
    assert not ObjectStore(gcs.endpoint).exists(BUCKET, "md5/resumable-bad")
    status, _, _ = _request(conn, "PUT", session, b"", {"Content-Range": "bytes */*"})
    assert status == 404  # the failed check ended the session


@pytest.mark.parametrize("checksum", ["auto", "md5", "crc32c", None])
def test_google_cloud_storage_checksums_and_reload(gcs, bucket, checksum):
    """google-cloud-storage's own checks pass (checksum="md5" sends an MD5, so the answer has
    it), and blob.reload() after the upload has the right md5_hash."""
    small, large = _data(1000, 7), _data(2 * QUANTUM + 3, 8)
    client_bucket = gcs.storage_client().bucket(BUCKET)
    for name, data, chunk in (("small", small, None), ("large", large, QUANTUM)):
        blob = client_bucket.blob(f"reload/{checksum}/{name}", chunk_size=chunk)
        blob.upload_from_string(data, checksum=checksum)  # multipart; resumable in chunks
        assert blob.crc32c == crc32c_b64(data)
        assert blob.md5_hash == (md5_b64(data) if checksum == "md5" else None)
        blob.reload()
        assert (blob.size, blob.crc32c, blob.md5_hash) == (
            len(data),
            crc32c_b64(data),
            md5_b64(data),
        )


def test_every_client_round_trips(gcs, bucket):
    small, large = _data(1000, 2), _data(3 * QUANTUM * 4 + 17, 3)
    client_bucket = gcs.storage_client().bucket(BUCKET)
    client_bucket.blob("clients/gcs-small").upload_from_string(small)  # multipart
    blob = client_bucket.blob("clients/gcs-large", chunk_size=4 * QUANTUM)  # resumable chunks
    blob.upload_from_string(large)
    fs = gcs.gcsfs()
    fs.pipe_file(f"{BUCKET}/clients/gcsfs-small", small)  # multipart, LF line breaks
    with fs.open(f"{BUCKET}/clients/gcsfs-large", "wb", block_size=5 << 20) as f:
        f.write(large)  # gcsfs: resumable above its block size
    store = ObjectStore(gcs.endpoint)
    with Uploader(gcs.endpoint, chunk_bytes=4 * QUANTUM) as uploader:  # resumable chunks
        uploader.upload(BUCKET, "clients/ours-large", large)
    for name, data in (
        ("clients/gcs-small", small),
        ("clients/gcs-large", large),
        ("clients/gcsfs-small", small),
        ("clients/gcsfs-large", large),
        ("clients/ours-large", large),
    ):
        blob = client_bucket.get_blob(name)
        assert (blob.size, blob.crc32c, blob.md5_hash) == (
            len(data),
            crc32c_b64(data),
            md5_b64(data),
        )
        assert store.download(BUCKET, name) == data
    assert sorted(store.list(BUCKET, "clients/")) == [
        "clients/gcs-large",
        "clients/gcs-small",
        "clients/gcsfs-large",
        "clients/gcsfs-small",
        "clients/ours-large",
    ]


def _start(conn, name: str, query: str = "") -> str:
    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name={quote_object(name)}{query}"
    status, headers, body = _request(conn, "POST", path, b"", {"Content-Length": "0"})
    assert status == 200, body
    url = urllib.parse.urlsplit(headers["location"])
    assert "upload_id=" in url.query
    return f"{url.path}?{url.query}"


def test_resumable_status_query_and_resume(gcs, bucket):
    conn = connect(gcs.endpoint)
    data = _data(3 * QUANTUM + 5, 4)
    session = _start(conn, "resumable/a")

    status, headers, _ = _request(conn, "PUT", session, b"", {"Content-Range": "bytes */*"})
    assert status == 308 and "range" not in headers  # nothing committed yet
    status, headers, _ = _request(
        conn, "PUT", session, data[:QUANTUM], {"Content-Range": f"bytes 0-{QUANTUM - 1}/*"}
    )
    assert (status, headers["range"]) == (308, f"bytes=0-{QUANTUM - 1}")
    status, headers, _ = _request(
        conn, "PUT", session, b"", {"Content-Range": f"bytes */{len(data)}"}
    )
    assert (status, headers["range"]) == (308, f"bytes=0-{QUANTUM - 1}")
    # A chunk past the committed offset is refused and names the offset.
    status, _, body = _request(
        conn,
        "PUT",
        session,
        data[2 * QUANTUM : 3 * QUANTUM],
        {"Content-Range": f"bytes {2 * QUANTUM}-{3 * QUANTUM - 1}/*"},
    )
    assert status == 400 and f"only {QUANTUM} bytes" in json.loads(body)["error"]["message"]
    # A retry that starts before the committed offset adds only what is new.
    status, headers, _ = _request(
        conn, "PUT", session, data[: 2 * QUANTUM], {"Content-Range": f"bytes 0-{2 * QUANTUM - 1}/*"}
    )
    assert (status, headers["range"]) == (308, f"bytes=0-{2 * QUANTUM - 1}")
    status, _, body = _request(
        conn,
        "PUT",
        session,
        data[2 * QUANTUM :],
        {"Content-Range": f"bytes {2 * QUANTUM}-{len(data) - 1}/{len(data)}"},
    )
    assert status == 200, body
    obj = json.loads(body)
    _check_object(gcs, "resumable/a", obj, data)
    # Asked again after completion (a lost final answer): the object it made.
    status, _, body = _request(conn, "PUT", session, b"", {"Content-Range": "bytes */*"})
    assert status == 200 and json.loads(body)["generation"] == obj["generation"]


def test_resumable_whole_body_empty_and_cancel(gcs, bucket):
    conn = connect(gcs.endpoint)
    session = _start(conn, "resumable/whole")
    status, _, body = _request(conn, "PUT", session, b"in one go")
    assert status == 200, body
    _check_object(gcs, "resumable/whole", json.loads(body), b"in one go")

    session = _start(conn, "resumable/empty")
    status, _, body = _request(conn, "PUT", session, b"", {"Content-Range": "bytes */0"})
    assert status == 200, body
    _check_object(gcs, "resumable/empty", json.loads(body), b"")

    session = _start(conn, "resumable/cancelled")
    status, _, _ = _request(conn, "PUT", session, b"x" * 10, {"Content-Range": "bytes 0-9/*"})
    assert status == 308
    status, _, _ = _request(conn, "DELETE", session)
    assert status == 499
    status, _, _ = _request(conn, "PUT", session, b"", {"Content-Range": "bytes */*"})
    assert status == 404
    assert not ObjectStore(gcs.endpoint).exists(BUCKET, "resumable/cancelled")


def test_resumable_precondition_checked_at_start_and_commit(gcs, bucket):
    conn = connect(gcs.endpoint)
    session = _start(conn, "resumable/raced", "&ifGenerationMatch=0")
    gcs.put(BUCKET, "resumable/raced", b"someone else")
    status, _, body = _request(conn, "PUT", session, b"mine", {"Content-Range": "bytes 0-3/4"})
    assert status == 412 and json.loads(body)["error"]["code"] == 412
    assert gcs.get(BUCKET, "resumable/raced") == b"someone else"
    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=resumable&name=resumable%2Fraced"
    status, _, _ = _request(conn, "POST", f"{path}&ifGenerationMatch=0", b"")
    assert status == 412


def test_concurrent_uploads_and_one_create_if_absent_winner(gcs, bucket):
    datas = [_data(2 << 20, 10 + i) for i in range(8)]
    statuses: list[int] = [0] * 8
    raced: list[int] = [0] * 8

    def work(i: int) -> None:
        conn = connect(gcs.endpoint)
        statuses[i] = _media(conn, f"concurrent/{i}", datas[i])[0]
        raced[i] = _media(conn, "concurrent/race", datas[i], "&ifGenerationMatch=0")[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 8
    assert sorted(raced) == [200] + [412] * 7
    store = ObjectStore(gcs.endpoint)
    for i, data in enumerate(datas):
        assert store.download(BUCKET, f"concurrent/{i}") == data
    assert store.download(BUCKET, "concurrent/race") == datas[raced.index(200)]
    generations = {store.stat(BUCKET, f"concurrent/{i}").generation for i in range(8)}
    assert len(generations) == 8


def test_a_forged_body_file_is_refused(gcs, bucket, tmp_path):
    secret = tmp_path / "not-an-upload"
    secret.write_bytes(b"private")
    path = f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=forged"
    status, _, body = _request(
        connect(gcs.server_endpoint), "POST", path, b"", {"X-Gcsckpt-Body-File": str(secret)}
    )
    assert status == 400 and "not in" in json.loads(body)["error"]["message"]
    assert not ObjectStore(gcs.endpoint).exists(BUCKET, "forged")


def test_latency_model_holds_upload_answers():
    data = _data(2_000_000, 5)
    with LocalGCS(latency_ms=300, stream_mbps=10) as gcs:
        gcs.create_bucket(BUCKET)
        conn = connect(gcs.endpoint)
        start = time.monotonic()
        status, _, _ = _media(conn, "paced/small", b"x")
        assert status == 200 and time.monotonic() - start >= 0.3
        start = time.monotonic()
        status, _, body = _media(conn, "paced/large", data)
        assert status == 200 and time.monotonic() - start >= 0.3 + len(data) / 10e6
        assert json.loads(body)["crc32c"] == crc32c_b64(data)


def test_md5_in_upload_answers_for_clients_that_read_it(gcs, bucket):
    """gcsfs with consistency="md5" reads md5Hash from the upload answer without sending an
    MD5: by default the answer has none (KeyError in gcsfs); md5_in_upload_answers=True
    computes every upload's MD5 inline, and then gcsfs's check passes."""
    small, large = _data(1000, 20), _data(6 << 20, 21)
    with pytest.raises(KeyError, match="md5Hash"):
        gcs.gcsfs(consistency="md5").pipe_file(f"{BUCKET}/inline/default", small)
    with LocalGCS(md5_in_upload_answers=True) as inline:
        inline.create_bucket(BUCKET)
        status, _, body = _media(connect(inline.endpoint), "inline/media", small)
        assert status == 200, body
        _check_object(inline, "inline/media", json.loads(body), small, md5_sent=True)
        fs = inline.gcsfs(consistency="md5")
        fs.pipe_file(f"{BUCKET}/inline/gcsfs-small", small)  # multipart
        with fs.open(f"{BUCKET}/inline/gcsfs-large", "wb", block_size=5 << 20) as f:
            f.write(large)  # resumable
        for name, data in (("inline/gcsfs-small", small), ("inline/gcsfs-large", large)):
            assert fs.info(f"{BUCKET}/{name}")["md5Hash"] == md5_b64(data)
            assert fs.cat_file(f"{BUCKET}/{name}") == data
