"""One generation per object per load, through LocalGCS: a data object overwritten (same size,
new bytes) after `.metadata` was written, or between two GETs of one load, fails the load with
"object changed during load" naming the object and both generations, and commits nothing."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import SerializationFormat

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import ObjectStore
from gcsckpt.testing import Fault, FaultProxy, LocalGCS

BUCKET = "generations"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _state(value: float):
    return {"w": torch.full((64, 1024), value), "b": torch.full((16,), value)}


def _blank():
    return _state(0.0)


def _save(gcs, name: str, value: float, fmt=SerializationFormat.TORCH_SAVE) -> str:
    writer = GCSStorageWriter(
        f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint, thread_count=1, serialization_format=fmt
    )
    dcp.save(_state(value), storage_writer=writer)
    (data,) = [
        n for n in ObjectStore(gcs.endpoint).list(BUCKET, f"{name}/") if n.endswith(".distcp")
    ]
    return data


def _twin(gcs, name: str, fmt=SerializationFormat.TORCH_SAVE) -> tuple[str, bytes]:
    """Saves checkpoint `name` (values 1.0) and another of the same layout (values 2.0); returns
    the first's data object and the second's bytes (same size, other values) to put over it."""
    data = _save(gcs, name, 1.0, fmt)
    other = _save(gcs, f"{name}-other", 2.0, fmt)
    new_bytes = gcs.get(BUCKET, other)
    assert len(new_bytes) == len(gcs.get(BUCKET, data)) and new_bytes != gcs.get(BUCKET, data)
    return data, new_bytes


def _generation(gcs, name: str) -> int:
    return ObjectStore(gcs.endpoint).stat(BUCKET, name).generation


class _Recording(DefaultLoadPlanner):
    """Records commit_tensor calls; runs `hook` once, at the first resolve_tensor (for a
    SAFETENSORS load: after the blob headers were read, before any tensor's bytes)."""

    def __init__(self, hook=None):
        super().__init__()
        self.hook = hook
        self.committed: list[str] = []

    def resolve_tensor(self, read_item):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().resolve_tensor(read_item)

    def commit_tensor(self, read_item, tensor):
        self.committed.append(read_item.dest_index.fqn)
        super().commit_tensor(read_item, tensor)


def _untouched(state) -> bool:
    return all(torch.equal(state[k], v) for k, v in _blank().items())


def test_overwrite_after_metadata_fails_before_any_data_get(gcs):
    data, new_bytes = _twin(gcs, "after-meta")
    meta_generation = _generation(gcs, "after-meta/.metadata")
    gcs.put(BUCKET, data, new_bytes)  # same size, new values, after the commit
    new_generation = _generation(gcs, data)
    assert new_generation > meta_generation
    state, planner = _blank(), _Recording()
    with FaultProxy(gcs.endpoint, []) as proxy:
        reader = GCSStorageReader(f"gs://{BUCKET}/after-meta", endpoint=proxy.endpoint)
        with pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader, planner=planner)
        data_gets = [p for m, p in proxy.request_log if ".distcp" in p and "alt=media" in p]
    message = str(info.value)
    assert f"gs://{BUCKET}/{data}: object changed during load" in message
    assert (
        f"generation {new_generation} was written after .metadata (generation {meta_generation})"
    ) in message
    # Refused at planning, from the listing: no byte of the object was read, nothing committed.
    assert data_gets == [] and planner.committed == [] and _untouched(state)


def test_copied_checkpoint_loads_without_the_commit_order_check(gcs):
    # Generations in copy order (the data object "copied" after `.metadata`), same bytes.
    data = _save(gcs, "copied", 1.0)
    gcs.put(BUCKET, data, gcs.get(BUCKET, data))
    state = _blank()
    reader = GCSStorageReader(
        f"gs://{BUCKET}/copied", endpoint=gcs.endpoint, check_commit_order=False
    )
    dcp.load(state, storage_reader=reader)
    assert all(torch.equal(state[k], v) for k, v in _state(1.0).items())
    stats = reader.load_stats
    assert (stats.list_requests, stats.pinned_objects, stats.metadata_requests) == (1, 1, 1)


def test_overwrite_between_two_gets_of_one_load_fails_and_commits_nothing(gcs):
    # SAFETENSORS: the blob header is read first (one GET), the tensors' bytes after (others,
    # straight into the targets). The object is replaced in between.
    data, new_bytes = _twin(gcs, "between", SerializationFormat.SAFETENSORS)
    old_generation = _generation(gcs, data)
    state = _blank()
    planner = _Recording(hook=lambda: gcs.put(BUCKET, data, new_bytes))
    with FaultProxy(gcs.endpoint, []) as proxy:
        reader = GCSStorageReader(f"gs://{BUCKET}/between", endpoint=proxy.endpoint)
        with pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader, planner=planner)
        data_gets = [p for m, p in proxy.request_log if ".distcp" in p and "alt=media" in p]
    message = str(info.value)
    assert re.search(
        rf"gs://{BUCKET}/{re.escape(data)} bytes=\d+-\d+: object changed during load: generation "
        rf"{old_generation} is no longer the object's \(HTTP 404 not found\)",
        message,
    ), message
    # Every GET of the object, the header's included, asked for the one pinned generation.
    assert len(data_gets) >= 2 and all(f"generation={old_generation}" in p for p in data_gets)
    assert planner.committed == [] and _untouched(state)  # no byte of the new version landed


def test_without_a_listing_the_header_generation_is_pinned_for_the_data(gcs):
    # The LIST (the load's second request) fails: no pins from a listing. The header's GET
    # names generation G; the object is replaced before the tensors' GETs, which ask for G.
    data, new_bytes = _twin(gcs, "unlisted", SerializationFormat.SAFETENSORS)
    old_generation = _generation(gcs, data)
    state = _blank()
    planner = _Recording(hook=lambda: gcs.put(BUCKET, data, new_bytes))
    no_list = Fault(kind="status", status=404, media_only=False, nth=2)
    with FaultProxy(gcs.endpoint, [no_list]) as proxy:
        reader = GCSStorageReader(f"gs://{BUCKET}/unlisted", endpoint=proxy.endpoint)
        with pytest.warns(UserWarning) as warned, pytest.raises(CheckpointException) as info:
            dcp.load(state, storage_reader=reader, planner=planner)
        log = proxy.request_log
    assert "/o?" in log[1][1] and "alt=media" not in log[1][1]  # the LIST that failed
    cannot_list = [str(w.message) for w in warned if "cannot list" in str(w.message)]
    assert cannot_list == [
        f"rank 0: cannot list gs://{BUCKET}/unlisted (gs://{BUCKET}/unlisted/*: not found"
        " (HTTP 404)); each object is read at the generation its first read names, and its"
        " size is checked by a 1-byte GET"
    ]
    data_gets = [p for _, p in log if ".distcp" in p and "alt=media" in p]
    assert "generation=" not in data_gets[0]  # the header's GET, unpinned
    assert len(data_gets) >= 2 and all(f"generation={old_generation}" in p for p in data_gets[1:])
    assert f"object changed during load: generation {old_generation} is no longer" in str(
        info.value
    )
    assert planner.committed == [] and _untouched(state)


def test_metadata_replaced_after_it_was_read_fails(gcs):
    _save(gcs, "meta-swap", 1.0)
    read_generation = _generation(gcs, "meta-swap/.metadata")

    class _SwapsMetadata(_Recording):
        def create_global_plan(self, plans):  # after every rank read `.metadata`
            gcs.put(BUCKET, "meta-swap/.metadata", gcs.get(BUCKET, "meta-swap/.metadata"))
            return super().create_global_plan(plans)

    state, planner = _blank(), _SwapsMetadata()
    reader = GCSStorageReader(f"gs://{BUCKET}/meta-swap", endpoint=gcs.endpoint)
    with pytest.raises(CheckpointException) as info:
        dcp.load(state, storage_reader=reader, planner=planner)
    now = _generation(gcs, "meta-swap/.metadata")
    assert (
        f"gs://{BUCKET}/meta-swap/.metadata: object changed during load: read at generation "
        f"{read_generation}, now generation {now} (replaced after it was read)"
    ) in str(info.value)
    assert planner.committed == [] and _untouched(state)


def test_every_get_of_a_load_carries_the_pinned_generation(gcs):
    data = _save(gcs, "pinned", 3.0)
    generation = _generation(gcs, data)
    state = _blank()
    with FaultProxy(gcs.endpoint, []) as proxy:
        reader = GCSStorageReader(
            f"gs://{BUCKET}/pinned",
            endpoint=proxy.endpoint,
            max_inflight_bytes=64 << 10,  # several windows, one submit each
            chunk_bytes=64 << 10,
            verify=False,  # verified GETs are cut only at block starts (1 MiB): fewer GETs
        )
        dcp.load(state, storage_reader=reader)
        data_gets = [p for m, p in proxy.request_log if ".distcp" in p and "alt=media" in p]
    assert all(torch.equal(state[k], v) for k, v in _state(3.0).items())
    assert reader.load_stats.windows >= 2 and len(data_gets) >= 4
    assert all(f"generation={generation}" in p for p in data_gets), data_gets
