"""`.metadata`'s columnar index (gcsckpt.dcp.metadata_index, indexed_metadata): the pickle before
it is torch's, unchanged; the lazy Metadata equals the pickled one entry by entry; the columns'
read items equal torch's resharding items; GCSLoadPlanner on the index plans what
DefaultLoadPlanner plans on the pickle; a damaged section is refused naming the object."""

from __future__ import annotations

import dataclasses
import pickle
import random
import struct

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from ckptbench.scaling.synthetic import (
    ModelShape,
    join_fake_world,
    rank_state_dict,
    synthetic_metadata,
)
from gcsckpt.dcp import checksums
from gcsckpt.dcp.indexed_metadata import index_of, indexed_metadata
from gcsckpt.dcp.load.regions import chunk_of
from gcsckpt.dcp.metadata_codec import dump_metadata, load_metadata
from gcsckpt.dcp.metadata_index import (
    FOOTER,
    MetadataIndexError,
    dump_indexed,
    encode_index,
    parse_footer,
)
from gcsckpt.dcp.metadata_index_decode import decode_index
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.io import crc32c

SOURCE = "gs://b/p/.metadata (generation 7)"
Size = torch.Size


def _grid(fqn, shape, cuts, dtype, order, storage, path, cursor):
    """A 2-D tensor saved as blocks between `cuts` (rows, cols), chunks in `order`."""
    blocks = []
    for r0, r1 in zip(cuts[0], cuts[0][1:], strict=False):
        for c0, c1 in zip(cuts[1], cuts[1][1:], strict=False):
            blocks.append(ChunkStorageMetadata(Size((r0, c0)), Size((r1 - r0, c1 - c0))))
    chunks = [blocks[i] for i in order]
    for k, chunk in enumerate(chunks):
        storage[MetadataIndex(fqn, chunk.offsets, k)] = _StorageInfo(path, cursor[0], 100 + k)
        cursor[0] += 100 + k
    return TensorStorageMetadata(TensorProperties(dtype=dtype), Size(shape), chunks)


def _crafted_metadata() -> Metadata:
    """Every kind of entry: Shard(0) pieces of 4 ranks, a 2-D grid in shuffled order (offsets
    not in row-major order), zero-size chunks, a 0-dim tensor, several dtypes, BYTE_IO values,
    keys with index None, transform descriptors, planner_data, storage_meta with checksums."""
    sdm, storage, cursor = {}, {}, [0]
    props = TensorProperties
    # 1-D Shard(0) over 4 ranks, the last rank's piece empty.
    chunks = [ChunkStorageMetadata(Size((r * 3,)), Size((3 if r < 3 else 0,))) for r in range(4)]
    sdm["a"] = TensorStorageMetadata(props(dtype=torch.bfloat16), Size((9,)), chunks)
    for k, chunk in enumerate(chunks):
        storage[MetadataIndex("a", chunk.offsets, k)] = _StorageInfo(f"__{k}_0.distcp", 10 * k, 9)
    sdm["grid"] = _grid(
        "grid", (7, 10), ((0, 2, 7), (0, 3, 4, 10)), torch.float32, [4, 0, 5, 2, 1, 3],
        storage, "__0_0.distcp", cursor,
    )  # fmt: skip
    sdm["ints"] = _grid(
        "ints", (4, 0), ((0, 2, 4), (0, 0)), torch.int64, [1, 0], storage, "__1_0.distcp", cursor
    )
    sdm["step"] = TensorStorageMetadata(
        props(dtype=torch.float32, requires_grad=True, pin_memory=True),
        Size(()),
        [ChunkStorageMetadata(Size(()), Size(()))],
    )
    storage[MetadataIndex("step", Size(()), None)] = _StorageInfo("__0_0.distcp", 5000, 11)
    sdm["none"] = TensorStorageMetadata(props(dtype=torch.bool), Size((3,)), [])
    sdm["cl"] = TensorStorageMetadata(
        props(dtype=torch.float16, memory_format=torch.channels_last),
        Size((1, 2, 2, 2)),
        [ChunkStorageMetadata(Size((0, 0, 0, 0)), Size((1, 2, 2, 2)))],
    )
    storage[MetadataIndex("cl", Size((0, 0, 0, 0)), 0)] = _StorageInfo(
        "__2_0.distcp", 0, 300, ["stream-a", "stream-b"]
    )
    for name in ("opt.lr", "opt.betas", "unsaved"):
        sdm[name] = BytesStorageMetadata()
    storage[MetadataIndex("opt.lr")] = _StorageInfo("__0_0.distcp", 6000, 700)
    storage[MetadataIndex("opt.betas")] = _StorageInfo("__3_0.distcp", 0, 701, ("t",))
    meta = StorageMeta(checkpoint_id="gs://b/p", save_id="s1")
    checksums.attach(meta, {"__0_0.distcp": (6700, b"\0" * 8, b"\1\2\3\4")})
    return Metadata(
        state_dict_metadata=sdm,
        planner_data={"opt.lr": ("opt", "lr")},
        storage_data=storage,
        storage_meta=meta,
        version="1.0.0",
    )


def _torch_metadata(tmp_path) -> Metadata:
    """The Metadata torch's FileSystemWriter writes for a state dict of dtypes and values."""
    state = {
        "w": torch.randn(5, 3),
        "h": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "b": torch.ones(4, dtype=torch.bfloat16),
        "e": torch.empty(0, 2),
        "lr": 0.1,
        "betas": (0.9, 0.95),
        "name": "x",
    }
    import torch.distributed.checkpoint as dcp

    dcp.save(state, storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    return pickle.loads((tmp_path / ".metadata").read_bytes())


def _metadatas(tmp_path):
    shape = ModelShape(layers=1, hidden=16, intermediate=40, kv=8, vocab=50)
    return [_crafted_metadata(), _torch_metadata(tmp_path), synthetic_metadata(shape, 6)]


def _decode(data: bytes):
    footer = parse_footer(data, source=SOURCE)
    assert footer is not None and footer.object_size == len(data)
    section = data[footer.section_offset : footer.section_offset + footer.section_length]
    return indexed_metadata(decode_index(section, footer, source=SOURCE))


def _assert_same(lazy: Metadata, ref: Metadata) -> None:
    """Field by field, key by key, in order, with the types torch's unpickler gives."""
    assert list(lazy.state_dict_metadata) == list(ref.state_dict_metadata)
    for fqn, want in ref.state_dict_metadata.items():
        got = lazy.state_dict_metadata[fqn]
        assert type(got) is type(want)
        if isinstance(want, TensorStorageMetadata):
            for field in dataclasses.fields(TensorProperties):
                assert getattr(got.properties, field.name) == getattr(want.properties, field.name)
            assert type(got.size) is torch.Size and got.size == want.size
            assert len(got.chunks) == len(want.chunks)
            for g, w in zip(got.chunks, want.chunks, strict=True):
                assert (g.offsets, g.sizes) == (w.offsets, w.sizes)
                assert type(g.offsets) is torch.Size and type(g.sizes) is torch.Size
    got_keys, want_keys = list(lazy.storage_data), list(ref.storage_data)
    assert [(k.fqn, k.offset, k.index) for k in got_keys] == [
        (k.fqn, k.offset, k.index) for k in want_keys
    ]
    for key in want_keys:
        got, want = lazy.storage_data[key], ref.storage_data[key]
        assert type(got) is _StorageInfo
        assert (got.relative_path, got.offset, got.length) == (
            want.relative_path,
            want.offset,
            want.length,
        )
        got_d = getattr(got, "transform_descriptors", None)
        want_d = getattr(want, "transform_descriptors", None)
        assert got_d == want_d and type(got_d) is type(want_d)
    assert len(lazy.storage_data) == len(ref.storage_data)
    assert lazy.planner_data == ref.planner_data
    assert lazy.storage_meta == ref.storage_meta
    if ref.storage_meta is not None:  # gcsckpt's checksum records are an extra attribute
        assert vars(lazy.storage_meta) == vars(ref.storage_meta)
    assert lazy.version == ref.version
    assert dict(lazy.storage_data) == ref.storage_data
    assert pickle.loads(pickle.dumps(lazy)) == ref  # the views pickle as plain dicts


def test_pickle_prefix_is_torchs_and_lazy_metadata_equals_it(tmp_path):
    for metadata in _metadatas(tmp_path):
        data = dump_indexed(metadata)
        plain = dump_metadata(metadata)
        assert data.startswith(plain) and len(data) > len(plain) + FOOTER.size
        ref = pickle.loads(data)  # stock readers: the bytes after STOP are ignored
        assert ref == pickle.loads(plain)
        assert load_metadata(data, source=SOURCE) == ref
        lazy = _decode(data)
        assert index_of(lazy) is not None
        _assert_same(lazy, ref)


def test_lookups_by_key_and_chunk(tmp_path):
    ref = _crafted_metadata()
    lazy = _decode(dump_indexed(ref))
    for key, info in ref.storage_data.items():
        wrong_hint = MetadataIndex(key.fqn, key.offset, None if key.index is None else 999)
        assert lazy.storage_data[wrong_hint] == info and wrong_hint in lazy.storage_data
        if key.offset is not None:
            assert chunk_of(lazy, key) == chunk_of(ref, key)
    assert MetadataIndex("grid", Size((1, 1))) not in lazy.storage_data
    assert MetadataIndex("none", Size((0,))) not in lazy.storage_data
    assert lazy.storage_data.get(MetadataIndex("unsaved")) is None
    assert lazy.state_dict_metadata.get("missing") is None and "opt.lr" in lazy.state_dict_metadata
    with pytest.raises(ValueError, match="no chunk at offsets"):
        chunk_of(lazy, MetadataIndex("grid", Size((1, 1))))
    assert index_of(lazy).relative_paths() == {i.relative_path for i in ref.storage_data.values()}


def _random_local_chunks(rng, shape, count):
    chunks = []
    for _ in range(count):
        offsets, sizes = [], []
        for extent in shape:
            lo = rng.randint(0, extent)
            offsets.append(lo)
            sizes.append(rng.randint(0, extent - lo))
        chunks.append(ChunkStorageMetadata(Size(offsets), Size(sizes)))
    return chunks


def test_read_items_equal_torchs():
    ref = _crafted_metadata()
    columns = index_of(_decode(dump_indexed(ref)))
    shape = ModelShape(layers=1, hidden=24, intermediate=40, kv=8, vocab=50)
    synth = synthetic_metadata(shape, 7)
    synth_columns = index_of(_decode(dump_indexed(synth)))
    rng = random.Random(3)
    cases = 0
    for md, cols in ((ref, columns), (synth, synth_columns)):
        for fqn, entry in md.state_dict_metadata.items():
            if not isinstance(entry, TensorStorageMetadata):
                continue
            row = cols.row(fqn)
            for count in (1, 1, 2, 3):
                local = _random_local_chunks(rng, entry.size, count)
                want = create_read_items_for_chunk_list(fqn, entry, local)
                assert cols.read_items(fqn, row, local) == want
                cases += 1
            whole = [ChunkStorageMetadata(Size((0,) * len(entry.size)), entry.size)]
            assert cols.read_items(fqn, row, whole) == create_read_items_for_chunk_list(
                fqn, entry, whole
            )
    assert cases > 100


@pytest.mark.parametrize("ranks,rank", [(4, 1), (6, 5), (3, 0)])
def test_planner_on_index_equals_default_on_pickle(ranks, rank):
    shape = ModelShape(layers=1, hidden=16, intermediate=40, kv=8, vocab=50)
    data = dump_indexed(synthetic_metadata(shape, ranks))
    join_fake_world(rank, ranks)
    try:
        state = rank_state_dict(shape, rank, ranks)
        stock = DefaultLoadPlanner()
        stock.set_up_planner(state, pickle.loads(data), False)
        want = stock.create_local_plan().items
        ours = GCSLoadPlanner(compact_plans=False)
        lazy = _decode(data)
        ours.set_up_planner(state, lazy, False)
        got = ours.create_local_plan().items
        # On the index too, torch's planner plans the same (through the lazy views).
        stock_lazy = DefaultLoadPlanner()
        stock_lazy.set_up_planner(state, _decode(data), False)
        assert stock_lazy.create_local_plan().items == want
    finally:
        dist.destroy_process_group()
    assert got == want and len(got) > 20
    made = lazy.state_dict_metadata._made
    assert not any(isinstance(v, TensorStorageMetadata) for v in made.values())


def test_size_mismatch_is_torchs_error():
    data = dump_indexed(_crafted_metadata())
    planner = GCSLoadPlanner()
    planner.set_up_planner({"a": torch.zeros(8)}, _decode(data), False)
    with pytest.raises(ValueError, match="Size mismatch between saved"):
        planner.create_local_plan()


def test_unrepresentable_metadata_gets_no_index():
    md = _crafted_metadata()
    md.storage_data[MetadataIndex("grid", Size((1, 1)))] = _StorageInfo("x", 0, 1)
    assert encode_index(md) is None and dump_indexed(md) == dump_metadata(md)
    md = _crafted_metadata()
    md.state_dict_metadata["a"].chunks.append(md.state_dict_metadata["a"].chunks[0])
    assert encode_index(md) is None
    md = _crafted_metadata()
    md.storage_data[MetadataIndex("opt.lr")] = _StorageInfo("__0_0.distcp", 1 << 64, 1)
    assert encode_index(md) is None


def test_wide_values_keep_int64_columns():
    md = _crafted_metadata()
    big = 3 << 31
    md.state_dict_metadata["wide"] = TensorStorageMetadata(
        TensorProperties(dtype=torch.int8),
        Size((big + 10,)),
        [ChunkStorageMetadata(Size((big,)), Size((10,)))],
    )
    md.storage_data[MetadataIndex("wide", Size((big,)), 0)] = _StorageInfo("w", big, 10)
    ref = pickle.loads(dump_metadata(md))
    lazy = _decode(dump_indexed(md))
    _assert_same(lazy, ref)
    chunk = ChunkStorageMetadata(Size((big + 4,)), Size((6,)))
    want = create_read_items_for_chunk_list("wide", ref.state_dict_metadata["wide"], [chunk])
    columns = index_of(lazy)
    assert columns.read_items("wide", columns.row("wide"), [chunk]) == want
    assert columns.columns.arrays["chunk_offsets"].dtype == np.int64
    assert index_of(_decode(dump_indexed(ref))) is not None


def _rebuild(data: bytes, change) -> bytes:
    """`data` with its section changed by `change(bytearray)` and the CRC made to match."""
    footer = parse_footer(data, source=SOURCE)
    section = bytearray(data[footer.section_offset : footer.section_offset + footer.section_length])
    change(section)
    tail = FOOTER.pack(
        b"GCKPTIDX", 1, footer.section_offset, len(section), crc32c(bytes(section)), b"GCKPTEND"
    )
    return data[: footer.section_offset] + bytes(section) + tail


def _array_at(data: bytes, name: str) -> tuple[int, np.dtype]:
    import json

    footer = parse_footer(data, source=SOURCE)
    section = data[footer.section_offset :]
    (n,) = struct.unpack("<I", section[4:8])
    dtype, offset, _ = json.loads(section[8 : 8 + n])["arrays"][name]
    return offset, np.dtype(dtype)


def _poke(name: str, value: int, at: int = 0):
    def change(section: bytearray, data_ref=[]):  # noqa: B006
        offset, dtype = _array_at(data_ref[0], name)
        start = offset + at * dtype.itemsize
        section[start : start + dtype.itemsize] = np.array([value], dtype).tobytes()

    return change


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("st_path", 99, "st_path outside"),
        ("st_chunk", 2, "do not name each other"),
        ("chunk_storage", -1, "do not name"),
        ("fqn_chunks", 5, "does not match"),
        ("st_offset", -4, "negative storage offsets"),
        ("fqn_dtype", 40, "fqn_dtype outside"),
        ("st_fqn", 7, "do not name each other"),
    ],
)
def test_inconsistent_section_is_refused(name, value, message):
    data = dump_indexed(_crafted_metadata())
    change = _poke(name, value)
    change.__defaults__[0].append(data)
    bad = _rebuild(data, change)
    assert pickle.loads(bad) == pickle.loads(data)  # the pickle is untouched
    with pytest.raises(MetadataIndexError, match=message) as info:
        _decode(bad)
    assert "gs://b/p/.metadata (generation 7)" in str(info.value)


def test_corrupt_or_truncated_section_is_refused():
    data = dump_indexed(_crafted_metadata())
    footer = parse_footer(data, source=SOURCE)
    flipped = bytearray(data)
    flipped[footer.section_offset + 100] ^= 1
    with pytest.raises(MetadataIndexError, match=r"generation 7\): index section fails its CRC"):
        _decode(bytes(flipped))
    section = data[footer.section_offset : footer.section_offset + footer.section_length - 3]
    with pytest.raises(MetadataIndexError, match="truncated"):
        decode_index(section, footer, source=SOURCE)

    def absolute(section: bytearray) -> None:
        at = section.index(b'"__1_0.distcp"')
        section[at + 1 : at + 2] = b"/"

    bad_path = _rebuild(data, absolute)
    with pytest.raises(ValueError, match="generation 7.*absolute"):
        _decode(bad_path)
    no_json = _rebuild(data, lambda s: s.__setitem__(slice(8, 9), b"!"))
    with pytest.raises(MetadataIndexError, match="malformed"):
        _decode(no_json)
    impossible = data[: -FOOTER.size] + FOOTER.pack(b"GCKPTIDX", 1, 0, 4, 0, b"GCKPTEND")
    with pytest.raises(MetadataIndexError, match="impossible"):
        parse_footer(impossible, source=SOURCE)
    assert parse_footer(dump_metadata(_crafted_metadata()), source=SOURCE) is None
