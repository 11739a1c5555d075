"""Unit tests of the load path's steps (gcsckpt.dcp.load) without an endpoint: plans, windows,
the pipeline and the decoder driven over a local FileSystemWriter checkpoint, error mapping, and
the dcp package's import graph."""

from __future__ import annotations

import dataclasses
import graphlib
import pickle
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import SerializationFormat, _StorageReaderTransforms
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

import gcsckpt.dcp
from gcsckpt.dcp.load.decode import Decoder
from gcsckpt.dcp.load.generations import Pins, check_metadata_read, pin_generations
from gcsckpt.dcp.load.item_ranges import ItemRange, ItemRangeKind
from gcsckpt.dcp.load.load_errors import CheckpointReadError, LoadErrors
from gcsckpt.dcp.load.pipeline import run_windows
from gcsckpt.dcp.load.plan import make_windows, plan_item_ranges, sort_items
from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.io import ObjectInfo, RangeReadError
from tests.import_graph import module_graph

LOCATION = CheckpointLocation("bkt", "ckpt/step1")


class _Handle:
    """A finished submit: reports every index once (last first), then []."""

    def __init__(self, count: int) -> None:
        self.left = list(range(count))[::-1]
        self.cancelled = False

    def next_completed(self) -> list[int]:
        done, self.left = self.left, []
        return done

    def cancel(self) -> None:
        self.cancelled = True


class _FileRanges:
    """Stands in for CheckpointRanges: serves (path, offset, length, dest) from local files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reads: list[tuple[str, int, int]] = []
        self.handles: list[_Handle] = []

    def read(self, ranges) -> None:
        for path, offset, length, dest in ranges:
            data = (self.root / path).read_bytes()[offset : offset + length]
            assert len(data) == length, f"{path} {offset}+{length} runs past the object"
            memoryview(dest).cast("B")[:] = data
            self.reads.append((path, offset, length))

    def submit(self, ranges) -> _Handle:
        ranges = list(ranges)
        self.read(ranges)
        self.handles.append(_Handle(len(ranges)))
        return self.handles[-1]


def _state() -> dict:
    return {
        "w": torch.arange(600, dtype=torch.float32).reshape(20, 30),
        "b": torch.full((4, 4), 2.5).to(torch.bfloat16),
        "e": torch.empty(0, 3),
        "m": {"k": [1, 2]},
    }


def _blank() -> dict:
    return {
        "w": torch.zeros(20, 30),
        "b": torch.zeros(4, 4, dtype=torch.bfloat16),
        "e": torch.ones(0, 3),
        "m": {"k": None},
    }


def _saved(tmp_path: Path, fmt: SerializationFormat):
    writer = dcp.FileSystemWriter(str(tmp_path), serialization_format=fmt)
    dcp.save(_state(), storage_writer=writer)
    return load_metadata((tmp_path / ".metadata").read_bytes(), source=LOCATION.url(".metadata"))


def _item(fqn: str, storage_offsets, lengths, chunk_offsets=(0, 0)) -> ReadItem:
    index = MetadataIndex(fqn, torch.Size(chunk_offsets), 0)
    return ReadItem(
        type=LoadItemType.TENSOR,
        dest_index=index,
        dest_offsets=torch.Size([0] * len(lengths)),
        storage_index=index,
        storage_offsets=torch.Size(storage_offsets),
        lengths=torch.Size(lengths),
    )


@pytest.mark.parametrize("fmt", list(SerializationFormat), ids=lambda f: f.name)
def test_load_path_over_local_files(tmp_path, fmt):
    metadata = _saved(tmp_path, fmt)
    target = _blank()
    planner = dcp.DefaultLoadPlanner()
    planner.set_up_planner(target, metadata, True)
    errors, stats, ranges = LoadErrors(LOCATION, 0), LoadStats(), _FileRanges(tmp_path)
    items = sort_items(planner.create_local_plan().items, metadata.storage_data, errors)
    plan = plan_item_ranges(items, metadata, planner.resolve_tensor, ranges, errors)
    windows = make_windows(plan.item_ranges, 256)
    decoder = Decoder(planner, _StorageReaderTransforms(None), errors, stats)
    run_windows(windows, ranges, decoder.consume, stats)

    want = _state()
    for fqn in ("w", "b", "e"):
        assert torch.equal(target[fqn], want[fqn])
    assert target["m"] == {"k": [1, 2]}
    # "e" holds no bytes: the default planner reads nothing for it.
    assert (plan.tensor_items, plan.bytes_items, plan.objects) == (2, 1, 1)
    assert [(f.path, f.offset) for f in plan.item_ranges] == sorted(
        (f.path, f.offset) for f in plan.item_ranges
    )
    tensor_kind = (
        ItemRangeKind.RAW if fmt == SerializationFormat.SAFETENSORS else ItemRangeKind.TORCH_SAVE
    )
    kinds = {f.item.storage_index.fqn: f.kind for f in plan.item_ranges}
    assert kinds == {"w": tensor_kind, "b": tensor_kind, "m.k": ItemRangeKind.BYTES}
    # Tensors of both formats land in their targets (TORCH_SAVE: head and tail in a slot).
    assert plan.direct_items == 2
    assert plan.direct_archive_items == (0 if tensor_kind is ItemRangeKind.RAW else 2)
    assert stats.archive_rereads == 0
    # Every slot exceeds the 256-byte window: one window each (direct RAW ones ride along).
    assert stats.windows == len(windows) == sum(f.slot_bytes > 0 for f in plan.item_ranges)
    assert len(windows) == (1 if tensor_kind is ItemRangeKind.RAW else 3) == len(ranges.handles)
    assert stats.bytes_needed == sum(f.length for f in plan.item_ranges)
    assert not any(h.cancelled for h in ranges.handles)


def test_raw_regions_fetch_only_what_they_need(tmp_path):
    metadata = _saved(tmp_path, SerializationFormat.SAFETENSORS)
    rows = torch.zeros(3, 30)  # rows 2..4 of w: one run of bytes -> direct
    cols = torch.zeros(20, 5)  # columns 5..9: not one run -> whole chunk, narrowed after
    items = [_item("w", (2, 0), (3, 30)), _item("w", (0, 5), (20, 5))]
    targets = {id(items[0]): rows, id(items[1]): cols}
    errors, ranges = LoadErrors(LOCATION, 0), _FileRanges(tmp_path)
    plan = plan_item_ranges(items, metadata, lambda item: targets[id(item)], ranges, errors)
    by_target = {id(f.item): f for f in plan.item_ranges}
    direct, narrowed = by_target[id(items[0])], by_target[id(items[1])]
    assert (
        direct.target.data_ptr() == rows.data_ptr()
        and direct.length == 3 * 30 * 4
        and direct.narrow is None
    )
    assert narrowed.target is None and narrowed.length == 600 * 4 and narrowed.shape == (20, 30)
    assert narrowed.narrow == ([0, 5], [20, 5])
    assert direct.offset == narrowed.offset + 2 * 30 * 4

    class Planner:
        def __init__(self) -> None:
            self.committed: list[int] = []

        def resolve_tensor(self, item):
            return targets[id(item)]

        def commit_tensor(self, item, tensor):
            self.committed.append(id(item))

    planner = Planner()
    stats = LoadStats()
    decoder = Decoder(planner, _StorageReaderTransforms(None), errors, stats)
    run_windows(make_windows(plan.item_ranges, 1 << 20), ranges, decoder.consume, stats)
    w = _state()["w"]
    assert torch.equal(rows, w[2:5]) and torch.equal(cols, w[:, 5:10])
    assert sorted(planner.committed) == sorted(id(i) for i in items)


def test_blob_header_mismatch_names_object_and_range(tmp_path):
    metadata = _saved(tmp_path, SerializationFormat.SAFETENSORS)
    info = next(i for x, i in metadata.storage_data.items() if x.fqn == "w")
    item = _item("w", (0, 0), (20, 30))
    entry = metadata.state_dict_metadata["w"]
    entry.properties.dtype = torch.int32  # same byte size, another dtype than the blob says
    with pytest.raises(CheckpointReadError) as raised:
        plan_item_ranges(
            [item], metadata, lambda _: None, _FileRanges(tmp_path), LoadErrors(LOCATION, 3)
        )
    message = str(raised.value)
    assert message.startswith("rank 3: checkpoint load failed: ")
    assert f"gs://bkt/ckpt/step1/{info.relative_path} bytes={info.offset}-" in message
    assert "safetensors tensor 'w' is torch.float32 (20, 30), metadata says torch.int32" in message


def test_item_ranges_are_frozen():
    item_range = ItemRange("o", 0, 8, None, ItemRangeKind.BYTES)
    with pytest.raises(AttributeError):
        item_range.offset = 4  # type: ignore[misc]
    window = make_windows([item_range], 64)[0]
    assert window.slots == (0,) and window.buffer_bytes == 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.buffer_bytes = 0  # type: ignore[misc]


def test_pipeline_cancels_outstanding_windows_when_decoding_fails(tmp_path):
    (tmp_path / "o").write_bytes(bytes(range(256)) * 4)
    item_ranges = [ItemRange("o", i * 100, 100, None, ItemRangeKind.BYTES) for i in range(6)]
    windows = make_windows(item_ranges, 128)  # one item range per window
    ranges = _FileRanges(tmp_path)
    seen = []

    def consume(item_range, data):
        seen.append((item_range.offset, data.tobytes()))  # a numpy view of the slot
        raise RuntimeError("decoder broke")

    with pytest.raises(RuntimeError, match="decoder broke"):
        run_windows(windows, ranges, consume, LoadStats())
    assert seen == [(0, (bytes(range(256)) * 4)[:100])]
    assert len(ranges.handles) == 2  # two windows in flight, no third started
    assert all(h.cancelled for h in ranges.handles)


def test_decode_failure_names_object_range_and_fqn():
    item = _item("w", (0,), (4,), chunk_offsets=(0,))
    item_range = ItemRange("__0_0.distcp", 10, 4, item, ItemRangeKind.TORCH_SAVE)
    decoder = Decoder(None, _StorageReaderTransforms(None), LoadErrors(LOCATION, 1), LoadStats())
    with pytest.raises(CheckpointReadError) as raised:
        decoder.consume(item_range, torch.zeros(4, dtype=torch.uint8))
    assert "rank 1: checkpoint load failed: gs://bkt/ckpt/step1/__0_0.distcp bytes=10-13:" in str(
        raised.value
    )
    assert "FQN 'w': " in str(raised.value) and "torch.save archive" in str(raised.value)


def test_range_errors_map_to_one_checkpoint_error():
    failure = dict(
        bucket="bkt", object="ckpt/o", offset=10, length=5, status=503, error="boom", attempts=3
    )
    error = LoadErrors(LOCATION, 2).from_range_error(RangeReadError([failure]))
    text = "rank 2: checkpoint load failed: gs://bkt/ckpt/o bytes=10-14: HTTP 503: boom after 3"
    assert str(error) == text + " attempts"
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is CheckpointReadError and str(again) == str(error)
    bare = LoadErrors(LOCATION, 0).from_range_error(RangeReadError([]))
    assert str(bare).startswith("rank 0: checkpoint load failed (0 range request(s) failed")


def test_missing_storage_entry_names_the_metadata():
    item = _item("w", (0,), (4,), chunk_offsets=(0,))
    with pytest.raises(ValueError, match=r"rank 4: gs://bkt/ckpt/step1/\.metadata has no storage"):
        sort_items([item], {}, LoadErrors(LOCATION, 4))


# -- import graph ------------------------------------------------------------------------------
def _import_graph() -> dict[str, set[str]]:
    """dcp module -> the dcp modules it imports at import time."""
    return module_graph(gcsckpt.dcp)


def test_dcp_import_graph_is_acyclic():
    graph = _import_graph()
    assert "gcsckpt.dcp.load.plan" in graph and "gcsckpt.dcp.reader" in graph
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a cycle
    assert order.index("gcsckpt.dcp.load.plan") < order.index("gcsckpt.dcp.reader")


def test_load_steps_take_collaborators_not_the_reader():
    graph = _import_graph()
    outside = {"gcsckpt.dcp", "gcsckpt.dcp.reader", "gcsckpt.dcp.writer", "gcsckpt.dcp.planner"}
    for name, edges in graph.items():
        if name.startswith("gcsckpt.dcp.load"):
            assert not edges & outside, f"{name} imports {sorted(edges & outside)}"


def _listing(meta, a, b):
    p = "ckpt/step1/"
    return [
        ObjectInfo(p + ".metadata", 9, meta),
        ObjectInfo(p + "a", 5, a),
        ObjectInfo(p + "b", 5, b),
    ]


def test_pins_come_from_one_listing_and_check_the_commit_order():
    errors = LoadErrors(LOCATION, 3)
    pins = pin_generations(
        _listing(30, 10, 20), "ckpt/step1/", ".metadata", 30, {"a", "b", "c"}, errors
    )
    # "c" is not listed: left unpinned and unsized (a 404 later)
    assert pins == Pins(30, {"a": 10, "b": 20}, {"a": 5, "b": 5})
    assert pins.only({"b"}) == Pins(30, {"b": 20}, {"b": 5})
    with pytest.raises(CheckpointReadError) as info:
        pin_generations(_listing(30, 10, 31), "ckpt/step1/", ".metadata", 30, {"a", "b"}, errors)
    assert str(info.value) == (
        "rank 3: checkpoint load failed: gs://bkt/ckpt/step1/b: object changed during load:"
        " generation 31 was written after .metadata (generation 30); a checkpoint copied"
        " object by object (gcloud storage cp -r, rsync) is in another order: load it with"
        " GCSStorageReader(..., check_commit_order=False)"
    )
    relaxed = pin_generations(
        _listing(30, 10, 31),
        "ckpt/step1/",
        ".metadata",
        30,
        {"b"},
        errors,
        check_commit_order=False,
    )
    assert relaxed == Pins(30, {"b": 31}, {"b": 5})
    with pytest.raises(CheckpointReadError, match="read at generation 29, now generation 30"):
        pin_generations(_listing(30, 10, 20), "ckpt/step1/", ".metadata", 29, {"a"}, errors)
    with pytest.raises(CheckpointReadError, match="read at generation 30, now generation 31"):
        check_metadata_read(pins, ".metadata", 31, errors)
    check_metadata_read(pins, ".metadata", 30, errors)
    with pytest.raises(CheckpointReadError, match="read at generation 30, now no object"):
        pin_generations(_listing(30, 10, 20)[1:], "ckpt/step1/", ".metadata", 30, {"a"}, errors)


def test_an_endpoint_without_generations_pins_nothing():
    # A listing without generations and a `.metadata` read without x-goog-generation: the load
    # goes on unpinned (no check is possible), and never fails for it.
    errors = LoadErrors(LOCATION, 0)
    pins = pin_generations(
        _listing(None, None, None), "ckpt/step1/", ".metadata", None, {"a"}, errors
    )
    assert pins == Pins(None, {}, {"a": 5})  # sizes are listed all the same
    check_metadata_read(pins, ".metadata", None, errors)
    # The listing names generations, the media read did not: the listing's are used.
    pins = pin_generations(_listing(30, 10, 20), "ckpt/step1/", ".metadata", None, {"a"}, errors)
    assert pins == Pins(30, {"a": 10}, {"a": 5})


def test_changed_objects_map_to_object_changed_during_load():
    failure = dict(
        bucket="bkt",
        object="ckpt/step1/a",
        offset=0,
        length=4,
        status=404,
        cause="generation_changed",
        error="object changed during read: generation 7 is no longer the object's"
        " (HTTP 404 not found)",
        attempts=1,
        pinned_generation=7,
        seen_generation=0,
    )
    error = LoadErrors(LOCATION, 1).from_range_error(RangeReadError([failure]))
    assert str(error) == (
        "rank 1: checkpoint load failed: gs://bkt/ckpt/step1/a bytes=0-3: object changed during"
        " load: generation 7 is no longer the object's (HTTP 404 not found) after 1 attempt"
    )


def test_checkpoint_errors_never_carry_a_token():
    failure = dict(
        bucket="bkt",
        object="ckpt/o",
        offset=0,
        length=8,
        status=401,
        attempts=1,
        error='HTTP 401: {"echo": "Authorization: Bearer ya29.s3cr3t-tok", "x": 1}',
    )
    errors = LoadErrors(LOCATION, 0)
    mapped = errors.from_range_error(RangeReadError([failure]))
    assert str(mapped) == (
        "rank 0: checkpoint load failed: gs://bkt/ckpt/o bytes=0-7: HTTP 401: "
        '{"echo": "Authorization: Bearer <redacted>", "x": 1} after 1 attempt'
    )
    for error in (
        mapped,
        errors.at("o", 0, 8, "server said: bearer abc.def;"),
        CheckpointReadError(0, [], summary="Bearer xyz"),
    ):
        again = pickle.loads(pickle.dumps(error))
        for text in (str(error), repr(error), str(error.failures), str(again), repr(again.args)):
            assert "s3cr3t" not in text and "abc.def" not in text and "xyz" not in text


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.bool],
)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 4)])
def test_copy_into_equals_torch_copy(dtype, shape):
    from gcsckpt.dcp.load.decode import copy_into

    source = (torch.arange(max(1, torch.Size(shape).numel())) * 7 % 251)[
        : torch.Size(shape).numel()
    ]
    source = source.reshape(shape).to(dtype)
    ours, theirs = torch.full(shape, 3).to(dtype), torch.full(shape, 3).to(dtype)
    assert copy_into(ours, source) is ours
    theirs.copy_(source)
    assert ours.dtype == dtype and torch.equal(
        ours.reshape(-1).view(torch.uint8), theirs.reshape(-1).view(torch.uint8)
    )


def test_copy_into_falls_back_to_torch_for_views_and_casts():
    from gcsckpt.dcp.load.decode import copy_into

    base = torch.zeros(4, 6)
    strided = base[:, ::2]  # not contiguous: torch's copy_ writes through the view
    source = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    copy_into(strided, source)  # and casts float64 -> float32
    assert torch.equal(base[:, ::2], source.float()) and torch.equal(
        base[:, 1::2], torch.zeros(4, 3)
    )
    narrowed = torch.zeros(5, 3)[1:3]  # contiguous, with a storage offset
    copy_into(narrowed, torch.ones(2, 3))
    assert torch.equal(
        narrowed._base, torch.tensor([[0.0] * 3, [1.0] * 3, [1.0] * 3, [0.0] * 3, [0.0] * 3])
    )
