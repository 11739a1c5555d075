"""The safetensors blob inside a DCP SAFETENSORS `.distcp` object: header encode and parse.

Torch 2.13's `FileSystemWriter(serialization_format=SAFETENSORS)` writes each object as: the BYTE_IO
items back to back, then one safetensors file holding that object's tensors keyed by FQN. Every
tensor item's `_StorageInfo.offset` is the start of that blob (nothing was written for it yet) and
its `length` is the tensor's byte size; where the bytes sit is only in the blob header. The
safetensors format (https://github.com/huggingface/safetensors#format): u64 little-endian header
length N, N bytes of JSON (name -> dtype, shape, data_offsets relative to the end of the header,
plus an optional "__metadata__" map of str -> str), then the tensor bytes back to back. Headers are
padded with spaces so the data starts 8-byte aligned.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch

DTYPE_BY_NAME: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "C64": torch.complex64,
}
NAME_BY_DTYPE = {dtype: name for name, dtype in DTYPE_BY_NAME.items()}

# Bound on a header we are willing to parse (safetensors itself refuses headers > 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class BlobTensor:
    """One tensor entry of a safetensors header; `begin`/`end` are absolute blob offsets."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class BlobHeader:
    """Parsed header: `data_start` = 8 + N; `tensors` by name; `metadata` = "__metadata__"."""

    data_start: int
    tensors: dict[str, BlobTensor]
    metadata: dict[str, str]


def header_length(prefix: bytes | memoryview) -> int:
    """Returns 8 + N (bytes from blob start to tensor data) from the blob's first 8 bytes.

    Raises:
        ValueError: fewer than 8 bytes, or N above MAX_HEADER_BYTES (not a safetensors blob).
    """
    if len(prefix) < 8:
        raise ValueError(f"safetensors blob is {len(prefix)} bytes, shorter than its 8-byte size")
    (n,) = struct.unpack_from("<Q", prefix, 0)
    if n < 2 or n > MAX_HEADER_BYTES:
        raise ValueError(f"safetensors header length {n} is implausible (not a safetensors blob)")
    return 8 + n


def parse_header(prefix: bytes | memoryview) -> BlobHeader:
    """Parses the header from the blob's first `header_length(prefix)` (or more) bytes.

    Raises:
        ValueError: truncated, not JSON, unknown dtype, or offsets that disagree with shape/dtype.
    """
    data_start = header_length(prefix)
    if len(prefix) < data_start:
        raise ValueError(f"safetensors header needs {data_start} bytes, got {len(prefix)}")
    try:
        raw = json.loads(bytes(prefix[8:data_start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"safetensors header is not JSON ({e})") from e
    if not isinstance(raw, dict):
        raise ValueError("safetensors header is not a JSON object")
    metadata = raw.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in raw.items():
        try:
            dtype = DTYPE_BY_NAME[entry["dtype"]]
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(v) for v in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"safetensors header entry {name!r} is malformed ({e!r})") from e
        numel = 1
        for d in shape:
            numel *= d
        if begin < 0 or end - begin != numel * dtype.itemsize:
            raise ValueError(
                f"safetensors entry {name!r}: data_offsets [{begin}, {end}] do not hold"
                f" {shape} x {entry['dtype']}"
            )
        tensors[name] = BlobTensor(dtype, shape, data_start + begin, data_start + end)
    return BlobHeader(data_start, tensors, metadata)


def encode_header(
    entries: Sequence[tuple[str, torch.dtype, Sequence[int]]], metadata: dict
) -> bytes:
    """Builds `u64 N || JSON` for tensors laid out back to back in the order given.

    Args:
        entries: (name, dtype, shape) per tensor, in data order.
        metadata: the "__metadata__" map (str -> str).

    Returns:
        the header bytes; tensor data must follow immediately, in `entries` order.

    Raises:
        ValueError: a dtype safetensors cannot name, or a duplicate name.
    """
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape in entries:
        if name in header:
            raise ValueError(f"safetensors blob would hold {name!r} twice")
        if dtype not in NAME_BY_DTYPE:
            raise ValueError(f"safetensors cannot store dtype {dtype} (tensor {name!r})")
        numel = 1
        for d in shape:
            numel *= d
        end = offset + numel * dtype.itemsize
        header[name] = {
            "dtype": NAME_BY_DTYPE[dtype],
            "shape": list(shape),
            "data_offsets": [offset, end],
        }
        offset = end
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body
