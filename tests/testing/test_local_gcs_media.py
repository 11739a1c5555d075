"""Media reads through LocalGCS's nginx: byte-exact Range semantics, odd names, 404/416, counts."""

import hashlib
import json
import random

import numpy as np
import pytest
from http_util import connect, error_code, fetch

from gcsckpt.testing import media_path, quote_object

ODD_NAMES = [
    "plain.distcp",
    "dir/sub/__0_0.distcp",
    "double//slash",
    "/leading-slash",
    "with space",
    "unicode-ü€-😀",
    "percent%41%2F",
    "plus+sign",
    "hash#frag",
    "question?mark=1&x",
    "semi;colon,comma'quote(paren)!*~",
    "trailing.dot.",
]


def _content(name: str, size: int) -> bytes:
    return np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)).bytes(size)


@pytest.fixture(scope="module")
def odd_objects(gcs):
    gcs.create_bucket("odd")
    objects = {name: _content(name, 3000 + 17 * i) for i, name in enumerate(ODD_NAMES)}
    for name, data in objects.items():
        gcs.put("odd", name, data)
    return objects


@pytest.mark.parametrize("prefix", ["/download/storage/v1", "/storage/v1"])
def test_odd_names_whole_and_ranged(gcs, odd_objects, prefix):
    conn = connect(gcs.endpoint)
    for name, data in odd_objects.items():
        path = f"{prefix}/b/odd/o/{quote_object(name)}?alt=media"
        status, headers, body = fetch(conn, path)
        assert (status, body) == (200, data), name
        assert headers["content-length"] == str(len(data))
        for first, last in [(0, 0), (1, 100), (len(data) - 1, len(data) - 1), (500, len(data) - 1)]:
            status, headers, body = fetch(conn, path, f"bytes={first}-{last}")
            assert status == 206, name
            assert headers["content-range"] == f"bytes {first}-{last}/{len(data)}"
            assert body == data[first : last + 1]
        status, headers, body = fetch(conn, path, "bytes=-10")  # suffix range
        assert (status, body) == (206, data[-10:])
        status, _, body = fetch(conn, path, "bytes=2000-")  # open-ended range
        assert (status, body) == (206, data[2000:])


def test_odd_names_metadata_goes_to_the_server(gcs, odd_objects):
    conn = connect(gcs.endpoint)
    for name, data in odd_objects.items():
        status, _, body = fetch(conn, f"/storage/v1/b/odd/o/{quote_object(name)}")
        assert status == 200, name
        meta = json.loads(body)
        assert (meta["name"], int(meta["size"])) == (name, len(data))


def test_large_object_random_ranges_one_connection(gcs):
    gcs.create_bucket("big")
    data = np.random.default_rng(7).bytes(64 << 20)
    gcs.put("big", "shard/__0_0.distcp", data)
    path = media_path("big", "shard/__0_0.distcp")
    before = gcs.request_count()
    conn = connect(gcs.endpoint)
    rng = random.Random(3)
    n = 120
    sock = None
    for i in range(n):
        length = rng.choice([1, 4096, 1 << 20, 8 << 20])
        first = rng.randrange(0, len(data) - length + 1)
        status, headers, body = fetch(conn, path, f"bytes={first}-{first + length - 1}")
        assert status == 206
        assert headers["content-range"] == f"bytes {first}-{first + length - 1}/{len(data)}"
        assert body == data[first : first + length]
        if i == 0:
            sock = conn.sock
        assert conn.sock is sock, "nginx closed the keep-alive connection"
    status, _, body = fetch(conn, path)
    assert status == 200 and hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    assert gcs.request_count() - before == n + 1
    assert all(r.status in (200, 206) for r in gcs.media_requests()[before:])


def test_unsatisfiable_range_is_416(gcs, odd_objects):
    data = odd_objects["plain.distcp"]
    status, headers, _ = fetch(
        connect(gcs.endpoint), media_path("odd", "plain.distcp"), f"bytes={len(data)}-"
    )
    assert status == 416
    assert headers["content-range"] == f"bytes */{len(data)}"


@pytest.mark.parametrize(
    "bucket,name",
    [("odd", "no-such-object"), ("no-such-bucket", "x"), ("odd", "dir"), ("odd", "dir/sub")],
)
def test_missing_object_or_bucket_is_json_404(gcs, odd_objects, bucket, name):
    conn = connect(gcs.endpoint)
    for prefix in ("/download/storage/v1", "/storage/v1"):
        status, headers, body = fetch(conn, f"{prefix}/b/{bucket}/o/{quote_object(name)}?alt=media")
        assert status == 404 and error_code(body) == 404
        assert headers["content-type"] == "application/json"
    status, _, body = fetch(conn, f"/storage/v1/b/{bucket}/o/{quote_object(name)}")  # metadata
    assert status == 404 and error_code(body) == 404
    with pytest.raises(FileNotFoundError, match=bucket):
        gcs.get(bucket, name)


def test_put_into_missing_bucket_names_it(gcs):
    with pytest.raises(FileNotFoundError, match="'nobucket'"):
        gcs.put("nobucket", "x", b"1")


def test_head_media_reports_size(gcs, odd_objects):
    data = odd_objects["with space"]
    status, headers, body = fetch(
        connect(gcs.endpoint), media_path("odd", "with space"), method="HEAD"
    )
    assert (status, body, headers["content-length"]) == (200, b"", str(len(data)))


def test_overwrite_is_visible_at_once(gcs):
    gcs.create_bucket("over")
    conn = connect(gcs.endpoint)
    for size in (5000, 100, 7000):
        data = _content(f"v{size}", size)
        gcs.put("over", "obj", data)
        status, _, body = fetch(conn, media_path("over", "obj"), "bytes=0-")
        assert (status, body) == (206, data)


def test_request_count_counts_every_media_read_exactly(gcs, odd_objects):
    conn = connect(gcs.endpoint)
    before = gcs.request_count()
    for _ in range(25):
        fetch(conn, media_path("odd", "plus+sign"), "bytes=0-9")
    fetch(conn, media_path("odd", "absent"))
    fetch(conn, "/storage/v1/b/odd/o/plus%2Bsign")  # metadata: not a media read
    entries = gcs.media_requests()[before:]
    assert len(entries) == gcs.request_count() - before == 26
    assert [e.status for e in entries] == [206] * 25 + [404]
    assert entries[0].range == "bytes=0-9" and entries[0].body_bytes == 10


def test_empty_object_put_and_get(gcs):
    # A 0-byte media upload: nginx writes no body file, the server reads the empty body.
    gcs.create_bucket("empty")
    gcs.put("empty", "dir/nothing", b"")
    assert gcs.get("empty", "dir/nothing") == b""
    status, headers, body = fetch(connect(gcs.endpoint), "/storage/v1/b/empty/o/dir%2Fnothing")
    assert status == 200 and json.loads(body)["size"] == "0"
