"""The save path's package (`gcsckpt.dcp.save`) and the writer's face to DCP, without an endpoint:
object names, the Metadata a commit completes, the writer's StorageWriter methods, the arrows."""

from __future__ import annotations

import graphlib
import inspect
import pickle

from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult

import gcsckpt.dcp
from gcsckpt.dcp import GCSStorageWriter, checksums
from gcsckpt.dcp.save.commit import complete_metadata
from gcsckpt.dcp.save.split import metadata_name, object_names, object_prefix
from tests.import_graph import module_graph

SAVE_ID = "0123456789abcdef0123456789abcdef"  # a UUID's 32 hex digits


def test_object_names_carry_rank_and_save():
    prefix = object_prefix(3, "01234567-89ab-cdef-0123-456789abcdef")
    assert prefix == "__3_0123456789abcdef_"
    assert object_prefix(3, SAVE_ID) == prefix
    assert object_names(prefix, [["a"], ["b", "c"]]) == [
        ("__3_0123456789abcdef_0.distcp", ["a"]),
        ("__3_0123456789abcdef_1.distcp", ["b", "c"]),
    ]
    assert metadata_name(3, use_collectives=True) == ".metadata"
    assert metadata_name(None, use_collectives=False) == ".metadata"
    assert metadata_name(3, use_collectives=False) == "__3.metadata"


def _result(fqn: str, path: str, offset: int, length: int, record=None) -> WriteResult:
    info = _StorageInfo(path, offset, length)
    if record is not None:
        info = checksums.ChecksummedInfo(path, offset, length, object_checksums=record)
    return WriteResult(MetadataIndex(fqn), length, info)


def test_checksum_records_ride_on_results_to_the_metadata():
    record = (12, b"\0" * 8, b"\1\2\3\4")
    rank0 = checksums.with_records(
        [_result("a", "__0_x_0.distcp", 0, 5), _result("b", "__0_x_0.distcp", 5, 7)],
        {"__0_x_0.distcp": record},
    )
    assert [type(r.storage_data).__name__ for r in rank0] == ["ChecksummedInfo", "_StorageInfo"]
    rank1 = [_result("c", "__1_x_0.distcp", 0, 4)]
    metadata = Metadata(state_dict_metadata={})
    storage_meta = StorageMeta(checkpoint_id="gs://bkt/p", save_id=SAVE_ID)

    ours = complete_metadata(metadata, [rank0, rank1], storage_meta)

    assert ours == ["__0_x_0.distcp", "__1_x_0.distcp"]
    assert {type(i) for i in metadata.storage_data.values()} == {_StorageInfo}
    assert metadata.storage_data[MetadataIndex("b")] == _StorageInfo("__0_x_0.distcp", 5, 7)
    assert metadata.storage_meta is storage_meta
    assert checksums.records_of(metadata) == {"__0_x_0.distcp": record}
    # what a stock reader unpickles: plain torch types and builtins
    assert pickle.loads(pickle.dumps(metadata)).storage_data == metadata.storage_data


def test_without_records_the_metadata_carries_none():
    metadata = Metadata(state_dict_metadata={})
    complete_metadata(metadata, [[_result("a", "o", 0, 1)]], StorageMeta())
    assert checksums.records_of(metadata) == {}


def test_the_writer_is_a_storage_writer_with_torchs_signatures():
    """Every StorageWriter method the writer defines takes torch's parameters, and no local
    filesystem shim (`fs`) is left on it."""
    writer = GCSStorageWriter("gs://bkt/run/step1")
    assert isinstance(writer, StorageWriter)
    ours = {name for name, _ in inspect.getmembers(GCSStorageWriter, callable)}
    for name, theirs in inspect.getmembers(StorageWriter, callable):
        if name.startswith("__") or name not in ours:
            continue
        got = list(inspect.signature(getattr(GCSStorageWriter, name)).parameters)
        want = list(inspect.signature(theirs).parameters)
        assert got == want, f"{name}{got} shadows StorageWriter.{name}{want}"
    assert not hasattr(writer, "fs")
    meta = writer.storage_meta()
    assert (meta.checkpoint_id, meta.save_id) == ("gs://bkt/run/step1", writer.save_id)
    first = writer.save_id
    writer.reset("gs://bkt/run/step2")
    assert writer.save_id != first and writer.checkpoint_id == "gs://bkt/run/step2"


def test_save_steps_take_collaborators_not_the_writer():
    """The save package imports neither the writer, the package `gcsckpt.dcp`, nor the load
    path; the writer imports the steps; no cycle."""
    graph = module_graph(gcsckpt.dcp)
    steps = {n for n in graph if n.startswith("gcsckpt.dcp.save")}
    assert {"gcsckpt.dcp.save.split", "gcsckpt.dcp.save.commit"} <= steps
    for name in steps:
        bad = {e for e in graph[name] if e in ("gcsckpt.dcp", "gcsckpt.dcp.writer")}
        bad |= {e for e in graph[name] if e.startswith(("gcsckpt.dcp.load", "gcsckpt.dcp.reader"))}
        assert not bad, f"{name} imports {sorted(bad)}"
    assert {"gcsckpt.dcp.save.split", "gcsckpt.dcp.save.commit"} <= graph["gcsckpt.dcp.writer"]
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a cycle
    assert order.index("gcsckpt.dcp.save.commit") < order.index("gcsckpt.dcp.writer")
