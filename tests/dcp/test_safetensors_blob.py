"""gcsckpt.dcp.safetensors_blob: headers written and parsed as the safetensors library does."""

from __future__ import annotations

import struct

import pytest
import safetensors.torch
import torch

from gcsckpt.dcp.safetensors_blob import encode_header, header_length, parse_header


def test_encode_header_reads_back_with_safetensors():
    tensors = {
        "a.w": torch.randn(3, 4).to(torch.bfloat16),
        "b": torch.arange(5, dtype=torch.int64),
        "e": torch.empty(0, 2),
        "s": torch.tensor(1.5),
    }
    header = encode_header([(k, v.dtype, tuple(v.shape)) for k, v in tensors.items()], {"k": "v"})
    assert header_length(header) == len(header) and len(header) % 8 == 0
    blob = header + b"".join(
        v.reshape(-1).view(torch.uint8).numpy().tobytes() for v in tensors.values()
    )
    loaded = safetensors.torch.load(blob)
    for k, v in tensors.items():
        assert torch.equal(loaded[k], v)
    parsed = parse_header(blob)
    assert parsed.metadata == {"k": "v"}
    assert parsed.tensors["b"].end - parsed.tensors["b"].begin == 40


def test_parse_header_of_library_output():
    blob = safetensors.torch.save({"x": torch.ones(2, 3)}, metadata={"m": "1"})
    parsed = parse_header(blob)
    entry = parsed.tensors["x"]
    assert entry.dtype == torch.float32 and entry.shape == (2, 3)
    assert torch.equal(
        torch.frombuffer(bytearray(blob[entry.begin : entry.end]), dtype=torch.float32),
        torch.ones(6),
    )


@pytest.mark.parametrize(
    "blob",
    [
        b"\x01\x00",
        struct.pack("<Q", 10**12) + b"{}",
        struct.pack("<Q", 4) + b"nope",
        struct.pack("<Q", 60) + b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}    ',
        struct.pack("<Q", 56) + b'{"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}}',
    ],
)
def test_bad_safetensors_headers(blob):
    with pytest.raises(ValueError, match="safetensors"):
        parse_header(blob)


def test_encode_header_refuses_duplicates():
    with pytest.raises(ValueError, match="twice"):
        encode_header([("a", torch.float32, (1,)), ("a", torch.float32, (1,))], {})
