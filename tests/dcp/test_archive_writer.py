"""TORCH_SAVE archives written without torch.save (`gcsckpt.dcp.save.archive_writer`): equal to
`torch.save`'s byte for byte (serialization id included: torch derives it from the record names
and CRC-32s) across dtypes, shapes, strides, views of larger storages, storage offsets, 0-d and
zero-size tensors, requires_grad and conj/neg bits; read by torch.load and by our fast loader;
the storage written as one write of its own memory; what the writer leaves to torch.save; and
the per-object loop equal to torch's `_write_files_from_queue` (bytes and WriteResults)."""

from __future__ import annotations

import io
import queue

import numpy as np
import pytest
import torch
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import (
    SerializationFormat,
    _StorageWriterTransforms,
    _write_files_from_queue,
)
from torch.distributed.checkpoint.metadata import Metadata

from gcsckpt.dcp.load.archives import varying_spans
from gcsckpt.dcp.save import archive_writer
from gcsckpt.dcp.save.archive_writer import ArchiveWriter, current_writer, storage_bytes
from gcsckpt.dcp.save.serialize import write_objects
from gcsckpt.dcp.torch_save_view import tensor_from_torch_save

_FLOAT8 = [
    getattr(torch, name)
    for name in (
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    )
    if hasattr(torch, name)
]
DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.complex64,
    torch.complex128,
    torch.complex32,
    *_FLOAT8,
]


def _values(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bytes as a tensor of ``dtype`` (any bit pattern: NaNs too; bools 0/1)."""
    gen = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    raw = torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def _torch_save(tensor: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(tensor, buf)
    return buf.getvalue()


def _ours(tensor: torch.Tensor, writer: ArchiveWriter | None = None) -> bytes:
    writer = writer or current_writer()
    buffers = writer.archive(tensor)
    assert buffers is not None, "the writer left this tensor to torch.save"
    return b"".join(bytes(memoryview(b)) for b in buffers)


def _check(tensor: torch.Tensor, loads: bool = True) -> bytes:
    """Our archive of ``tensor``, asserted equal to torch.save's and read back by torch (unless
    ``loads`` is False: torch cannot read its own archive of that tensor)."""
    ours = _ours(tensor)
    theirs = _torch_save(tensor)
    if ours != theirs:
        masked = _masked(ours) == _masked(theirs) if len(ours) == len(theirs) else False
        first = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None
        )
        pytest.fail(
            f"archive differs from torch.save: {len(ours)} vs {len(theirs)} bytes, first"
            f" difference at {first}, equal outside CRC-32s and id: {masked}"
        )
    if loads:
        _assert_same(torch.load(io.BytesIO(ours), weights_only=True), tensor)
    return ours


def _masked(archive: bytes) -> bytes:
    data = bytearray(archive)
    for a, b in varying_spans(np.frombuffer(archive, np.uint8)):
        data[a:b] = bytes(b - a)
    return bytes(data)


def _assert_same(loaded: torch.Tensor, tensor: torch.Tensor) -> None:
    assert loaded.dtype == tensor.dtype and loaded.shape == tensor.shape
    assert loaded.stride() == tensor.stride()
    assert loaded.storage_offset() == tensor.storage_offset()
    assert loaded.requires_grad == tensor.requires_grad
    assert loaded.is_conj() == tensor.is_conj() and loaded.is_neg() == tensor.is_neg()
    # The whole storage, bit for bit (NaNs included).
    assert bytes(storage_bytes(loaded)) == bytes(storage_bytes(tensor))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_equals_torch_save(dtype):
    for shape in [(), (0,), (0, 3), (1,), (7,), (3, 5), (2, 3, 4)]:
        _check(_values(shape, dtype))
    base = _values((6, 10), dtype, seed=1)
    _check(base.t())  # transposed: its storage is its bytes
    _check(base[:, ::3])  # strided view of a larger storage
    _check(base[2:5, 1:9])  # a view with a storage offset
    _check(base.reshape(-1)[17:])  # 1-d, offset, to the storage's end
    _check(base.reshape(-1)[7:7])  # empty view of a non-empty storage


@pytest.mark.parametrize(
    "make",
    [
        lambda: _values((1,), torch.float32),  # size and stride equal tuples
        lambda: _values((300, 2), torch.float32),  # ints over one byte in the pickle
        lambda: _values((70_000, 1), torch.int8)[1:],  # over two bytes, an offset
        lambda: _values((1, 1, 1, 1, 1, 1), torch.float16),
        lambda: torch.zeros(4, 1).expand(4, 300),  # stride 0
        lambda: _values((5, 4), torch.float32).unsqueeze(1).transpose(0, 2),
        lambda: _values((3, 4), torch.float32).requires_grad_(),
        lambda: _values((3, 4), torch.complex64).conj(),
        lambda: _values((3, 4), torch.float32)._neg_view(),
        lambda: torch.empty(0, 5).t(),
        lambda: _values((1 << 20,), torch.float32, seed=3),  # 4 MiB
    ],
    ids=[
        "one",
        "two-byte-ints",
        "four-byte-ints",
        "six-dims",
        "expanded",
        "permuted",
        "requires-grad",
        "conj",
        "neg",
        "empty-transposed",
        "large",
    ],
)
def test_layouts_equal_torch_save(make):
    _check(make())


def test_a_storage_of_a_partial_element_equals_torch_save():
    # 7 bytes seen as int32: torch pickles 1 element and writes all 7 bytes (and then cannot
    # load it: "record size (7 bytes) does not match"); the bytes are still torch's.
    _check(torch.arange(7, dtype=torch.uint8)[:4].view(torch.int32), loads=False)


def test_a_template_serves_new_bytes_of_the_same_layout():
    writer = current_writer()
    for seed in range(4):  # one template, four storages: CRC-32s and ids filled per item
        tensor = _values((33, 9), torch.bfloat16, seed=seed)
        assert _ours(tensor, writer) == _torch_save(tensor)
    first = _ours(_values((33, 9), torch.bfloat16, seed=0), writer)
    second = _ours(_values((33, 9), torch.bfloat16, seed=1), writer)
    assert first != second and len(first) == len(second)


def test_our_fast_loader_reads_our_archives():
    base = torch.arange(1200, dtype=torch.float32).view(40, 30)
    for tensor in (base, base[5:, ::2], torch.tensor(2.5), torch.empty(0, 3)):
        archive = torch.frombuffer(bytearray(_ours(tensor)), dtype=torch.uint8)
        loaded = tensor_from_torch_save(archive)
        assert torch.equal(loaded, tensor)
        assert loaded.stride() == tensor.stride()


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[tuple[int, int]] = []
        self.data = bytearray()

    def write(self, data) -> int:
        view = memoryview(data)
        address = np.frombuffer(view, np.uint8).__array_interface__["data"][0]
        self.writes.append((address if view.nbytes else 0, view.nbytes))
        self.data += view
        return view.nbytes

    def flush(self) -> None:
        pass


def test_the_storage_is_one_write_of_its_own_memory():
    base = torch.arange(100_000, dtype=torch.float32)
    tensor = base[10:]  # a view: the whole storage is written, in place
    rec = _Recorder()
    current_writer().write(rec, tensor)
    storage = tensor.untyped_storage()
    assert (storage.data_ptr(), storage.nbytes()) in rec.writes
    assert len(rec.writes) == 3  # head, storage, tail
    assert bytes(rec.data) == _torch_save(tensor)


class _Sub(torch.Tensor):
    pass


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.Parameter(torch.ones(3)),
        lambda: torch.ones(3).as_subclass(_Sub),
        lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8),
        lambda: torch.ones(3, 3).to_sparse(),
    ],
    ids=["parameter", "subclass", "quantized", "sparse"],
)
def test_what_the_writer_does_not_model_goes_through_torch_save(make):
    tensor = make()
    writer = current_writer()
    assert writer.archive(tensor) is None
    rec = _Recorder()
    writer.write(rec, tensor)
    loaded = torch.load(io.BytesIO(bytes(rec.data)), weights_only=False)
    assert type(loaded) is type(tensor)


def test_a_tensor_with_attributes_goes_through_torch_save():
    tensor = torch.ones(3)
    tensor.note = "kept"
    assert current_writer().archive(tensor) is None


def test_no_writer_without_crc32():
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        assert current_writer() is None
    finally:
        config.save.compute_crc32 = before
    assert current_writer() is not None


def test_another_alignment_is_probed_and_matched():
    from torch.utils.serialization import config

    before = config.save.storage_alignment
    config.save.storage_alignment = 256
    try:
        writer = current_writer()
        assert writer is not None and writer.alignment == 256
        tensor = _values((9, 7), torch.float64)
        assert _ours(tensor, writer) == _torch_save(tensor)
    finally:
        config.save.storage_alignment = before


def test_a_layout_that_differs_from_torch_turns_the_writer_off(monkeypatch):
    monkeypatch.setattr(archive_writer, "_FORMAT_VERSION", b"9\n")
    assert archive_writer._probe(64) is None


def _items(state: dict) -> tuple[DefaultSavePlanner, list]:
    planner = DefaultSavePlanner()
    planner.set_up_planner(state, Metadata({}), is_coordinator=True)
    plan = planner.create_local_plan()
    return planner, plan.items


def _mixed_state() -> dict:
    base = _values((64, 48), torch.float32, seed=5)
    return {
        "a": _values((128, 64), torch.bfloat16, seed=1),
        "b": base[3:40],  # a view: torch's loader clones it
        "c": base.t(),
        "d": torch.tensor(3, dtype=torch.int64),
        "e": torch.empty(0, 8),
        "f": _values((10_000,), torch.uint8, seed=2),
        "g": _values((4, 4), torch.complex64, seed=3),
        "meta": {"step": 9, "blob": bytes(range(256))},  # BYTE_IO
    }


def _run(loop, state: dict) -> tuple[dict, list]:
    planner, items = _items(state)
    files: queue.Queue = queue.Queue()
    half = len(items) // 2
    files.put(("o0", "o0", items[:half]))
    files.put(("o1", "o1", items[half:]))
    results: queue.Queue = queue.Queue()
    written: dict[str, bytes] = {}

    class _Stream(io.BytesIO):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def close(self) -> None:
            if not self.closed:
                written[self.name] = self.getvalue()
            super().close()

    def create_stream(name, mode):
        return _Stream(name)

    loop(create_stream, files, results, planner)
    out = []
    while not results.empty():
        out += results.get_nowait()
    return written, sorted(out, key=lambda r: str(r.index))


def test_the_object_loop_equals_torchs():
    transforms = _StorageWriterTransforms()
    fmt = SerializationFormat.TORCH_SAVE

    def ours(create, files, results, planner):
        write_objects(create, files, results, planner, transforms, 0, fmt)

    def theirs(create, files, results, planner):
        _write_files_from_queue(create, files, results, planner, transforms, 0, False, 1, fmt)

    our_objects, our_results = _run(ours, _mixed_state())
    their_objects, their_results = _run(theirs, _mixed_state())
    assert our_objects == their_objects
    assert our_results == their_results
    assert len(our_results) == 9
