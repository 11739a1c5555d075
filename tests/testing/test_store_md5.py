"""The store's lazy MD5 (server_sums.LazyMD5 and server_store.Store around it) and its `.meta`
flusher, in process, without servers: a pending md5Hash is finished on demand by
metadata reads, listings and soft-deleted copies, unless the request's `fields` leave md5Hash
out; a generation replaced or deleted while pending never lends its MD5 to another; the idle
worker's progress is taken over, not repeated; the worker fills every object in; many commits
share one rewrite of `.meta`, and a flushed `.meta` is what a restart reads.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time

import numpy as np
import pytest

from gcsckpt.testing import server_store
from gcsckpt.testing.server_objects import selects_md5
from gcsckpt.testing.server_store import Store
from gcsckpt.testing.server_sums import LazyMD5, file_checksums

BUCKET = "lazy"
STEP = 1 << 20  # LazyMD5's step


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _data(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _storage(tmp_path, md5_worker: bool = False, retention_s: int | None = None):
    storage = Store(str(tmp_path / "data"), md5_worker=md5_worker)
    bucket = {"name": BUCKET}
    if retention_s is not None:
        bucket["softDeletePolicy"] = {"retentionDurationSeconds": retention_s}
    storage.create_bucket(BUCKET, bucket)
    return storage


def _commit(storage, name: str, data: bytes) -> dict:
    """Commits `data` as gs://lazy/name the way the upload handlers do (no md5Hash)."""
    src = storage.new_temp_path()
    with open(src, "wb") as f:
        f.write(data)
    sums = file_checksums(src)
    assert sums.md5 is None and sums.md5_hex is None
    obj = {"bucket": BUCKET, "name": name, "size": str(len(data)), "crc32c": sums.crc32c}
    with storage.lock:
        return storage.commit_file(BUCKET, name, src, obj)


def test_lazy_md5_finish_takes_over_the_workers_progress(tmp_path):
    data = _data(3 * STEP + 12345, 1)
    path = tmp_path / "object"
    path.write_bytes(data)
    pending = LazyMD5(BUCKET, "object", 10_000_000, str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pending.step(fd) and pending.step(fd)  # the worker got 2 MiB in
        assert pending.digest() is None
        assert pending.finish() == hashlib.md5(data).digest()
        assert not pending.step(fd)  # stopped: nothing is hashed twice
    finally:
        os.close(fd)
    assert pending.digest() == hashlib.md5(data).digest()

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    pending = LazyMD5(BUCKET, "empty", 10_000_001, str(empty))
    fd = os.open(empty, os.O_RDONLY)
    try:
        assert not pending.step(fd)  # finished at once
    finally:
        os.close(fd)
    assert pending.digest() == hashlib.md5(b"").digest()


def test_answers_finish_a_pending_md5(tmp_path):
    storage = _storage(tmp_path)
    data = _data(STEP + 7, 2)
    answer = _commit(storage, "a", data)
    assert "md5Hash" not in answer and answer["etag"] == f"{answer['generation']}-{len(data):x}"
    assert "md5Hash" not in storage.objects[BUCKET]["a"]
    assert storage.pending_md5(BUCKET, "a") is not None
    with storage.lock:
        assert storage.get_object(BUCKET, "a")["md5Hash"] == _md5_b64(data)
    assert storage.pending_md5(BUCKET, "a") is None
    assert "md5Hash" not in answer  # the upload's own answer is not changed afterwards

    _commit(storage, "b", b"listed")
    with storage.lock:
        objs, _ = storage.list_objects(BUCKET, prefix="b")
    assert [(o["name"], o["md5Hash"]) for o in objs] == [("b", _md5_b64(b"listed"))]


@pytest.mark.parametrize(
    "fields, selected",
    [
        (None, True),
        ("items(name,size,generation),prefixes,nextPageToken", False),  # ObjectStore's listing
        ("items(name,md5Hash)", True),
        ("items,nextPageToken", True),
        ("name,generation", False),
        ("*", True),
    ],
)
def test_a_fields_selector_without_md5hash_computes_none(tmp_path, fields, selected):
    storage = _storage(tmp_path)
    _commit(storage, "f", b"fields")
    md5 = selects_md5({"fields": [fields]} if fields else {})
    with storage.lock:
        listed, _ = storage.list_objects(BUCKET, md5=md5)
        obj = storage.get_object(BUCKET, "f", md5=md5)
    assert listed == [obj]
    assert obj.get("md5Hash") == (_md5_b64(b"fields") if selected else None)
    assert (storage.pending_md5(BUCKET, "f") is None) == selected


def test_overwrite_while_pending_gives_the_live_generations_md5(tmp_path):
    storage = _storage(tmp_path)
    old = _commit(storage, "o", b"old bytes")
    stale = storage.pending_md5(BUCKET, "o")
    new = _commit(storage, "o", b"new bytes")
    assert int(new["generation"]) > int(old["generation"])
    # The worker's job for the replaced generation stores nothing (its link is gone).
    storage.compute_md5(stale)
    assert "md5Hash" not in storage.objects[BUCKET]["o"]
    with storage.lock:
        obj = storage.get_object(BUCKET, "o")
    assert (obj["generation"], obj["md5Hash"]) == (new["generation"], _md5_b64(b"new bytes"))


def test_worker_done_for_a_replaced_generation_is_dropped(tmp_path):
    storage = _storage(tmp_path)
    _commit(storage, "r", b"first")
    stale = storage.pending_md5(BUCKET, "r")
    fd = os.open(stale.path, os.O_RDONLY)  # the worker opened it before the overwrite
    try:
        _commit(storage, "r", b"second")
        assert not stale.step(fd)  # the overwrite stopped it
    finally:
        os.close(fd)
    assert stale.digest() is None
    storage.compute_md5(storage.pending_md5(BUCKET, "r"))
    assert storage.objects[BUCKET]["r"]["md5Hash"] == _md5_b64(b"second")
    assert storage.pending_md5(BUCKET, "r") is None


@pytest.mark.parametrize("retention_s", [None, 0], ids=["soft-delete", "hard-delete"])
def test_delete_while_pending(tmp_path, retention_s):
    storage = _storage(tmp_path, retention_s=retention_s)
    gone = _commit(storage, "d", b"deleted")
    stale = storage.pending_md5(BUCKET, "d")
    with storage.lock:
        storage.delete_object(BUCKET, "d")
    assert storage.pending_md5(BUCKET, "d") is None
    storage.compute_md5(stale)  # the worker's turn comes after the delete: no crash
    if retention_s is None:  # the soft-deleted copy gets the MD5 of its bytes when asked
        assert "md5Hash" not in storage.soft_deleted[BUCKET]["d"][gone["generation"]]
        with storage.lock:
            listed, _ = storage.list_objects(BUCKET, soft_deleted=True)
            soft = storage.get_soft_deleted(BUCKET, "d", gone["generation"])
        assert listed == [soft] and soft["md5Hash"] == _md5_b64(b"deleted")
    again = _commit(storage, "d", b"recreated")
    with storage.lock:
        obj = storage.get_object(BUCKET, "d")
    assert (obj["generation"], obj["md5Hash"]) == (again["generation"], _md5_b64(b"recreated"))


def test_the_idle_worker_fills_every_object_in(tmp_path):
    storage = _storage(tmp_path, md5_worker=True)
    datas = {f"w/{i}": _data(STEP // 2 + i, 10 + i) for i in range(6)}
    for name, data in datas.items():
        _commit(storage, name, data)
    deadline = time.monotonic() + 120  # a guard against a hang, not a speed check
    while any(storage.pending_md5(BUCKET, n) for n in datas) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {n: storage.objects[BUCKET][n].get("md5Hash") for n in datas} == {
        n: _md5_b64(d) for n, d in datas.items()
    }


def test_a_reused_data_dir_queues_what_was_pending(tmp_path):
    storage = _storage(tmp_path)
    _commit(storage, "kept", b"from the last run")
    assert "md5Hash" not in storage.objects[BUCKET]["kept"]
    storage.flush_metadata()  # what server_main does when it stops
    reopened = Store(str(tmp_path / "data"), md5_worker=False)
    assert reopened.pending_md5(BUCKET, "kept") is not None
    with reopened.lock:
        assert reopened.get_object(BUCKET, "kept")["md5Hash"] == _md5_b64(b"from the last run")


def _meta_names(tmp_path) -> set[str]:
    import json

    path = tmp_path / "data" / ".cloudstorage" / ".meta"
    if not path.exists():
        return set()
    return set(json.loads(path.read_text()).get("objects", {}).get(BUCKET, {}))


def test_meta_is_written_by_the_flusher_not_by_every_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(server_store, "META_FLUSH_S", 0.2)
    storage = _storage(tmp_path)
    writes = []
    real_write = Store._write_meta

    def counting_write(self):
        writes.append(1)
        return real_write(self)

    monkeypatch.setattr(Store, "_write_meta", counting_write)
    names = {f"obj{i}" for i in range(30)}
    for name in sorted(names):
        _commit(storage, name, b"x" * 100)
    deadline = time.monotonic() + 30
    while _meta_names(tmp_path) != names and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _meta_names(tmp_path) == names
    assert 1 <= len(writes) < 30  # 30 commits shared far fewer rewrites of `.meta`


def test_flush_metadata_writes_what_a_restart_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(server_store, "META_FLUSH_S", 3600)  # only the explicit flush
    storage = _storage(tmp_path)
    data = _data(5000, 7)
    _commit(storage, "kept", data)
    storage.flush_metadata()
    assert _meta_names(tmp_path) == {"kept"}
    storage.flush_metadata()  # nothing changed: no rewrite needed, still the same
    again = Store(str(tmp_path / "data"), md5_worker=False)
    obj = again.get_object(BUCKET, "kept", md5=False)
    assert int(obj["size"]) == len(data)
    with again.lock:
        assert again.fill_md5(dict(obj))["md5Hash"] == _md5_b64(data)
