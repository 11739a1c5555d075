"""Single-process save/load through a local GCS endpoint: formats, dtypes, BYTE_IO, stats,
overwrite rules, interrupted saves and stock safetensors checkpoints."""

from __future__ import annotations

import pickle

import pytest
import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
from states import blank_like, compare, plain_state
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

BUCKET = "ckpt"
FORMATS = list(SerializationFormat)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _save(gcs, name, state, **kw):
    url = f"gs://{BUCKET}/{name}"
    dcp.save(state, storage_writer=GCSStorageWriter(url, endpoint=gcs.endpoint, **kw))
    return url


def _load(gcs, url, state, **kw) -> GCSStorageReader:
    reader = GCSStorageReader(url, endpoint=gcs.endpoint, **kw)
    dcp.load(state, storage_reader=reader)
    return reader


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_plain_roundtrip_and_counters(gcs, fmt):
    expected = plain_state()
    url = _save(gcs, f"plain/{fmt.value}", plain_state(), serialization_format=fmt)
    state = blank_like(plain_state())
    before = gcs.request_count()
    reader = _load(gcs, url, state)
    media_gets = gcs.request_count() - before
    count, bad = compare(state, expected)
    assert bad == [] and count == 15
    stats = reader.load_stats
    assert stats.metadata_requests == 1
    assert media_gets == stats.requests + 1  # every data GET is counted, plus `.metadata`
    assert stats.read_items == 12 and stats.bytes_items == 3 and stats.tensor_items == 9
    assert stats.objects == 4  # thread_count=4 objects for this rank
    if fmt == SerializationFormat.TORCH_SAVE:
        assert stats.requests == stats.objects  # one coalesced GET per object
        assert stats.bytes_fetched == stats.bytes_needed
    else:
        # Per object: header probe (+ the rest of headers longer than these tiny blobs) + data.
        assert stats.requests <= 3 * stats.objects
        assert stats.direct_items == 8  # all but `t` (its target is transposed) land in place


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_small_windows_stream_many_items(gcs, fmt):
    state = {f"t{i}": torch.full((100 + i,), float(i)) for i in range(60)}
    state["m"] = {"k": list(range(50))}
    url = _save(gcs, f"windows/{fmt.value}", state, serialization_format=fmt, thread_count=1)
    target = blank_like(state)
    reader = _load(gcs, url, target, max_inflight_bytes=8192)
    assert compare(target, state) == (110, [])
    if fmt == SerializationFormat.TORCH_SAVE:
        assert reader.load_stats.windows > 10  # bounded memory: many 4 KiB windows


def test_overwrite_false_refuses_existing_checkpoint(gcs):
    url = _save(gcs, "guarded", {"x": torch.ones(3)})
    with pytest.raises(CheckpointException, match="already exists and overwrite=False"):
        _save(gcs, "guarded", {"x": torch.zeros(3)})
    state = {"x": torch.empty(3)}
    _load(gcs, url, state)
    assert torch.equal(state["x"], torch.ones(3))


def test_overwrite_true_replaces_checkpoint(gcs):
    _save(gcs, "replaced", {"x": torch.ones(3)})
    url = _save(gcs, "replaced", {"x": torch.full((3,), 7.0)}, overwrite=True)
    state = {"x": torch.empty(3)}
    _load(gcs, url, state)
    assert torch.equal(state["x"], torch.full((3,), 7.0))


class _FailingPlanner(DefaultSavePlanner):
    def resolve_data(self, write_item):
        if write_item.index.fqn == "boom":
            raise RuntimeError("serializer died")
        return super().resolve_data(write_item)


def test_interrupted_save_never_looks_complete(gcs):
    state = {"a": torch.ones(1000), "boom": torch.ones(10), "c": torch.ones(5)}
    url = f"gs://{BUCKET}/interrupted"
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint, thread_count=1)
    with pytest.raises(CheckpointException, match="serializer died"):
        dcp.save(state, storage_writer=writer, planner=_FailingPlanner())
    store = ObjectStore(gcs.endpoint)
    assert store.list(BUCKET, "interrupted/") == []  # the object being written was discarded
    with pytest.raises(
        CheckpointException,
        match=r"no checkpoint at gs://ckpt/interrupted \(gs://ckpt/interrupted/\.metadata does not",
    ):
        _load(gcs, url, {"a": torch.empty(1000)})


def test_missing_checkpoint_names_the_object(gcs):
    with pytest.raises(CheckpointException, match=r"gs://ckpt/nothing/here/\.metadata"):
        _load(gcs, f"gs://{BUCKET}/nothing/here", {"a": torch.empty(1)})


def test_stock_local_safetensors_checkpoint_loads(gcs, tmp_path):
    expected = plain_state()
    expected["t"] = expected["t"].contiguous()  # torch's safetensors writer refuses views
    writer = dcp.FileSystemWriter(
        str(tmp_path), serialization_format=SerializationFormat.SAFETENSORS
    )
    dcp.save(expected, storage_writer=writer)
    # `.metadata` last, as the writer commits it (then no data object is newer than it).
    for path in sorted(tmp_path.iterdir(), key=lambda p: p.name == ".metadata"):
        gcs.put(BUCKET, f"stock-st/{path.name}", path.read_bytes())
    state = blank_like(expected)
    reader = _load(gcs, f"gs://{BUCKET}/stock-st", state)
    assert compare(state, expected) == (15, [])
    assert reader.load_stats.direct_items == 9


def test_our_safetensors_blob_is_valid_safetensors(gcs):
    state = {"w": torch.randn(4, 3), "b": torch.arange(6).to(torch.bfloat16), "meta": {"a": 1}}
    url = _save(
        gcs, "st-valid", state, serialization_format=SerializationFormat.SAFETENSORS, thread_count=1
    )
    metadata = pickle.loads(gcs.get(BUCKET, "st-valid/.metadata"))
    infos = {index.fqn: info for index, info in metadata.storage_data.items()}
    data = gcs.get(BUCKET, f"st-valid/{infos['w'].relative_path}")
    tensors = safetensors.torch.load(data[infos["w"].offset :])
    assert torch.equal(tensors["w"], state["w"]) and torch.equal(tensors["b"], state["b"])
    assert infos["b"].offset == infos["w"].offset and infos["b"].length == 12  # as torch writes
    assert url.endswith("st-valid")


def test_partial_region_reads_only_needed_bytes(gcs):
    full = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
    url = _save(gcs, "region", {"w": full}, serialization_format=SerializationFormat.SAFETENSORS)
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    class RowsPlanner(DefaultLoadPlanner):
        """Loads rows 16..47 of `w` into a (32, 32) tensor, like a Shard(0) rank would."""

        def create_local_plan(self):
            from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
            from torch.distributed.checkpoint.planner import LoadPlan

            chunk = ChunkStorageMetadata(offsets=torch.Size([16, 0]), sizes=torch.Size([32, 32]))
            md = self.metadata.state_dict_metadata["w"]
            return LoadPlan(create_read_items_for_chunk_list("w", md, [chunk]))

        def resolve_tensor(self, read_item):
            return self.state_dict["w"].narrow(0, read_item.dest_offsets[0], read_item.lengths[0])

    state = {"w": torch.zeros(32, 32)}
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    dcp.load(state, storage_reader=reader, planner=RowsPlanner())
    assert torch.equal(state["w"], full[16:48])
    assert reader.load_stats.bytes_needed - 0 < full.nbytes  # only the rows asked for (+header)
    assert reader.load_stats.direct_items == 1


def test_big_tensor_over_256_mib(gcs):
    big = torch.arange(68 * 2**20, dtype=torch.int32)  # 272 MiB
    url = _save(gcs, "big", {"big": big, "small": torch.ones(3)}, thread_count=2)
    state = {"big": torch.zeros_like(big), "small": torch.zeros(3)}
    reader = _load(gcs, url, state)
    assert torch.equal(state["big"], big) and torch.equal(state["small"], torch.ones(3))
    assert reader.load_stats.bytes_fetched == reader.load_stats.bytes_needed > big.nbytes


def test_gcs_planner_and_collector_state(gcs):
    import gc

    from gcsckpt.dcp import GCSLoadPlanner

    expected = plain_state()
    url = _save(gcs, "planner", plain_state())
    state = blank_like(plain_state())
    reader = GCSStorageReader(url, endpoint=gcs.endpoint)
    dcp.load(state, storage_reader=reader, planner=GCSLoadPlanner())
    assert compare(state, expected) == (15, [])
    assert gc.isenabled() and gc.get_freeze_count() == 0  # paused and frozen only during load


def test_collector_state_restored_after_failed_load(gcs):
    import gc

    url = _save(gcs, "gc-fail", {"x": torch.ones(4)})
    (data,) = [n for n in ObjectStore(gcs.endpoint).list(BUCKET, "gc-fail/") if "distcp" in n]
    gcs.put(BUCKET, data, b"garbage")
    with pytest.raises(CheckpointException, match=data):
        _load(gcs, url, {"x": torch.zeros(4)})
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_rank_local_metadata_without_collectives(gcs):
    state = {"x": torch.arange(5.0), "m": {"k": "v"}}
    url = f"gs://{BUCKET}/local-md"
    writer = GCSStorageWriter(url, endpoint=gcs.endpoint)
    dcp.save(state, storage_writer=writer, use_collectives=False)
    names = sorted(ObjectStore(gcs.endpoint).list(BUCKET, "local-md/"))
    assert "local-md/__0.metadata" in names and "local-md/.metadata" not in names
    target = {"x": torch.zeros(5), "m": {"k": ""}}
    reader = _load(gcs, url, target)  # global `.metadata` is missing: DCP asks for rank 0's
    assert torch.equal(target["x"], state["x"]) and target["m"] == {"k": "v"}
    assert reader.load_stats.metadata_requests == 1


def test_cached_plan_without_collectives_names_each_saves_own_objects(gcs):
    # torch hands saves 2..N the first save's finished plan; without collectives it also drops
    # the prefix prepare_local_plan set, so write_data must name this save's objects itself.
    from gcsckpt.dcp import GCSSavePlanner

    planner, store, url = GCSSavePlanner(), ObjectStore(gcs.endpoint), f"gs://{BUCKET}/cached-nc"
    names, reused = [], GCSSavePlanner.plans_reused
    for step in range(2):
        state = {"x": torch.full((64,), float(step))}
        writer = GCSStorageWriter(url, endpoint=gcs.endpoint, overwrite=True)
        dcp.save(state, storage_writer=writer, planner=planner, use_collectives=False)
        names.append({n for n in store.list(BUCKET, "cached-nc/") if n.endswith(".distcp")})
    assert GCSSavePlanner.plans_reused - reused == 1
    assert len(names[0]) == 1 and len(names[1] - names[0]) == 1  # save 2 wrote a new object
    target = {"x": torch.zeros(64)}
    _load(gcs, url, target)
    assert torch.equal(target["x"], torch.full((64,), 1.0))


def test_write_side_stream_transform_loads_everywhere(gcs, tmp_path):
    # torch's ZStandard needs zstandard/pyzstd (not installed here); torch's own Rot13 test
    # transform exercises the same path: every item goes through `_extensions` on the way out.
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
    from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms
    from torch.testing._internal.distributed.checkpoint_utils import (
        Rot13Example,
        get_test_extension_registry,
    )

    expected = plain_state()
    expected["t"] = expected["t"].contiguous()
    name = "rot13"
    url = _save(gcs, name, plain_state(), _extensions=[Rot13Example()])
    metadata = pickle.loads(gcs.get(BUCKET, f"{name}/.metadata"))
    descriptors = {
        index.fqn: info.transform_descriptors for index, info in metadata.storage_data.items()
    }
    byte_items = [d for fqn, d in descriptors.items() if fqn.startswith("meta.")]
    assert byte_items and all(d == ["stream.rot13/1"] for d in byte_items)  # BYTE_IO: always
    assert set(map(tuple, descriptors.values())) == {("stream.rot13/1",)}
    info = next(i for x, i in metadata.storage_data.items() if x.fqn == "t")
    stored = gcs.get(BUCKET, f"{name}/{info.relative_path}")
    assert stored[info.offset : info.offset + 2] != b"PK"  # not a plain torch.save zip

    registry = get_test_extension_registry()
    state = blank_like(expected)
    _load(gcs, url, state, extension_registry=registry)
    assert compare(state, expected) == (15, [])

    for obj in ObjectStore(gcs.endpoint).list(BUCKET, f"{name}/"):
        (tmp_path / obj.rsplit("/", 1)[1]).write_bytes(gcs.get(BUCKET, obj))
    state = blank_like(expected)
    dcp.load(state, storage_reader=dcp.FileSystemReader(tmp_path, _extension_registry=registry))
    assert compare(state, expected) == (15, [])

    fsspec_reader = FsspecReader(url, token="anon", endpoint_url=gcs.endpoint)
    fsspec_reader.transforms = _StorageReaderTransforms(registry)  # it takes no registry
    state = blank_like(expected)
    dcp.load(state, storage_reader=fsspec_reader)
    assert compare(state, expected) == (15, [])


def test_stream_transforms_need_torch_save():
    from torch.testing._internal.distributed.checkpoint_utils import Rot13Example

    with pytest.raises(ValueError, match="need SerializationFormat.TORCH_SAVE"):
        GCSStorageWriter(
            f"gs://{BUCKET}/x",
            serialization_format=SerializationFormat.SAFETENSORS,
            _extensions=[Rot13Example()],
        )


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
def test_save_splits_into_objects_of_object_bytes_under_a_tiny_staging_budget(gcs, fmt):
    # 10 tensors of 256 KiB (2.5 MiB) at 512 KiB per object -> 5 objects; a 1-byte staging
    # budget stages one object at a time, and the save still completes.
    import google_crc32c

    state = {f"t{i}": torch.full((64 << 10,), float(i)) for i in range(10)}
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/split/{fmt.value}",
        endpoint=gcs.endpoint,
        thread_count=1,
        object_bytes=512 << 10,
        staging_bytes=1,
        serialization_format=fmt,
    )
    dcp.save(state, storage_writer=writer)
    assert len(writer.uploads) == 5
    for upload in writer.uploads:
        stored = gcs.get(BUCKET, upload.object)
        assert upload.size == len(stored) >= 2 * (256 << 10)  # two tensors per object
        assert upload.crc32c == int.from_bytes(google_crc32c.Checksum(stored).digest(), "big")
    names = ObjectStore(gcs.endpoint).list(BUCKET, f"split/{fmt.value}/")
    assert sorted(names) == sorted(
        [u.object for u in writer.uploads] + [f"split/{fmt.value}/.metadata"]
    )
    loaded = {k: torch.zeros_like(v) for k, v in state.items()}
    _load(gcs, f"gs://{BUCKET}/split/{fmt.value}", loaded)
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_writer_refuses_bad_upload_options():
    for kw in ({"object_bytes": 0}, {"staging_bytes": 0}, {"max_inflight_uploads": 0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            GCSStorageWriter(f"gs://{BUCKET}/x", **kw)
    with pytest.raises(ValueError, match="multiple of 256 KiB"):
        GCSStorageWriter(f"gs://{BUCKET}/x", chunk_bytes=1000)
