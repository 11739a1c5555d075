"""Turning one `torch.save` archive of a tensor (a DCP TORCH_SAVE item) into a tensor, fast.

DCP's TORCH_SAVE items are each a `torch.save(tensor)` zip archive: `data.pkl` (a small pickle that
rebuilds one tensor from one storage), `byteorder`, `data/<key>` (the raw storage bytes, stored
uncompressed and 64-byte aligned) and a few version records. `torch.load` of each such archive
dominates a load of thousands of small tensor items per rank (docs/measurements.md, "Per-item
costs on the load path"). The fast path reads the zip central directory with `struct`, unpickles
`data.pkl` with an allow-list of exactly the four globals a plain tensor needs, and returns a view
of the storage bytes in place. Anything unexpected (other globals, big-endian, compression) falls
back to `torch.load(..., weights_only=True)`, so the fast path never admits more than torch would.
Zip layout: PKWARE APPNOTE.TXT 6.3 (sections 4.3.7, 4.3.12, 4.3.14-16, 4.5.3).
"""

from __future__ import annotations

import io
import pickle
import struct
from collections import OrderedDict
from typing import Any

import torch
from torch.storage import _get_dtype_from_pickle_storage_type

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_DESCRIPTOR = b"PK\x07\x08"
_CENTRAL = 0x02014B50
_LOCAL = 0x04034B50
_CENTRAL_FIXED = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
_LOCAL_FIXED = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
_QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


class _NotPlainTensor(Exception):
    """The archive is not one plain little-endian tensor; use torch.load instead."""


def tensor_from_torch_save(archive: torch.Tensor) -> torch.Tensor:
    """Returns the tensor saved in `archive`.

    Args:
        archive: 1-D contiguous uint8 CPU tensor holding exactly one `torch.save` zip archive.

    Returns:
        the saved tensor (any dtype/shape/strides). On the fast path it is a view into `archive`'s
        memory (no copy: keep `archive` alive and unchanged while using it); otherwise a fresh
        tensor from `torch.load(weights_only=True, map_location="cpu")`.

    Raises:
        ValueError: the archive is unreadable or does not hold a tensor (message says why).
    """
    try:
        return _fast_view(archive)
    except _NotPlainTensor:
        pass
    try:
        loaded = torch.load(
            io.BytesIO(memoryview(archive.numpy())), map_location="cpu", weights_only=True
        )
    except Exception as e:
        raise ValueError(f"not a readable torch.save archive ({e!r})") from e
    if not isinstance(loaded, torch.Tensor):
        raise ValueError(f"torch.save archive holds {type(loaded).__name__}, not a tensor")
    return loaded


def _fast_view(archive: torch.Tensor) -> torch.Tensor:
    span, rebuilt = plain_storage(archive.numpy())
    dtype, _, numel = rebuilt.storage
    if numel == 0:
        return torch.empty(rebuilt.size, dtype=dtype)
    if (archive.storage_offset() + span[0]) % dtype.itemsize:
        raise _NotPlainTensor  # unaligned storage: let torch.load copy it
    base = archive[span[0] : span[1]].view(dtype)
    # as_strided's offset counts from the start of the whole underlying storage, not the view.
    return base.as_strided(
        rebuilt.size, rebuilt.stride, base.storage_offset() + rebuilt.storage_offset
    )


def plain_storage(data: Any) -> tuple[tuple[int, int], _Rebuilt]:
    """Where the one storage of a plain-tensor archive lies, and the view data.pkl builds.

    Args:
        data: the archive (numpy uint8 array or bytes-like), whole or with only the bytes of
            its storage record's data left unfilled.

    Returns:
        ((start, end) of the storage bytes in `data`, the rebuilt view: `.storage` is
        (dtype, record key, element count), `.size`, `.stride`, `.storage_offset` in elements).

    Raises:
        ValueError: unreadable, or the view runs outside its storage. _NotPlainTensor: not one
            plain little-endian tensor.
    """
    entries = archive_directory(data)
    pkl_name = next((n for n in entries if n.endswith("/data.pkl")), None)
    if pkl_name is None:
        raise _NotPlainTensor
    root = pkl_name[: -len("data.pkl")]
    order = entries.get(root + "byteorder")
    if order is not None:
        start, end = record_span(data, order)
        if bytes(data[start:end]) != b"little":
            raise _NotPlainTensor
    start, end = record_span(data, entries[pkl_name])
    rebuilt = _PlainTensorUnpickler(io.BytesIO(memoryview(data[start:end]))).load()
    if not isinstance(rebuilt, _Rebuilt):
        raise _NotPlainTensor
    dtype, key, numel = rebuilt.storage
    entry = entries.get(f"{root}data/{key}")
    if entry is None:
        raise ValueError(f"torch.save archive lacks storage record data/{key}")
    span = record_span(data, entry)
    itemsize = dtype.itemsize
    if span[1] - span[0] != numel * itemsize:
        raise ValueError(
            f"torch.save storage data/{key} holds {span[1] - span[0]} bytes, expected"
            f" {numel} x {itemsize}"
        )
    _check_view_fits(rebuilt, numel)
    return span, rebuilt


def varying_spans(data: Any) -> list[tuple[int, int]]:
    """(start, end) byte spans of `data` (a whole archive) that differ between two `torch.save`
    archives of tensors of one dtype, shape and strides: every CRC-32 (local headers, data
    descriptors, central directory) and the `.data/serialization_id` record's bytes.

    Raises:
        ValueError / _NotPlainTensor: as `archive_directory`.
    """
    spans = []
    for pos, name, local_offset, length in _central_records(data):
        spans.append((pos + 16, pos + 20))  # central directory CRC-32
        spans.append((local_offset + 14, local_offset + 18))  # local header CRC-32
        start, end = record_span(data, (local_offset, length))
        if bytes(data[end : end + 4]) == _DESCRIPTOR:
            spans.append((end + 4, end + 8))  # data descriptor CRC-32
        if name.endswith("/.data/serialization_id"):
            spans.append((start, end))
    return spans


def _check_view_fits(rebuilt: _Rebuilt, numel: int) -> None:
    """Keeps a crafted data.pkl from viewing bytes outside its own storage record."""
    size, stride, offset = rebuilt.size, rebuilt.stride, rebuilt.storage_offset
    if (
        len(size) != len(stride)
        or not all(type(v) is int and v >= 0 for v in (*size, *stride))
        or type(offset) is not int
        or offset < 0
    ):
        raise ValueError(f"torch.save tensor has a bad view size={size} stride={stride}")
    if 0 in size:
        return
    last = offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
    if last >= numel:
        raise ValueError(
            f"torch.save tensor view size={size} stride={stride} offset={offset} runs past its"
            f" storage of {numel} elements"
        )


def archive_directory(data: Any) -> dict[str, tuple[int, int]]:
    """Reads a `torch.save` zip archive's central directory: record name -> (local header
    offset, size in bytes). Pass an entry to `record_span` for the record's bytes.

    Args:
        data: the archive (numpy uint8 array, bytes, or anything `struct` and slicing accept).

    Raises:
        ValueError: not a readable zip. _NotPlainTensor: a compressed record (torch never
            compresses, but other zip writers might).
    """
    return {name: (local, length) for _, name, local, length in _central_records(data)}


def _central_records(data: Any) -> list[tuple[int, str, int, int]]:
    """(central entry position, name, local header offset, size) of each record."""
    size = len(data)
    # torch writes no archive comment, so the end record usually sits in the last 22 bytes.
    if size >= 22 and bytes(data[size - 22 : size - 18]) == _EOCD:
        tail_start, eocd = size - 22, 0
        tail = bytes(data[tail_start:])
    else:
        tail_start = max(0, size - (1 << 16) - 22)
        tail = bytes(data[tail_start:])
        eocd = tail.rfind(_EOCD)
        if eocd < 0 or len(tail) - eocd < 22:
            raise ValueError("torch.save archive has no zip end-of-central-directory record")
    count, cd_size, cd_offset = struct.unpack_from("<HII", tail, eocd + 10)
    if count == 0xFFFF or cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
        count, cd_offset = _zip64_directory(data, tail_start + eocd)
    return _records(data, count, cd_offset)


def _records(data: Any, count: int, cd_offset: int) -> list[tuple[int, str, int, int]]:
    size = len(data)
    records = []
    pos = cd_offset
    for _ in range(count):
        if pos + 46 > size:
            raise ValueError("torch.save archive central directory is truncated")
        fields = _CENTRAL_FIXED.unpack_from(data, pos)
        if fields[0] != _CENTRAL:
            raise ValueError(f"torch.save archive has a bad central directory entry at {pos}")
        method, csize, usize, name_len, extra_len, comment_len = fields[4], *fields[8:13]
        local_offset = fields[16]
        name = bytes(data[pos + 46 : pos + 46 + name_len]).decode("utf-8", "replace")
        if 0xFFFFFFFF in (csize, usize, local_offset):
            extra = bytes(data[pos + 46 + name_len : pos + 46 + name_len + extra_len])
            usize, csize, local_offset = _zip64_sizes(extra, usize, csize, local_offset)
        if method != 0 or csize != usize:
            raise _NotPlainTensor
        records.append((pos, name, local_offset, usize))
        pos += 46 + name_len + extra_len + comment_len
    return records


def first_record(data: Any) -> tuple[str, int]:
    """(name, data start) of an archive's first record, from its local header alone (its size
    is unknown there: torch writes sizes after the data). torch's first record is data.pkl.

    Raises:
        ValueError: no local header at byte 0, or a compressed record.
    """
    fields = _LOCAL_FIXED.unpack_from(data, 0)
    if fields[0] != _LOCAL or fields[3] != 0:
        raise ValueError("torch.save archive does not start with a stored record")
    name_len, extra_len = fields[9], fields[10]
    return bytes(data[30 : 30 + name_len]).decode("utf-8", "replace"), 30 + name_len + extra_len


def record_span(data: Any, entry: tuple[int, int]) -> tuple[int, int]:
    """(start, end) of a record's bytes in `data`, from its `archive_directory` entry.

    Raises:
        ValueError: a bad local header, or a record running past the archive's end.
    """
    local_offset, length = entry
    start = _local_data_start(data, local_offset, len(data))
    if start + length > len(data):
        raise ValueError(f"torch.save archive record at {local_offset} runs past the archive end")
    return start, start + length


def _local_data_start(data: Any, local_offset: int, size: int) -> int:
    if local_offset + 30 > size:
        raise ValueError("torch.save archive local header is truncated")
    fields = _LOCAL_FIXED.unpack_from(data, local_offset)
    if fields[0] != _LOCAL:
        raise ValueError(f"torch.save archive has a bad local header at {local_offset}")
    return local_offset + 30 + fields[9] + fields[10]


def _zip64_directory(data: Any, eocd_pos: int) -> tuple[int, int]:
    locator = eocd_pos - 20
    if locator < 0 or bytes(data[locator : locator + 4]) != _EOCD64_LOCATOR:
        raise ValueError("torch.save archive lacks its zip64 locator")
    (eocd64,) = struct.unpack_from("<Q", data, locator + 8)
    if bytes(data[eocd64 : eocd64 + 4]) != b"PK\x06\x06":
        raise ValueError("torch.save archive has a bad zip64 end record")
    count, _, cd_offset = struct.unpack_from("<QQQ", data, eocd64 + 32)
    return count, cd_offset


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 0x0001:
            values = iter(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            usize = next(values) if usize == 0xFFFFFFFF else usize
            csize = next(values) if csize == 0xFFFFFFFF else csize
            offset = next(values) if offset == 0xFFFFFFFF else offset
            return usize, csize, offset
        pos += 4 + length
    raise ValueError("torch.save archive lacks a zip64 extra field")


class _Rebuilt:
    __slots__ = ("storage", "storage_offset", "size", "stride")

    def __init__(self, storage, storage_offset, size, stride) -> None:
        self.storage = storage
        self.storage_offset = storage_offset
        self.size = size
        self.stride = stride


class _StorageType:
    __slots__ = ("dtype",)

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, meta=None):
    if not isinstance(storage, tuple) or hooks or meta:
        raise _NotPlainTensor
    return _Rebuilt(storage, storage_offset, tuple(size), tuple(stride))


class _PlainTensorUnpickler(pickle.Unpickler):
    """Admits only what `torch.save(plain_tensor)` writes; everything else -> torch.load."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name.endswith("Storage"):
            try:
                return _StorageType(_get_dtype_from_pickle_storage_type(name))
            except KeyError:
                raise _NotPlainTensor from None
        raise _NotPlainTensor

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _NotPlainTensor
        storage_type, key, _location, numel = pid[1:]
        if not isinstance(storage_type, _StorageType) or not isinstance(numel, int):
            raise _NotPlainTensor
        if storage_type.dtype in _QUANTIZED:
            raise _NotPlainTensor
        return (storage_type.dtype, str(key), numel)
