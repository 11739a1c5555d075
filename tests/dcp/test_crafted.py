"""Crafted or damaged checkpoints in a local GCS endpoint: each load fails with a clear error
(rank, object, byte range, cause) and never reports bad data as loaded."""

from __future__ import annotations

import dataclasses
import os
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo

from gcsckpt.dcp import GCSLoadPlanner, GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "crafted"
OBJECT = "__0_0.distcp"  # the saved name, set by the `gcs` fixture (names carry the save)


def _state():
    return {"w": torch.arange(600, dtype=torch.float32), "b": torch.ones(4, 4), "m": {"k": 1}}


def _blank():
    return {"w": torch.zeros(600), "b": torch.zeros(4, 4), "m": {"k": 0}}


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        url = f"gs://{BUCKET}/good"
        writer = GCSStorageWriter(url, endpoint=endpoint.endpoint, thread_count=1)
        dcp.save(_state(), storage_writer=writer)
        global OBJECT
        names = ObjectStore(endpoint.endpoint).list(BUCKET, "good/")
        (OBJECT,) = [n.split("/", 1)[1] for n in names if n != "good/.metadata"]
        yield endpoint


def _variant(gcs, name, *, metadata=None, data=None):
    """Copies the good checkpoint to `name` with a replaced `.metadata` and/or object, the
    object first and `.metadata` last, as a writer commits (a data object newer than
    `.metadata` fails the load as "object changed during load")."""
    if data is not False:
        good = gcs.get(BUCKET, f"good/{OBJECT}")
        gcs.put(BUCKET, f"{name}/{OBJECT}", data(good) if data else good)
    good_md = pickle.loads(gcs.get(BUCKET, "good/.metadata"))
    gcs.put(BUCKET, f"{name}/.metadata", metadata(good_md) if metadata else pickle.dumps(good_md))
    return f"gs://{BUCKET}/{name}"


def _with_info(fqn, **changes):
    def edit(metadata) -> bytes:
        for index, info in metadata.storage_data.items():
            if index.fqn == fqn:
                fields = dict(
                    relative_path=info.relative_path, offset=info.offset, length=info.length
                )
                metadata.storage_data[index] = _StorageInfo(**{**fields, **changes})
        return pickle.dumps(metadata)

    return edit


def _load_fails(gcs, url, match, **kw):
    state = _blank()
    with pytest.raises(CheckpointException, match=match):
        dcp.load(state, storage_reader=GCSStorageReader(url, endpoint=gcs.endpoint, **kw))
    return state


def test_good_checkpoint_loads(gcs):
    state = _blank()
    dcp.load(state, storage_reader=GCSStorageReader(f"gs://{BUCKET}/good", endpoint=gcs.endpoint))
    assert torch.equal(state["w"], _state()["w"]) and state["m"] == {"k": 1}


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_never_runs(gcs, tmp_path):
    marker = tmp_path / "pwned"

    def evil(metadata) -> bytes:
        metadata.planner_data = _Payload(str(marker))
        return pickle.dumps(metadata)

    url = _variant(gcs, "evil", metadata=evil)
    state = _load_fails(gcs, url, r"gs://crafted/evil/\.metadata: global (posix|os)\.system")
    assert not marker.exists()
    assert torch.count_nonzero(state["w"]) == 0 and state["m"] == {"k": 0}


@pytest.mark.parametrize(
    ("path", "why"),
    [("../good/" + OBJECT, "'\\.\\.'"), ("/etc/passwd", "absolute"), ("gs://x/y", "scheme")],
)
def test_paths_outside_the_checkpoint_are_refused(gcs, path, why):
    url = _variant(
        gcs, f"path{abs(hash(path)) % 1000}", metadata=_with_info("w", relative_path=path)
    )
    state = _load_fails(gcs, url, why)
    assert torch.count_nonzero(state["w"]) == 0 and torch.count_nonzero(state["b"]) == 0


def test_length_past_object_end(gcs):
    url = _variant(gcs, "too-long", metadata=_with_info("w", length=10**6))
    state = _load_fails(gcs, url, rf"rank 0: .*gs://crafted/too-long/{OBJECT} bytes=\d+-\d+: ")
    assert torch.count_nonzero(state["w"]) == 0


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "no-listing"])
def test_length_larger_than_the_object_fails_before_allocating(gcs, listed):
    # 2^40 bytes: allocated, this is a raw allocator failure; checked, it is the object's size.
    url = _variant(gcs, "huge", metadata=_with_info("w", length=1 << 40))
    good_md = pickle.loads(gcs.get(BUCKET, "good/.metadata"))
    offset = next(i for x, i in good_md.storage_data.items() if x.fqn == "w").offset
    size = len(gcs.get(BUCKET, f"good/{OBJECT}"))
    # Without a listing (the LIST, the load's third request after the two GETs of a crafted
    # `.metadata` without an index, fails), the size the object's block checksums cover is
    # known from .metadata: no GET is needed either way.
    faults = [] if listed else [Fault(kind="status", status=404, media_only=False, nth=3)]
    state = _blank()
    with FaultProxy(gcs.endpoint, faults) as proxy:
        reader = GCSStorageReader(url, endpoint=proxy.endpoint)
        with pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader)
        log = proxy.request_log
    assert f"rank 0: checkpoint load failed: gs://crafted/huge/{OBJECT} bytes={offset}-" + (
        f"{offset + (1 << 40) - 1}: FQN 'w': offset {offset} + length {1 << 40} = "
        f"{offset + (1 << 40)} reaches past the end of the object (size {size} bytes)"
    ) in str(info.value)
    data_gets = [p for _, p in log if OBJECT in p and "alt=media" in p]
    assert data_gets == []
    assert [".metadata" in p and "alt=media" in p for _, p in log[:2]] == [True, True]
    assert "/o?" in log[2][1] and "alt=media" not in log[2][1]  # the LIST
    assert torch.count_nonzero(state["w"]) == 0 and state["m"] == {"k": 0}


def test_length_too_short(gcs):
    good_md = pickle.loads(gcs.get(BUCKET, "good/.metadata"))
    info = next(i for x, i in good_md.storage_data.items() if x.fqn == "w")
    url = _variant(gcs, "too-short", metadata=_with_info("w", length=info.length - 100))
    end = info.offset + info.length - 101
    state = _load_fails(
        gcs, url, rf"rank 0: .*{OBJECT} bytes={info.offset}-{end}: FQN 'w': .*archive"
    )
    assert torch.count_nonzero(state["w"]) == 0


def test_truncated_object(gcs):
    url = _variant(gcs, "truncated", data=lambda raw: raw[: len(raw) // 2])
    state = _load_fails(gcs, url, rf"rank 0: .*gs://crafted/truncated/{OBJECT} bytes=\d+-\d+: ")
    assert torch.count_nonzero(state["b"]) == 0 or torch.count_nonzero(state["w"]) == 0


def test_missing_object(gcs):
    url = _variant(gcs, "missing", data=False)
    _load_fails(gcs, url, rf"gs://crafted/missing/{OBJECT} bytes=\d+-\d+: .*404")


def test_corrupted_archive_bytes(gcs):
    def scramble(raw: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in raw)

    url = _variant(gcs, "scrambled", data=scramble)
    # Verified (the default), the block checksums catch it before any decode.
    _load_fails(gcs, url, rf"rank 0: .*scrambled/{OBJECT} bytes=\d+-\d+: .*CRC-32C mismatch")
    # Unverified, the decoders still refuse it (the second line of defence).
    state = _load_fails(
        gcs, url, rf"rank 0: .*scrambled/{OBJECT} bytes=\d+-\d+: FQN '(w|b|m\.k)': ", verify=False
    )
    # Direct reads may leave scrambled bytes in a destination (never committed); none holds
    # the saved values.
    want = _state()
    assert not torch.equal(state["w"], want["w"]) and not torch.equal(state["b"], want["b"])


def test_variants_were_really_uploaded(gcs):
    names = ObjectStore(gcs.endpoint).list(BUCKET, "good/")
    assert sorted(names) == ["good/.metadata", f"good/{OBJECT}"]


@pytest.mark.parametrize(
    ("offset", "size", "why"),
    [(0, 599, "cover 599 elements of this rank's 600"), (1, 600, None)],
    ids=["short", "shifted"],
)
def test_chunks_that_do_not_cover_the_tensor_fail_before_reading(gcs, offset, size, why):
    # torch's planner takes a chunk that leaves part of `w` out (or reads past its end) and
    # loads the rest, leaving the uncovered elements as they were: GCSLoadPlanner refuses.
    def edit(metadata) -> bytes:
        entry = metadata.state_dict_metadata["w"]
        (chunk,) = entry.chunks
        entry.chunks[0] = dataclasses.replace(
            chunk, offsets=torch.Size([offset]), sizes=torch.Size([size])
        )
        for index in list(metadata.storage_data):
            if index.fqn == "w":
                info = metadata.storage_data.pop(index)
                metadata.storage_data[dataclasses.replace(index, offset=torch.Size([offset]))] = (
                    info
                )
        return pickle.dumps(metadata)

    url = _variant(gcs, f"cover-{offset}-{size}", metadata=edit)
    state = _blank()
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    with pytest.raises(CheckpointException) as info:
        dcp.load(state, storage_reader=reader, planner=GCSLoadPlanner())
    assert "FQN 'w'" in str(info.value) and (why is None or why in str(info.value))
    assert torch.count_nonzero(state["w"]) == 0 and state["m"] == {"k": 0}
