"""LocalGCS takes every name GCS takes and refuses the rest as GCS does: an object whose path
segment is over 255 bytes (more than a file name holds) round-trips through the C++ uploader,
google-cloud-storage, ranged reads and downloads; a 1,025-byte name is refused with HTTP 400;
bucket names follow GCS's rules (`gcsckpt.io.names`)."""

from __future__ import annotations

import pytest

from gcsckpt.io import ObjectStore, RangeReader, RangeRequest, Uploader, UploadError
from gcsckpt.io.names import OBJECT_NAME_MAX_BYTES
from gcsckpt.testing import LocalGCS

BUCKET = "names"
DATA = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


@pytest.mark.parametrize(
    "name",
    [
        "ckpt/" + "s" * 300 + "/__0_0.distcp",  # one 300-byte segment
        "é" * 200 + "/x",  # 400 bytes of UTF-8 in one segment
        "a/" + "b" * 1020,  # 1,024 bytes in all, the longest name GCS takes
        "ckpt/.~gcsckpt-long~" + "0" * 64,  # looks like a stored long segment; still its own
    ],
    ids=["300-byte-segment", "utf8-segment", "1024-bytes", "marker-like"],
)
def test_long_segments_round_trip(gcs, name):
    with Uploader(gcs.endpoint) as uploader:
        result = uploader.upload(BUCKET, name, DATA)
    assert result.size == len(DATA)
    with ObjectStore(gcs.endpoint) as store:
        info = store.stat(BUCKET, name)
        assert (info.name, info.size, info.generation) == (name, len(DATA), result.generation)
        assert store.read(BUCKET, name).data == DATA
        assert name in store.list(BUCKET, name.split("/")[0])
    assert gcs.get(BUCKET, name) == DATA
    with RangeReader(gcs.endpoint) as reader:
        dests = [bytearray(1000), bytearray(len(DATA) - 5000)]
        reader.read(
            [
                RangeRequest(BUCKET, name, 7, 1000, dests[0]),
                RangeRequest(BUCKET, name, 5000, len(DATA) - 5000, dests[1]),
            ]
        )
    assert bytes(dests[0]) == DATA[7:1007] and bytes(dests[1]) == DATA[5000:]
    # google-cloud-storage (its own upload and download paths) replaces and reads it back.
    blob = gcs.storage_client().bucket(BUCKET).blob(name)
    blob.upload_from_string(DATA[:1000])
    assert blob.download_as_bytes() == DATA[:1000]
    assert gcs.get(BUCKET, name) == DATA[:1000]


def test_a_name_over_1024_bytes_is_refused_with_400(gcs):
    name = "n" * (OBJECT_NAME_MAX_BYTES + 1)
    with Uploader(gcs.endpoint) as uploader:
        with pytest.raises(UploadError) as info:
            uploader.upload(BUCKET, name, b"data")
    assert info.value.failure["status"] == 400, info.value.failure
    assert "1025 bytes" in str(info.value)
    with pytest.raises(Exception, match="400"):
        gcs.storage_client().bucket(BUCKET).blob(name).upload_from_string(b"data")
    assert ObjectStore(gcs.endpoint).list(BUCKET, "nnn") == []


@pytest.mark.parametrize("bad", ["b", "UPPER", "-dash", "192.168.1.1", "goog-bucket", "a..b"])
def test_create_bucket_refuses_names_gcs_refuses(gcs, bad):
    with pytest.raises(ValueError, match=f"{bad!r} is not a valid GCS bucket name"):
        gcs.create_bucket(bad)
