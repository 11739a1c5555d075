"""Tensor bytes uploaded straight from tensor memory: torch.save hands the storage itself to
`stream.write`; the segmented stream references only writes inside storages the pipeline holds;
a save's objects are byte-identical to torch's FileSystemWriter's and load with its
FileSystemReader; the referenced / copied counters for plain tensors, views of larger storages,
strided and transposed tensors, BYTE_IO items, stream transforms and safetensors; tensors held
until their upload finished and released after the save, a failed upload or a serializer
failure; every dtype and view through our archive writer equal to torch's writer's object and
loaded by both readers."""

from __future__ import annotations

import gc
import io
import weakref

import google_crc32c
import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.save import archive_writer
from gcsckpt.dcp.save.segments import (
    REFERENCE_MIN_BYTES,
    HeldTensors,
    SegmentedStream,
    StagingBudget,
)
from gcsckpt.io import ObjectStore
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "zero-copy"
KiB = 1 << 10


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _address(view) -> int:
    return np.frombuffer(memoryview(view), np.uint8).__array_interface__["data"][0]


def _crc(data) -> int:
    return int.from_bytes(google_crc32c.Checksum(bytes(data)).digest(), "big")


def _tensor_crc(t: torch.Tensor) -> int:
    return _crc(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _save(gcs, name: str, state: dict, **kw) -> GCSStorageWriter:
    kw.setdefault("thread_count", 1)
    kw.setdefault("object_bytes", 1 << 30)  # one object per save: easy to compare
    writer = GCSStorageWriter(f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint, **kw)
    dcp.save(state, storage_writer=writer)
    return writer


def _uploaded_bytes(writer: GCSStorageWriter) -> int:
    return sum(u.size for u in writer.uploads)


class _Recorder:
    """A write stream recording (address, length) of every write."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, int]] = []

    def write(self, data) -> int:
        view = memoryview(data)
        self.writes.append((_address(view) if view.nbytes else 0, view.nbytes))
        return view.nbytes

    def flush(self) -> None:
        pass


def test_torch_save_hands_the_storage_itself_to_stream_write():
    t = torch.arange(300_000, dtype=torch.float32)
    rec = _Recorder()
    torch.save(t, rec)
    storage = t.untyped_storage()
    big = [w for w in rec.writes if w[1] >= REFERENCE_MIN_BYTES]
    assert big == [(storage.data_ptr(), storage.nbytes())]  # one write, the storage in place
    assert all(n < 600 for _, n in rec.writes if n < REFERENCE_MIN_BYTES)  # the rest: records


def test_the_stream_references_only_writes_inside_held_storages():
    budget = StagingBudget(1 << 30)
    held = HeldTensors()
    t = torch.arange(100_000, dtype=torch.int32)  # 400,000 bytes
    held.add(t)
    stream = SegmentedStream(lambda: held, budget)
    raw = t.numpy()
    view = memoryview(raw).cast("B")
    assert stream.write(view) == 400_000  # the whole storage: referenced
    assert stream.write(view[100_000:300_000]) == 200_000  # inside it: referenced
    assert stream.write(b"header") == 6  # small: copied
    assert stream.write(view[:1000]) == 1000  # inside, but under the threshold: copied
    assert stream.write(memoryview(np.arange(10, dtype=np.uint8)[::2])) == 5  # strided: copied
    other = np.arange(50_000, dtype=np.int32)  # 200,000 bytes nobody holds: copied
    assert stream.write(memoryview(other).cast("B")) == 200_000
    straddle = np.frombuffer(view, np.uint8)  # [300,000, 400,000 + 1) would leave the storage:
    assert not held.covers(_address(straddle[300_000:]), 100_001)
    assert held.covers(_address(straddle[300_000:]), 100_000)
    assert stream.tell() == 400_000 + 200_000 + 6 + 1000 + 5 + 200_000
    assert (stream.referenced, stream.copied) == (600_000, 6 + 1000 + 5 + 200_000)
    kinds = [type(s).__name__ for s in stream.segments]
    assert kinds == ["memoryview", "memoryview", "bytearray", "bytearray"]
    joined = b"".join(bytes(s) for s in stream.segments)
    expected = raw.tobytes() + raw.tobytes()[100_000:300_000] + b"header"
    expected += raw.tobytes()[:1000] + bytes([0, 2, 4, 6, 8]) + other.tobytes()
    assert joined == expected
    assert stream.reserved >= stream.copied
    held.clear()
    assert not held.covers(_address(view), 1)


def test_a_gpu_or_storage_less_tensor_gives_no_range():
    held = HeldTensors()
    held.add(torch.empty(0))
    held.add(torch.zeros(4, device="meta"))
    assert held._starts == []


def _mixed_state() -> dict:
    gen = torch.Generator().manual_seed(7)
    base = torch.randn(512, 256, generator=gen)  # 512 KiB
    return {
        "plain": torch.randn(300, 257, generator=gen),
        "bf16": torch.randn(1000, 77, generator=gen).to(torch.bfloat16),
        "i64": torch.randint(0, 1 << 40, (20_000,), generator=gen),
        "small": torch.arange(100, dtype=torch.float32),
        "rows": base[100:300],  # a view of a larger storage: torch's loader clones it
        "strided": torch.randn(200, 400, generator=gen)[:, ::2],
        "transposed": torch.randn(300, 200, generator=gen).t(),
        "meta": {"step": 3, "blob": bytes(range(256)) * 512},  # BYTE_IO
    }


def test_objects_are_byte_identical_to_torchs_writer_and_load_with_its_reader(gcs, tmp_path):
    state = _mixed_state()
    stock_dir = tmp_path / "stock"
    dcp.save(state, storage_writer=dcp.FileSystemWriter(stock_dir, thread_count=1))
    (stock_file,) = stock_dir.glob("*.distcp")

    writer = _save(gcs, "identical", state)
    (upload,) = writer.uploads
    ours = gcs.get(BUCKET, upload.object)
    assert ours == stock_file.read_bytes()
    assert upload.crc32c == _crc(ours)

    ours_dir = tmp_path / "ours"
    ours_dir.mkdir()
    for name in ObjectStore(gcs.endpoint).list(BUCKET, "identical/"):
        (ours_dir / name.rsplit("/", 1)[1]).write_bytes(gcs.get(BUCKET, name))
    target = {k: torch.zeros_like(v) for k, v in state.items() if isinstance(v, torch.Tensor)}
    target["meta"] = {"step": 0, "blob": b""}
    dcp.load(target, storage_reader=dcp.FileSystemReader(ours_dir))
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert _tensor_crc(target[key]) == _tensor_crc(value), key
            assert target[key].dtype == value.dtype and target[key].shape == value.shape
    assert target["meta"] == state["meta"]

    stats = writer.save_stats
    referenced = sum(state[k].nbytes for k in ("plain", "bf16", "i64", "transposed"))
    assert stats.objects == 1
    assert stats.bytes_referenced == referenced
    assert stats.bytes_referenced + stats.bytes_copied == upload.size == len(ours)


@pytest.mark.parametrize(
    "case, make, referenced",
    [
        # A plain contiguous tensor: all its data sent from its storage.
        ("plain", lambda: torch.arange(200_000, dtype=torch.float32), 800_000),
        # Transposed, but its storage is exactly its bytes: torch writes that storage, held.
        (
            "transposed",
            lambda: torch.arange(200_000, dtype=torch.float32).view(400, 500).t(),
            800_000,
        ),
        # A view of a larger storage, and a strided one: torch's loader clones them (copied).
        ("view", lambda: torch.arange(400_000, dtype=torch.float32)[:200_000], 0),
        ("strided", lambda: torch.arange(400_000, dtype=torch.float32).view(400, 1000)[:, ::2], 0),
        ("small", lambda: torch.arange(1000, dtype=torch.float32), 0),  # under the threshold
    ],
)
def test_referenced_and_copied_bytes(gcs, case, make, referenced):
    tensor = make()
    writer = _save(gcs, f"counters/{case}", {"x": tensor})
    stats = writer.save_stats
    (upload,) = writer.uploads
    assert stats.bytes_referenced == referenced
    assert stats.bytes_copied == upload.size - referenced
    if referenced == 0:
        assert stats.bytes_copied >= tensor.nbytes
    else:
        assert stats.bytes_copied < 2 * KiB  # the zip records around the storage
    # Records, the storage (referenced or its clone copied), the zip's end; or one segment.
    assert stats.spans == (1 if case == "small" else 3)


def test_byte_io_items_are_copied(gcs):
    writer = _save(gcs, "counters/bytes", {"blob": {"b": bytes(300 * KiB)}, "k": [1, 2]})
    assert writer.save_stats.bytes_referenced == 0
    assert writer.save_stats.bytes_copied == _uploaded_bytes(writer) > 300 * KiB


def test_stream_transforms_are_copied(gcs):
    # torch's ZStandard needs zstandard/pyzstd (not installed here); torch's Rot13 test
    # transform takes the same path: the bytes it writes are new, so they are copied.
    from torch.testing._internal.distributed.checkpoint_utils import Rot13Example

    tensor = torch.arange(200_000, dtype=torch.float32)
    writer = _save(gcs, "counters/rot13", {"x": tensor}, _extensions=[Rot13Example()])
    assert writer.save_stats.bytes_referenced == 0
    assert writer.save_stats.bytes_copied == _uploaded_bytes(writer) > tensor.nbytes


def test_safetensors_blobs_are_copied(gcs):
    tensor = torch.arange(200_000, dtype=torch.float32)
    writer = _save(
        gcs, "counters/st", {"x": tensor}, serialization_format=SerializationFormat.SAFETENSORS
    )
    assert writer.save_stats.bytes_referenced == 0
    assert writer.save_stats.bytes_copied == _uploaded_bytes(writer) > tensor.nbytes


class _FreshTensors(DefaultSavePlanner):
    """Resolves every tensor to a new copy that only torch's loop (and the pipeline) holds."""

    def resolve_data(self, write_item):
        data = super().resolve_data(write_item)
        return data.clone() if isinstance(data, torch.Tensor) else data


def test_a_tensor_only_the_pipeline_holds_is_sent_intact(gcs, tmp_path):
    # torch's loop drops an object's resolved tensors once it goes on to the next object; the
    # pipeline keeps them (and their storages) until that object's upload finished.
    state = {f"t{i}": torch.full((50_000,), float(i)) for i in range(8)}
    url = f"gs://{BUCKET}/fresh"
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint, thread_count=2, object_bytes=1 << 30)
    dcp.save(state, storage_writer=writer, planner=_FreshTensors())
    assert writer.save_stats.bytes_referenced == 8 * 200_000
    target = {k: torch.zeros_like(v) for k, v in state.items()}
    dcp.load(target, storage_reader=GCSStorageReader(url, endpoint=gcs.endpoint))
    assert all(torch.equal(target[k], state[k]) for k in state)


def test_tensors_are_released_after_the_save(gcs):
    tensor = torch.arange(200_000, dtype=torch.float32)
    storage_ref = weakref.ref(tensor.untyped_storage())
    tensor_ref = weakref.ref(tensor)
    writer = _save(gcs, "released", {"x": tensor})
    assert writer.save_stats.bytes_referenced == tensor.nbytes
    del tensor
    gc.collect()
    assert tensor_ref() is None and storage_ref() is None  # the writer keeps none of them


def test_a_tiny_staging_budget_still_references_tensor_bytes(gcs):
    state = {f"t{i}": torch.full((64 * KiB,), float(i)) for i in range(6)}  # 256 KiB each
    writer = _save(gcs, "tiny-budget", state, object_bytes=512 * KiB, staging_bytes=1)
    assert len(writer.uploads) == 3
    assert writer.save_stats.bytes_referenced == 6 * 256 * KiB
    assert writer.save_stats.objects == 3
    for upload in writer.uploads:
        assert upload.crc32c == _crc(gcs.get(BUCKET, upload.object))


def test_the_bytes_io_path_matches(gcs):
    # The objects equal what torch.save into a BytesIO (the previous staging path) produces.
    tensor = torch.arange(100_000, dtype=torch.int64)
    writer = _save(gcs, "bytesio", {"x": tensor})
    (upload,) = writer.uploads
    stored = gcs.get(BUCKET, upload.object)
    buf = io.BytesIO()
    torch.save(tensor, buf)
    assert stored == buf.getvalue()


def _weak_state(n: int) -> tuple[dict, list]:
    state = {f"t{i}": torch.full((100_000,), float(i)) for i in range(n)}
    return state, [weakref.ref(v.untyped_storage()) for v in state.values()]


def test_tensors_are_released_after_a_failed_upload(gcs):
    state, refs = _weak_state(4)
    fault = Fault(kind="status", status=403, count=None, media_only=False, object_glob="failed/__*")
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        writer = GCSStorageWriter(
            f"gs://{BUCKET}/failed", endpoint=proxy.endpoint, thread_count=2, object_bytes=1 << 30
        )
        with pytest.raises(CheckpointException, match="403"):
            dcp.save(state, storage_writer=writer)
        assert proxy.injected_per_fault[0] >= 1
    del state, writer
    gc.collect()
    assert [r() for r in refs] == [None] * 4


class _FailsOnItem(DefaultSavePlanner):
    """Resolves tensors as usual but raises for the item named `t2`."""

    def resolve_data(self, write_item):
        if write_item.index.fqn == "t2":
            raise RuntimeError("planner refused t2")
        return super().resolve_data(write_item)


def test_tensors_are_released_after_a_serializer_failure(gcs):
    state, refs = _weak_state(4)
    writer = GCSStorageWriter(f"gs://{BUCKET}/refused", endpoint=gcs.endpoint, thread_count=4)
    with pytest.raises(CheckpointException, match="planner refused t2"):
        dcp.save(state, storage_writer=writer, planner=_FailsOnItem())
    del state, writer
    gc.collect()
    assert [r() for r in refs] == [None] * 4
    assert ObjectStore(gcs.endpoint).list(BUCKET, "refused/") == []  # the rank deleted its objects


def _every_dtype_state() -> dict:
    gen = torch.Generator().manual_seed(11)
    state: dict = {}
    dtypes = [
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
        torch.uint16,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    ]
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        raw = torch.randint(0, 256, (6 * 40 * dtype.itemsize,), dtype=torch.uint8, generator=gen)
        base = raw.view(dtype).view(6, 40)
        if dtype == torch.bool:
            base = base.view(torch.uint8).bitwise_and(1).bool()
        state[f"{name}.plain"] = base
        state[f"{name}.t"] = base.t()
        state[f"{name}.rows"] = base[1:4]  # a view of a larger storage (torch's loader clones)
        state[f"{name}.cols"] = base[:, 3:30:3]
        state[f"{name}.scalar"] = base[2, 5].clone()
        state[f"{name}.empty"] = base[:0]
    state["big"] = torch.randn(300, 257, generator=gen)  # referenced from tensor memory
    state["meta"] = {"step": 5}
    return state


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_every_dtype_and_view_equals_torchs_writer_and_loads_everywhere(gcs, tmp_path):
    # Our archives (gcsckpt.dcp.save.archive_writer) against torch.save's: the whole object equals
    # torch's FileSystemWriter's file, loads with its FileSystemReader and with ours, bit exact.
    assert archive_writer.current_writer() is not None  # the save below writes our archives
    state = _every_dtype_state()
    stock_dir = tmp_path / "stock"
    dcp.save(state, storage_writer=dcp.FileSystemWriter(stock_dir, thread_count=1))
    (stock_file,) = stock_dir.glob("*.distcp")
    writer = _save(gcs, "every-dtype", state)
    (upload,) = writer.uploads
    ours = gcs.get(BUCKET, upload.object)
    assert ours == stock_file.read_bytes()

    ours_dir = tmp_path / "ours"
    ours_dir.mkdir()
    for name in ObjectStore(gcs.endpoint).list(BUCKET, "every-dtype/"):
        (ours_dir / name.rsplit("/", 1)[1]).write_bytes(gcs.get(BUCKET, name))
    readers = [
        dcp.FileSystemReader(ours_dir),
        GCSStorageReader(f"gs://{BUCKET}/every-dtype", endpoint=gcs.endpoint),
    ]
    for reader in readers:
        target = {k: torch.zeros_like(v) for k, v in state.items() if isinstance(v, torch.Tensor)}
        target["meta"] = {"step": 0}
        dcp.load(target, storage_reader=reader)
        assert target["meta"] == {"step": 5}
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                assert target[key].dtype == value.dtype and target[key].shape == value.shape
                assert _bits(target[key]) == _bits(value), (type(reader).__name__, key)
