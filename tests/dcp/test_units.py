"""Unit tests of gcsckpt.dcp pieces that need no endpoint: ids and paths, the restricted
metadata unpickler, the torch.save fast path, safetensors headers and range planning."""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
import zlib

import pytest
import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import SerializationFormat, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata

from gcsckpt.dcp import GCSStorageWriter, UnsafeMetadataError
from gcsckpt.dcp.load.fetch import ALIGN, Fetch, FetchKind
from gcsckpt.dcp.load.plan import make_windows
from gcsckpt.dcp.load.regions import contiguous_region
from gcsckpt.dcp.metadata_codec import dump_metadata, load_metadata
from gcsckpt.dcp.paths import check_relative_path, is_gcs_checkpoint_id, parse_checkpoint_id
from gcsckpt.dcp.safetensors_blob import encode_header, header_length, parse_header
from gcsckpt.dcp.torch_save_view import tensor_from_torch_save


# -- ids and paths -------------------------------------------------------------------------------
def test_parse_checkpoint_id():
    loc = parse_checkpoint_id("gs://my-bucket/a/b/step_10/")
    assert (loc.bucket, loc.prefix) == ("my-bucket", "a/b/step_10")
    assert loc.object_name(".metadata") == "a/b/step_10/.metadata"
    assert loc.url() == "gs://my-bucket/a/b/step_10"
    root = parse_checkpoint_id("gs://bkt")
    assert root.prefix == "" and root.object_name("__0_0.distcp") == "__0_0.distcp"


@pytest.mark.parametrize(
    "bad",
    ["/local/path", "s3://b/p", "gs://", "gs://UPPER/x", "gs://b/../x", "gs://bk/a//b", "gs://ab"],
)
def test_bad_checkpoint_ids(bad):
    with pytest.raises(ValueError, match="checkpoint_id"):
        parse_checkpoint_id(bad)
    assert not is_gcs_checkpoint_id(bad)


def test_non_string_checkpoint_id():
    with pytest.raises(ValueError, match="PosixPath"):
        parse_checkpoint_id(__import__("pathlib").Path("/tmp/x"))


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "a/../b",
        "/etc/passwd",
        "gs://other/x",
        "http://h/x",
        "C:x",
        "a\\b",
        "a//b",
        "",
        "./a",
    ],
)
def test_unsafe_relative_paths(path):
    with pytest.raises(ValueError, match="relative path|segment"):
        check_relative_path(path, where="test")


def test_safe_relative_paths():
    for path in ("__0_0.distcp", "sub/__1_3.distcp", "a.b-c_d"):
        assert check_relative_path(path, where="test") == path


# -- metadata --------------------------------------------------------------------------------------
def _local_metadata(tmp_path, fmt=SerializationFormat.TORCH_SAVE) -> bytes:
    state = {
        "w": torch.ones(3, 2, dtype=torch.bfloat16),
        "meta": {"k": [1, 2]},
        "e": torch.empty(0),
    }
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path), serialization_format=fmt))
    return (tmp_path / ".metadata").read_bytes()


@pytest.mark.parametrize("fmt", list(SerializationFormat))
def test_load_metadata_matches_pickle(tmp_path, fmt):
    raw = _local_metadata(tmp_path, fmt)
    ours = load_metadata(raw, source="test")
    theirs = pickle.loads(raw)
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.storage_data == theirs.storage_data
    assert ours.planner_data == theirs.planner_data
    assert str(ours.storage_meta.checkpoint_id) == str(theirs.storage_meta.checkpoint_id)
    assert pickle.loads(dump_metadata(ours)).storage_data == theirs.storage_data


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch should_not_exist",))


def test_malicious_metadata_does_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = pickle.dumps(Metadata(state_dict_metadata={"x": _RunsCode()}))
    with pytest.raises(UnsafeMetadataError, match="posix.system|os.system"):
        load_metadata(payload, source="gs://b/p/.metadata")
    assert not (tmp_path / "should_not_exist").exists()


def test_getattr_only_reaches_enum_members():
    # getattr(Metadata, "__init__") built by hand: builtins.getattr is admitted only for enums.
    payload = (
        b"\x80\x04cbuiltins\ngetattr\n"
        b"ctorch.distributed.checkpoint.metadata\nMetadata\n"
        b"X\x08\x00\x00\x00__init__\x86R."
    )
    with pytest.raises(UnsafeMetadataError, match="getattr"):
        load_metadata(payload, source="crafted")


def test_metadata_must_be_metadata():
    with pytest.raises(UnsafeMetadataError, match="not DCP Metadata"):
        load_metadata(pickle.dumps({"a": 1}), source="crafted")


def test_truncated_metadata(tmp_path):
    raw = _local_metadata(tmp_path)
    with pytest.raises(ValueError, match="not a readable DCP metadata"):
        load_metadata(raw[: len(raw) // 2], source="crafted")


def _with_storage(raw: bytes, **changes) -> bytes:
    metadata = pickle.loads(raw)
    index = next(iter(metadata.storage_data))
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo(
        changes.get("relative_path", info.relative_path),
        changes.get("offset", info.offset),
        changes.get("length", info.length),
    )
    return pickle.dumps(metadata)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"relative_path": "../other/__0_0.distcp"}, "'\\.\\.'"),
        ({"relative_path": "/abs/__0_0.distcp"}, "absolute"),
        ({"relative_path": "gs://evil/__0_0.distcp"}, "scheme"),
        ({"offset": -1}, "offset=-1"),
        ({"length": "12"}, "length='12'"),
    ],
)
def test_bad_storage_entries(tmp_path, change, message):
    raw = _with_storage(_local_metadata(tmp_path), **change)
    with pytest.raises(ValueError, match=message):
        load_metadata(raw, source="gs://b/p/.metadata")


def test_storage_index_must_be_metadata_index(tmp_path):
    metadata = pickle.loads(_local_metadata(tmp_path))
    metadata.storage_data = {"w": next(iter(metadata.storage_data.values()))}
    with pytest.raises(ValueError, match="malformed"):
        load_metadata(pickle.dumps(metadata), source="crafted")


# -- torch.save fast path ------------------------------------------------------------------------
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


# -- safetensors blob ------------------------------------------------------------------------------
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


# -- range planning --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sizes", "offsets", "lengths"),
    [
        ((6, 4), (0, 0), (6, 4)),
        ((6, 4), (2, 0), (3, 4)),
        ((6, 4), (2, 1), (1, 2)),
        ((6, 4), (2, 1), (2, 2)),
        ((5, 3, 2), (1, 1, 0), (1, 2, 2)),
        ((5, 3, 2), (1, 0, 0), (2, 2, 2)),
        ((4,), (1,), (0,)),
        ((), (), ()),
    ],
)
def test_contiguous_region_matches_brute_force(sizes, offsets, lengths):
    block = torch.arange(max(1, torch.Size(sizes).numel())).reshape(sizes)
    region = block
    for d, (o, n) in enumerate(zip(offsets, lengths, strict=True)):
        region = region.narrow(d, o, n)
    wanted = region.reshape(-1).tolist()
    found = contiguous_region(sizes, offsets, lengths)
    flat = block.reshape(-1).tolist()
    is_run = wanted == flat[wanted[0] : wanted[0] + len(wanted)] if wanted else True
    if found is None:
        assert not is_run
    else:
        first, count = found
        assert count == len(wanted) and flat[first : first + count] == wanted


def test_windows_bound_buffer_bytes_and_align_slots():
    lengths = [100, 5000, 3, 70000, 64, 200000, 1]
    fetches = [Fetch("o", i * 1000, n, None, FetchKind.TORCH_SAVE) for i, n in enumerate(lengths)]
    windows = make_windows(fetches, 80000)
    assert [f for w in windows for f in w.fetches] == fetches
    for window in windows:
        assert window.buffer_bytes <= 80000 or len(window.fetches) == 1
        for f, slot in zip(window.fetches, window.slots, strict=True):
            assert slot % ALIGN == 0 and slot + f.length <= window.buffer_bytes


# -- GCSLoadPlanner --------------------------------------------------------------------------------
class _Custom:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, _Custom) and other.x == self.x


@pytest.mark.parametrize(
    "value",
    [0.001, (0.9, 0.95), False, None, "adamw", [1, 2, {"a": (3, 4)}], {"k": {1, 2}}, 3, b"xy"],
)
def test_planner_plain_values_match_torch_load(value):
    from gcsckpt.dcp.planner import GCSLoadPlanner

    buf = io.BytesIO()
    torch.save(value, buf)
    found, decoded = GCSLoadPlanner()._plain_value(io.BytesIO(buf.getvalue()))
    assert found and decoded == torch.load(io.BytesIO(buf.getvalue()), weights_only=False)


@pytest.mark.parametrize("value", [torch.ones(2), _Custom(5), {"t": torch.zeros(1)}])
def test_planner_leaves_non_plain_values_to_torch(value):
    from gcsckpt.dcp.planner import GCSLoadPlanner

    buf = io.BytesIO()
    torch.save(value, buf)
    assert GCSLoadPlanner()._plain_value(io.BytesIO(buf.getvalue())) == (False, None)


def test_planner_gives_mutable_values_fresh_copies():
    from gcsckpt.dcp.planner import GCSLoadPlanner

    planner = GCSLoadPlanner()
    buf = io.BytesIO()
    torch.save([1, 2], buf)
    first = planner._plain_value(io.BytesIO(buf.getvalue()))[1]
    first.append(3)
    assert planner._plain_value(io.BytesIO(buf.getvalue()))[1] == [1, 2]


def test_planner_loads_like_the_default_planner(tmp_path):
    from gcsckpt.dcp.planner import GCSLoadPlanner

    state = {"w": torch.ones(2), "opt": {"lr": 0.1, "betas": (0.9, 0.99), "obj": _Custom(7)}}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    results = []
    for planner in (dcp.DefaultLoadPlanner(), GCSLoadPlanner()):
        target = {"w": torch.zeros(2), "opt": {"lr": 0.0, "betas": (0.0, 0.0), "obj": None}}
        dcp.load(target, storage_reader=dcp.FileSystemReader(str(tmp_path)), planner=planner)
        results.append(target)
    assert results[0]["opt"] == results[1]["opt"] == state["opt"]
    assert torch.equal(results[1]["w"], state["w"])


def test_writer_upload_defaults_come_from_the_one_table():
    from gcsckpt.io import defaults

    writer = GCSStorageWriter("gs://bkt/p")
    assert (writer.object_bytes, writer.staging_bytes, writer.chunk_bytes) == (
        defaults.UPLOAD_OBJECT_BYTES,
        defaults.UPLOAD_STAGING_BYTES,
        defaults.UPLOAD_CHUNK_BYTES,
    )
    assert writer.max_inflight_uploads == defaults.MAX_INFLIGHT_UPLOADS


def _shard_item(fqn: str, shard_rows: int, global_rows: int, cols: int = 1024):
    """A WriteItem of rows [0, shard_rows) of a (global_rows, cols) float32 tensor."""
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
    )
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

    chunk = ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([shard_rows, cols]))
    return WriteItem(
        index=MetadataIndex(fqn, torch.Size([0, 0])),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=chunk,
            properties=TensorProperties(dtype=torch.float32),
            size=torch.Size([global_rows, cols]),
        ),
    )


def test_objects_are_sized_by_the_ranks_own_shard_bytes():
    """A rank holding 1/8 of each tensor (fsdp) writes its shard bytes, not the whole tensors':
    32 items of 1 MiB shards (8 MiB tensors) at 4 MiB per object make 8 objects, not 64."""
    from gcsckpt.dcp.upload_pipeline import estimate_bytes

    items = [_shard_item(f"w{i}", 256, 2048) for i in range(32)]
    assert estimate_bytes(items) == 32 * 256 * 1024 * 4
    writer = GCSStorageWriter("gs://bkt/p", object_bytes=4 << 20, thread_count=1)
    groups = writer._groups(items)
    assert len(groups) == 8
    assert sorted(len(g) for g in groups) == [4] * 8
