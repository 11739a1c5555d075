"""Random ranges of real objects through LocalGCS, compared byte for byte with the source."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from io_fixtures import BUCKET, object_bytes

from gcsckpt.io import RangeReader, RangeRequest

MiB = 1 << 20
GiB = 1 << 30
# ~150 MiB in total: large enough for many splits and coalesced spans, quick to upload.
SIZES = {"ckpt/big.distcp": 96 * MiB + 5, "ckpt/mid.distcp": 40 * MiB + 17, "tiny": 100_003}


@pytest.fixture(scope="module")
def objects(gcs):
    data = {}
    for seed, (name, size) in enumerate(SIZES.items()):
        data[name] = object_bytes(size, seed)
        gcs.put(BUCKET, name, data[name])
    return data


def make_dest(kind: str, length: int):
    """A destination of `length` bytes of the given kind, and a function reading its bytes."""
    if kind == "numpy_f32" and length % 4 == 0:
        a = np.full(length // 4, np.nan, np.float32)
        return a, lambda: a.tobytes()
    if kind == "torch_bf16" and length % 2 == 0:
        t = torch.full((length // 2,), -1.0, dtype=torch.bfloat16)
        return t, lambda: t.view(torch.uint8).numpy().tobytes()
    if kind == "memoryview":
        backing = bytearray(length + 7)
        view = memoryview(backing)[3 : 3 + length]
        return view, lambda: bytes(view)
    if kind == "numpy_u8":
        a = np.zeros(length, np.uint8)
        return a, lambda: a.tobytes()
    b = bytearray(length)
    return b, lambda: bytes(b)


def random_requests(objects, rng: random.Random, count: int, max_len: int):
    kinds = ["bytearray", "numpy_u8", "numpy_f32", "torch_bf16", "memoryview"]
    requests, readers = [], []
    names = list(objects)
    for i in range(count):
        name = rng.choice(names)
        size = len(objects[name])
        length = 0 if i % 37 == 0 else min(int(2 ** rng.uniform(0, np.log2(max_len))), size)
        offset = rng.randrange(0, size - length + 1)
        if i % 11 == 0 and requests:  # overlap an earlier request of the same object
            prev = requests[rng.randrange(len(requests))]
            if prev.object == name and prev.length > 1:
                offset = prev.offset + prev.length // 2
                length = min(length, size - offset)
        dest, read_back = make_dest(kinds[i % len(kinds)], length)
        requests.append(RangeRequest(BUCKET, name, offset, length, dest))
        readers.append(read_back)
    return requests, readers


CONFIGS = {
    "defaults": {},
    "small_chunks_coalesce": {"chunk_bytes": 1 * MiB, "coalesce_gap_bytes": 64 << 10},
    "tiny_chunks_many_inflight": {
        "chunk_bytes": 256 << 10,
        "coalesce_gap_bytes": 0,
        "max_inflight_requests": 64,
        "num_threads": 3,
    },
    "one_at_a_time": {"max_inflight_requests": 1, "num_threads": 1, "chunk_bytes": 4 * MiB},
    "byte_budget": {"max_inflight_bytes": 2 * MiB, "chunk_bytes": 3 * MiB},
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_random_ranges_are_byte_exact(gcs, objects, config):
    rng = random.Random(config)
    requests, readers = random_requests(objects, rng, count=160, max_len=8 * MiB)
    with RangeReader(gcs.endpoint, **CONFIGS[config]) as reader:
        handle = reader.submit(requests)
        handle.wait()
        stats = reader.stats()
        for r, read_back in zip(requests, readers, strict=True):
            want = objects[r.object][r.offset : r.offset + r.length]
            assert read_back() == want, f"bytes differ for {r.object} {r.offset}+{r.length}"
        assert stats["bytes_delivered"] == sum(r.length for r in requests)
        assert stats["requests"] == handle.num_fetches
        assert stats["retries"] == 0 and stats["failures"] == 0
        limit = reader.options["max_inflight_requests"]
        assert stats["connections_opened"] <= limit
        assert stats["connections_opened"] + stats["connections_reused"] == stats["requests"]


def test_next_completed_reports_every_index_once(gcs, objects):
    rng = random.Random(5)
    requests, readers = random_requests(objects, rng, count=300, max_len=2 * MiB)
    with RangeReader(gcs.endpoint, chunk_bytes=MiB, max_inflight_requests=8) as reader:
        handle = reader.submit(requests)
        seen = []
        while batch := handle.next_completed():
            for i in batch:  # complete when reported: check right away
                r = requests[i]
                assert readers[i]() == objects[r.object][r.offset : r.offset + r.length]
            seen.extend(batch)
        assert sorted(seen) == list(range(len(requests)))
        assert handle.next_completed() == []
        assert handle.done()


def test_whole_object_split_into_chunks(gcs, objects):
    name = "ckpt/big.distcp"
    size = len(objects[name])
    dest = np.empty(size, np.uint8)
    with RangeReader(gcs.endpoint, chunk_bytes=8 * MiB, max_inflight_requests=6) as reader:
        handle = reader.submit([RangeRequest(BUCKET, name, 0, size, dest)])
        handle.wait()
        assert handle.num_fetches == 13  # ceil((96 MiB + 5) / 8 MiB) near-equal parts
        assert reader.stats()["requests"] == 13
        assert reader.stats()["bytes_received"] == size
    assert dest.tobytes() == objects[name]


def test_close_ranges_are_coalesced_into_one_get(gcs, objects):
    name = "ckpt/mid.distcp"
    requests = [
        RangeRequest(BUCKET, name, 10_000 + 2048 * i, 1024, bytearray(1024)) for i in range(100)
    ]
    before = gcs.request_count()
    with RangeReader(gcs.endpoint, coalesce_gap_bytes=4096) as reader:
        reader.read(requests)
        stats = reader.stats()
    assert gcs.request_count() - before == 1
    assert stats["requests"] == 1
    assert stats["bytes_received"] == 99 * 2048 + 1024  # the span, gaps included
    assert stats["bytes_delivered"] == 100 * 1024
    for r in requests:
        assert bytes(r.dest) == objects[name][r.offset : r.offset + r.length]

    before = gcs.request_count()
    with RangeReader(gcs.endpoint, coalesce_gap_bytes=0) as reader:
        reader.read([r._replace(dest=bytearray(1024)) for r in requests])
        assert reader.stats()["requests"] == 100
    assert gcs.request_count() - before == 100


def test_offsets_beyond_4_gib(gcs):
    # A sparse 5 GiB object written straight into the emulator's on-disk store (nginx serves
    # media reads from those files), so no 5 GiB upload is needed.
    name = "sparse-5g"
    path = os.path.join(gcs.data_dir, ".cloudstorage", BUCKET, name)
    marks = {4 * GiB - 3: b"ABCDEF", 5 * GiB: b"0123456789"}
    with open(path, "wb") as f:
        f.truncate(5 * GiB + 10)
        for offset, blob in marks.items():
            f.seek(offset)
            f.write(blob)
    try:
        requests = [
            RangeRequest(BUCKET, name, 4 * GiB - 3, 6, bytearray(6)),
            RangeRequest(BUCKET, name, 5 * GiB + 2, 8, bytearray(8)),
            RangeRequest(BUCKET, name, 4 * GiB + 100, 5, bytearray(b"xxxxx")),
        ]
        with RangeReader(gcs.endpoint) as reader:
            reader.read(requests)
        assert bytes(requests[0].dest) == b"ABCDEF"
        assert bytes(requests[1].dest) == b"23456789"
        assert bytes(requests[2].dest) == b"\0" * 5
    finally:
        os.remove(path)


def test_buffers_are_released_after_wait(gcs, objects):
    dest = bytearray(1000)
    with RangeReader(gcs.endpoint) as reader:
        handle = reader.submit([RangeRequest(BUCKET, "tiny", 0, 1000, dest)])
        handle.wait()
        dest.extend(b"x")  # raises BufferError while the reader still holds the buffer
    assert bytes(dest[:1000]) == objects["tiny"][:1000]


def test_small_batches_are_cut_to_keep_requests_in_flight(gcs, objects):
    name = "ckpt/mid.distcp"
    dest = np.empty(16 * MiB, np.uint8)
    options = {"max_inflight_requests": 16, "chunk_bytes": 8 * MiB, "min_chunk_bytes": 2 * MiB}
    with RangeReader(gcs.endpoint, **options) as reader:
        handle = reader.submit([RangeRequest(BUCKET, name, 1000, 16 * MiB, dest)])
        handle.wait()
        assert handle.num_fetches == 8  # 16 MiB over 16 / 2 slots: 2 MiB GETs, not 2 x 8 MiB
    assert dest.tobytes() == objects[name][1000 : 1000 + 16 * MiB]
