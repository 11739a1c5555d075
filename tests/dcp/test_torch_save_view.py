"""gcsckpt.dcp.torch_save_view: tensors read straight out of a torch.save archive in an item range
window (a view where aligned, a copy otherwise; crafted archives refused)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import pytest
import torch

from gcsckpt.dcp.torch_save_view import tensor_from_torch_save


def _archive(value) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _placed(raw: bytes, shift: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """(window, archive view at `shift`) so tests can check the result aliases the window."""
    window = torch.zeros(len(raw) + shift + 64, dtype=torch.uint8)
    window[shift : shift + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return window, window[shift : shift + len(raw)]


CASES = [
    torch.randn(64, 8).to(torch.bfloat16),
    torch.arange(10),
    torch.randn(5, 7).t(),
    torch.randn(6, 4)[1:3].clone(),
    torch.empty(0, 3),
    torch.tensor(3.5),
    torch.tensor([True, False]),
    torch.randn(3, 3, dtype=torch.complex64),
    torch.randn(4).to(torch.float8_e4m3fn),
    torch.randint(0, 255, (17,), dtype=torch.uint8),
]


@pytest.mark.parametrize("value", CASES, ids=lambda t: f"{t.dtype}{tuple(t.shape)}")
def test_torch_save_view_matches_torch_load(value):
    window, archive = _placed(_archive(value))
    out = tensor_from_torch_save(archive)
    assert out.dtype == value.dtype and out.shape == value.shape and out.stride() == value.stride()
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    assert torch.equal(as_bytes(out), as_bytes(value))


def test_fast_path_is_a_view_of_the_window():
    value = torch.randn(32, 4)
    window, archive = _placed(_archive(value))
    out = tensor_from_torch_save(archive)
    assert out.untyped_storage().data_ptr() == window.untyped_storage().data_ptr()


def test_misaligned_archive_falls_back_to_a_copy():
    value = torch.randn(9, dtype=torch.float64)
    window, archive = _placed(_archive(value), shift=3)
    out = tensor_from_torch_save(archive)
    assert torch.equal(out, value)
    assert out.untyped_storage().data_ptr() != window.untyped_storage().data_ptr()


def test_shared_storage_view_keeps_its_offset():
    base = torch.arange(20, dtype=torch.int32)
    value = base[5:12]  # torch.save writes the whole 20-element storage with offset 5
    out = tensor_from_torch_save(_placed(_archive(value))[1])
    assert torch.equal(out, value)


def test_non_tensor_archive_is_refused():
    with pytest.raises(ValueError, match="not a tensor"):
        tensor_from_torch_save(_placed(_archive({"a": 1}))[1])


def test_garbage_is_refused():
    with pytest.raises(ValueError, match="torch.save archive"):
        tensor_from_torch_save(torch.randint(0, 255, (500,), dtype=torch.uint8))


def test_crafted_view_outside_storage_is_refused():
    raw = bytearray(_archive(torch.arange(4, dtype=torch.int64)))
    # Point size 4 at storage offset 2 (pickle BININT1 K\x00 -> K\x02): runs past 4 elements.
    at = raw.index(b"K\x00K\x04\x85")
    raw[at : at + 2] = b"K\x02"
    with pytest.raises(ValueError, match="runs past"):
        tensor_from_torch_save(_placed(bytes(raw))[1])


def _zip64(records: list[tuple[str, bytes]]) -> bytes:
    """A stored zip whose central directory uses zip64 fields throughout (as archives > 4 GiB
    do), with each record's data 64-byte aligned like torch's writer."""
    out, central = bytearray(), bytearray()
    for name, data in records:
        offset = len(out)
        pad = (-(offset + 30 + len(name) + 4)) % 64
        extra = struct.pack("<HH", 0xCAFE, pad) + b"\0" * pad
        out += struct.pack(
            "<IHHHHHIIIHH",
            0x04034B50,
            45,
            0,
            0,
            0,
            0,
            zlib.crc32(data),
            len(data),
            len(data),
            len(name),
            len(extra),
        )
        out += name.encode() + extra + data
        z64 = struct.pack("<HHQQQ", 1, 24, len(data), len(data), offset)
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            45,
            45,
            0,
            0,
            0,
            0,
            zlib.crc32(data),
            0xFFFFFFFF,
            0xFFFFFFFF,
            len(name),
            len(z64),
            0,
            0,
            0,
            0,
            0xFFFFFFFF,
        )
        central += name.encode() + z64
    cd_offset = len(out)
    out += central
    eocd64 = len(out)
    n = len(records)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out)


def test_zip64_archive():
    value = torch.randn(12, 5)
    with zipfile.ZipFile(io.BytesIO(_archive(value))) as zf:
        records = [(info.filename, zf.read(info)) for info in zf.infolist()]
    raw = _zip64(records)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:  # a valid zip by Python's reader too
        assert zf.testzip() is None
    out = tensor_from_torch_save(_placed(raw)[1])
    assert torch.equal(out, value)
