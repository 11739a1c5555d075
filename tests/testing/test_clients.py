"""Stock clients through LocalGCS: google-cloud-storage and gcsfs (the FsspecReader path)."""

import numpy as np
import pytest

from gcsckpt.testing import emulator_env, gcsfs_filesystem

NAMES = ["ckpt/__0_0.distcp", "ckpt/.metadata", "odd name+%#?/ü.bin"]


def test_google_cloud_storage_upload_list_download_delete(gcs):
    client = gcs.storage_client()
    bucket = client.create_bucket("gcs-client")
    payloads = {name: np.random.default_rng(i).bytes(10_000 + i) for i, name in enumerate(NAMES)}
    for name, data in payloads.items():
        bucket.blob(name).upload_from_string(data)
    big = np.random.default_rng(9).bytes(3 << 20)
    resumable = bucket.blob("resumable.bin", chunk_size=1 << 20)  # 3 resumable chunks
    resumable.upload_from_string(big)
    assert sorted(b.name for b in client.list_blobs("gcs-client")) == sorted(
        [*NAMES, "resumable.bin"]
    )
    before = gcs.request_count()
    for name, data in payloads.items():
        assert bucket.blob(name).download_as_bytes() == data
    assert (
        bucket.blob("resumable.bin").download_as_bytes(start=5, end=1 << 20)
        == big[5 : (1 << 20) + 1]
    )
    assert gcs.request_count() - before == len(NAMES) + 1  # media reads were served by nginx
    bucket.blob(NAMES[0]).delete()
    assert NAMES[0] not in {b.name for b in client.list_blobs("gcs-client")}
    assert gcs.get("gcs-client", NAMES[1]) == payloads[NAMES[1]]


def test_google_cloud_storage_compose_copy_rewrite_and_metadata(gcs):
    client = gcs.storage_client()
    bucket = client.create_bucket("gcs-compose")
    parts = [np.random.default_rng(20 + i).bytes(1000 + i) for i in range(3)]
    for i, data in enumerate(parts):
        bucket.blob(f"part/{i}").upload_from_string(data)
    whole = bucket.blob("whole")
    whole.compose([bucket.blob(f"part/{i}") for i in range(3)])
    assert whole.download_as_bytes() == b"".join(parts)
    copy = bucket.copy_blob(whole, bucket, "dir/copy")
    assert copy.download_as_bytes() == b"".join(parts)
    token, done, total = bucket.blob("rewritten").rewrite(bucket.blob("part/1"))
    assert (token, done, total) == (None, len(parts[1]), len(parts[1]))
    assert bucket.blob("rewritten").download_as_bytes() == parts[1]
    copy.metadata = {"step": "7"}
    copy.patch()
    again = bucket.get_blob("dir/copy")
    assert again.metadata == {"step": "7"} and again.metageneration == 2
    assert again.crc32c == whole.crc32c and again.generation > whole.generation
    pages = client.list_blobs("gcs-compose", prefix="part/", page_size=2).pages
    assert [[b.name for b in page] for page in pages] == [["part/0", "part/1"], ["part/2"]]
    top = client.list_blobs("gcs-compose", delimiter="/")
    assert [b.name for b in top] == ["rewritten", "whole"] and top.prefixes == {"dir/", "part/"}


def test_gcsfs_write_read_list_ranges_remove(gcs):
    gcs.create_bucket("fsx")
    fs = gcsfs_filesystem(gcs.endpoint)
    data = np.random.default_rng(4).bytes(5 << 20)
    with fs.open("fsx/run/__1_0.distcp", "wb") as out:
        out.write(data)
    fs.pipe("fsx/run/odd name+%.bin", b"small")
    assert sorted(fs.ls("fsx/run", refresh=True)) == [
        "fsx/run/__1_0.distcp",
        "fsx/run/odd name+%.bin",
    ]
    assert fs.info("fsx/run/__1_0.distcp")["size"] == len(data)
    before = gcs.request_count()
    with fs.open("fsx/run/__1_0.distcp", "rb", block_size=1 << 20) as f:
        f.seek(3_000_001)
        assert f.read(100_000) == data[3_000_001:3_100_001]
    starts, ends = [0, 4096, len(data) - 7], [10, 1 << 20, len(data)]
    got = fs.cat_ranges(["fsx/run/__1_0.distcp"] * 3, starts, ends)
    assert got == [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert fs.cat("fsx/run/odd name+%.bin") == b"small"
    assert gcs.request_count() > before  # reads reached nginx's media path
    fs.rm("fsx/run/odd name+%.bin")
    assert fs.ls("fsx/run", refresh=True) == ["fsx/run/__1_0.distcp"]
    with pytest.raises(FileNotFoundError):
        fs.cat("fsx/run/odd name+%.bin")


def test_gcsfs_mv_moves_by_move_to_and_keeps_a_rewritten_source(gcs, caplog):
    # FsspecWriter commits `.metadata.tmp` -> `.metadata` with gcsfs's mv (JSON API moveTo).
    gcs.create_bucket("fs-mv")
    fs = gcsfs_filesystem(gcs.endpoint)
    fs.pipe("fs-mv/run/.metadata.tmp", b"meta")
    with caplog.at_level("WARNING", logger="gcsfs"):
        fs.mv("fs-mv/run/.metadata.tmp", "fs-mv/run/.metadata")
    assert not [r for r in caplog.records if "moveTo" in r.getMessage()]  # no copy+delete
    assert gcs.get("fs-mv", "run/.metadata") == b"meta"
    assert fs.ls("fs-mv/run", refresh=True) == ["fs-mv/run/.metadata"]
    client = gcs.storage_client()
    source = client.bucket("fs-mv").blob("run/src")
    source.upload_from_string(b"one")
    generation = client.bucket("fs-mv").get_blob("run/src").generation
    source.upload_from_string(b"two")
    query = f"ifSourceGenerationMatch={generation}"
    url = f"{gcs.endpoint}/storage/v1/b/fs-mv/o/run%2Fsrc/moveTo/o/run%2Fdst?{query}"
    answer = client._http.post(url)
    assert answer.status_code == 412
    assert gcs.get("fs-mv", "run/src") == b"two"  # the source is kept, nothing is moved
    assert client.bucket("fs-mv").get_blob("run/dst") is None


def test_env_points_clients_at_endpoint(gcs):
    env = gcs.env()
    assert env["STORAGE_EMULATOR_HOST"] == gcs.endpoint
    assert env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] == "false"
    assert emulator_env(gcs.endpoint) == env
