"""GCSStorageReader: a DCP StorageReader for `gs://bucket/prefix` checkpoints.

Reads the layout torch 2.13's FileSystemWriter/FsspecWriter writes (per-rank `.distcp` objects,
a pickled `.metadata`), in either serialization format. This module holds the DCP calls only;
the load itself is `gcsckpt.dcp.load`, one module per step:

    read_metadata          `.metadata`'s index section (one or two ranged GETs, one generation)
                           as a lazy Metadata; without an index, the pickle (`load.metadata_read`)
    prepare_local_plan     items sorted by (object, offset)
    prepare_global_plan    one listing on the coordinator pins a generation per data object
                           (and, with read_once, marks the load as shared among its ranks)
    read_data              plan -> extents checked -> windows -> range reader -> decode into
                           the planner's tensors (ranges other ranks need too: `load.replicas`);
                           then its connections are closed

Why: every ReadItem becomes one byte range and all ranges of a memory window go to the C++ range
reader at once (joined across small gaps, split, many GETs in flight with the GIL released), so
requests scale with objects and megabytes, not items; one generation per object per load
(`gcsckpt.dcp.load.generations`), so a load never combines bytes of two versions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from functools import partial
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from gcsckpt.dcp import checksums
from gcsckpt.dcp.gc_control import HeapFreeze, collector_paused
from gcsckpt.dcp.load.decode import Decoder
from gcsckpt.dcp.load.extents import check_extents
from gcsckpt.dcp.load.generations import Pins, check_metadata_read
from gcsckpt.dcp.load.listing import (
    all_paths,
    block_sums,
    known_sizes,
    list_pins,
    object_size,
    plan_paths,
)
from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.metadata_read import read_metadata_object
from gcsckpt.dcp.load.pipeline import run_windows
from gcsckpt.dcp.load.plan import make_windows, plan_item_ranges, sort_items, storage_entries
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.replicas import SharedReads, exchange_for
from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.dcp.missing import CheckpointNotFoundError, quiet_torch_fallback
from gcsckpt.dcp.paths import (
    METADATA_NAME,
    CheckpointLocation,
    GCSCheckpointId,
    parse_checkpoint_id,
)
from gcsckpt.io import RangeReader, RangeReadError
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.objects import ObjectStore, store_options

# Buffer memory for bytes in flight plus bytes being decoded: two windows of half this each.
# 256 MiB keeps ~16 x 8 MiB GETs in flight per window (the local endpoint's ceiling was reached
# with 16 parallel 8 MiB GETs) while peak RSS stays within state bytes + 256 MiB.
DEFAULT_INFLIGHT_BYTES = 256 << 20
# Off: against the local endpoint a replica's second GET cost less than the gloo exchange that
# replaces it (hsdp dpr2dp4 3.85 s off, 4.29 s on; docs/measurements.md, "Replicated layouts").
# On halves storage bytes (ratio 2.06 -> 0.99): worth it where GETs are billed or network-bound.
DEFAULT_READ_ONCE = False


class GCSStorageReader(GCSCheckpointId, StorageReader):
    """Loads a DCP checkpoint from `gs://bucket/prefix` (torch 2.13 FileSystemWriter layout).

    Args:
        checkpoint_id: `gs://bucket[/prefix]`; may instead come later via `reset`/`dcp.load`.
        endpoint: GCS endpoint URL; None -> $STORAGE_EMULATOR_HOST, else storage.googleapis.com.
        token_provider: callable returning an OAuth2 access token, used for any endpoint;
            None -> google-auth ADC, or no token for an emulator endpoint.
        max_inflight_requests, chunk_bytes, coalesce_gap_bytes: passed to the range reader
            (None -> its benchmarked defaults): concurrent GETs, largest GET (bytes), largest
            gap (bytes) read through to merge two neighbouring ranges.
        max_inflight_bytes: bound on buffer memory for fetched-but-not-yet-copied bytes (bytes,
            default 256 MiB, two windows of half each); also passed to the range reader.
        retry: a `gcsckpt.io.RetryPolicy` (None -> its defaults) for range GETs and the
            `.metadata` GET alike (attempts and total deadline).
        stall_timeout_s: a request that receives no byte for this long (seconds) is retried
            (None -> the range reader's 30 s); bounds a silent endpoint's cost.
        extension_registry: torch DCP ExtensionRegistry for items saved with stream transforms.
        tune_gc: pause Python's cyclic garbage collector while unpickling `.metadata` and
            reading, and freeze the heap from `read_metadata` to the end of `read_data`
            (see `gc_control`; several times less CPU per load). False leaves gc alone.
        check_commit_order: fail a load whose data objects are newer than `.metadata`
            (rewritten after the checkpoint was committed). False for checkpoints copied object
            by object, whose generations follow the copy's order; changes during the load are
            detected either way (see `gcsckpt.dcp.load.generations`).
        read_once: in a load over a process group, fetch each byte range that several ranks
            read (HSDP replicas) on one of them and send it to the others (`load.replicas`):
            storage bytes = checkpoint bytes. Needs every rank's plan to carry the
            coordinator's storage_data (DefaultLoadPlanner, GCSLoadPlanner). False: each rank
            fetches all its ranges. No effect without a process group (no_dist).
        process_group: the group `dcp.load` was given (None: the default group).
        verify: check every byte of objects that have block checksums (what GCSStorageWriter
            saves; `gcsckpt.dcp.checksums`) against its block's CRC-32C before committing it
            (default True). A block that does not match is fetched once more, then the load
            fails with CheckpointReadError naming rank, object, generation, byte range,
            expected and computed CRC-32C. Objects without checksums (stock or peer saves)
            load unverified; `load_stats.bytes_verified` / `bytes_unverified` count both.

    After each load, `load_stats` (a LoadStats) holds this rank's counters. `read_data` closes
    the range reader and the `.metadata`/listing client when it ends (their sockets and threads
    do not wait for garbage collection); the next load opens new ones.

    Raises (from the DCP calls): ValueError for a bad checkpoint id or unsafe `.metadata`;
    FileNotFoundError if `.metadata` is missing; CheckpointReadError for any failed range,
    undecodable item, or object changed during the load (naming rank, object, byte range or
    generations, and cause).
    """

    def __init__(
        self,
        checkpoint_id: str | os.PathLike | None = None,
        *,
        endpoint: str | None = None,
        token_provider=None,
        max_inflight_requests: int | None = None,
        max_inflight_bytes: int | None = None,
        chunk_bytes: int | None = None,
        coalesce_gap_bytes: int | None = None,
        retry=None,
        stall_timeout_s: float | None = None,
        extension_registry=None,
        tune_gc: bool = True,
        check_commit_order: bool = True,
        read_once: bool = DEFAULT_READ_ONCE,
        process_group=None,
        verify: bool = True,
    ) -> None:
        super().__init__()
        self.location: CheckpointLocation | None = None
        if checkpoint_id is not None:
            self.location = parse_checkpoint_id(checkpoint_id)
        self.endpoint = endpoint
        self.token_provider = token_provider
        self.max_inflight_bytes = max_inflight_bytes or DEFAULT_INFLIGHT_BYTES
        self._reader_options = {
            k: v
            for k, v in dict(
                max_inflight_requests=max_inflight_requests,
                max_inflight_bytes=max_inflight_bytes,
                chunk_bytes=chunk_bytes,
                coalesce_gap_bytes=coalesce_gap_bytes,
                retry=retry,
                token_provider=token_provider,
                stall_timeout_s=stall_timeout_s,
            ).items()
            if v is not None
        }
        self._store_options = store_options(retry, stall_timeout_s)
        self._transforms = _StorageReaderTransforms(extension_registry)
        self._range_reader: RangeReader | None = None
        self._store: ObjectStore | None = None
        self.metadata: Metadata | None = None
        self.storage_data: dict = {}
        self.rank = 0
        self.load_id = str(uuid.uuid4())
        self.load_stats = LoadStats()
        self.tune_gc = tune_gc
        self.check_commit_order = check_commit_order
        self.read_once = read_once
        self.process_group = process_group
        self.verify = verify
        self._checksums: dict = {}  # relative path -> checksums.ObjectRecord
        self._metadata_name = METADATA_NAME
        self._metadata_generation: int | None = None
        self._heap = HeapFreeze()

    # -- DCP StorageReader API -----------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Starts a new load, optionally of another checkpoint (ValueError if the id is bad)."""
        if checkpoint_id is not None:
            self.location = parse_checkpoint_id(checkpoint_id)
        self.metadata, self.storage_data = None, {}
        self._metadata_name, self._metadata_generation = METADATA_NAME, None
        self.load_id = str(uuid.uuid4())
        self.load_stats = LoadStats()
        self._heap.thaw()

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Reads `.metadata` (or `__{rank}.metadata` with `rank=`) through
        `load.metadata_read`: its index section as a lazy Metadata, or without an index its
        pickle through `metadata_codec`'s restricted unpickler; keeps the generation read.

        Raises:
            CheckpointNotFoundError (a FileNotFoundError): the object is missing; the message
                names the prefix (torch's fallback warnings about it are not printed, see
                `gcsckpt.dcp.missing`). MetadataIndexError (a ValueError): a corrupt index
                section. ValueError/UnsafeMetadataError: it is not a safe DCP Metadata.
        """
        location = self._location()
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        start = time.perf_counter()
        try:
            heap = self._heap if self.tune_gc else None
            read = read_metadata_object(self._object_store(), location, name, heap)
        except FileNotFoundError:
            quiet_torch_fallback()
            # rank: torch's per-rank fallback after `.metadata` failed, for any cause
            what = "no checkpoint at " + location.url() if rank is None else "no per-rank metadata"
            raise CheckpointNotFoundError(f"{what} ({location.url(name)} does not exist)") from None
        self._metadata_name, self._metadata_generation = name, read.generation
        metadata = read.metadata
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        stats = self.load_stats
        stats.metadata_requests += read.requests
        stats.metadata_bytes += read.bytes_read
        stats.metadata_s += time.perf_counter() - start
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        """Keeps `metadata` (its storage_data maps storage index -> _StorageInfo)."""
        if metadata.storage_data is None:
            raise ValueError(f"{self._location().url(METADATA_NAME)}: storage_data is missing")
        self.metadata = metadata
        self.storage_data = metadata.storage_data
        self._checksums = checksums.records_of(metadata) if self.verify else {}
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.rank = rank
        self.load_stats.rank = rank

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Sorts the rank's items by (object, offset) so ranges come out in object order."""
        items = sort_items(plan.items, self.storage_data, self._errors())
        return dataclasses.replace(plan, items=items)

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """Pins one generation per data object of the checkpoint for the whole load (one LIST
        of the prefix) and gives each plan, as its storage_data, the pins of the objects it
        reads (all pins for a plan without items: `GCSLoadPlanner` keeps items on the ranks);
        with read_once and more than one plan, wrapped in `SharedReads`.

        Raises:
            CheckpointReadError: "object changed during load" (see `load.generations`).
        """
        if all(plan.storage_data is not None for plan in plans):
            return plans  # a planner's own storage_data: each rank lists for itself
        try:
            pins = self._pins(all_paths(self.storage_data))
        except BaseException:
            self._heap.thaw()  # read_data, which thaws it and closes the clients, will not run
            self._close_clients()
            raise
        share = self.read_once and len(plans) > 1
        out = []
        for plan in plans:
            if plan.storage_data is None:
                data = pins.only(plan_paths(self.storage_data, plan.items)) if plan.items else pins
                data = SharedReads(data, len(plans)) if share else data
                plan = dataclasses.replace(plan, storage_data=data)
            out.append(plan)
        return out

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Loads every item of `plan` into the planner's tensors (see module doc).

        Returns:
            a completed Future (all bytes are in place when this returns).

        Raises:
            CheckpointReadError: any range failed or any item could not be decoded; nothing
                later than the failure is committed, and the load must not be treated as done.
        """
        start = time.perf_counter()
        stats = self.load_stats
        stats.rank = self.rank
        stats.read_items = len(plan.items)
        errors = self._errors()
        reader = self._reader()
        before = reader.stats()
        pins, exchange = plan.storage_data, None
        try:
            if isinstance(pins, SharedReads):
                paths = sorted(all_paths(self.storage_data))
                args = (paths, self.max_inflight_bytes, errors, stats)
                pins, exchange = pins.pins, exchange_for(self.process_group, pins.ranks, *args)
            infos = storage_entries(plan.items, self.storage_data, errors)
            paths = {info.relative_path for info in infos}
            if not isinstance(pins, Pins):  # the coordinator's pins did not reach this plan
                pins = self._pins(paths)
            check_metadata_read(pins, self._metadata_name, self._metadata_generation, errors)
            stats.pinned_objects = len(pins.objects)
            sums = block_sums(self._checksums, paths, errors)
            ranges = CheckpointRanges(reader, self._location(), stats, pins.objects, sums)
            with collector_paused() if self.tune_gc else contextlib.nullcontext():
                item_plan = plan_item_ranges(
                    plan.items, self.metadata, planner.resolve_tensor, ranges, errors, infos
                )
                size_of = partial(object_size, self._object_store(), self._location())
                check_extents(
                    item_plan.item_ranges, known_sizes(pins, sums), ranges, errors, size_of
                )
                stats.count_plan(item_plan)
                stats.plan_s = time.perf_counter() - start
                windows = make_windows(item_plan.item_ranges, max(1, self.max_inflight_bytes // 2))
                decoder = Decoder(planner, self._transforms, errors, stats)
                if exchange is None:
                    run_windows(windows, ranges, decoder.consume, stats)
                else:
                    exchange.run(item_plan.item_ranges, ranges, decoder.consume)
                if rereads := decoder.take_rereads():  # archives unlike their group's template
                    window_bytes = max(1, self.max_inflight_bytes // 2)
                    run_windows(make_windows(rereads, window_bytes), ranges, decoder.consume, stats)
                # Released while the collector is still off, so turning it back on does not
                # start a collection over the load's ~2 objects per item.
                item_plan = windows = decoder = rereads = infos = None
        except Exception as e:
            if exchange is not None:
                exchange.abandon(e)  # ranks waiting on this one's first collective fail too
            if isinstance(e, RangeReadError):
                raise errors.from_range_error(e) from e
            raise
        finally:
            self._heap.thaw()
            stats.count_reader(before, reader.stats())
            self._close_clients()
            stats.total_s = time.perf_counter() - start
        future: Future[None] = Future()
        future.set_result(None)
        return future

    # -- collaborators ----------------------------------------------------------------------------
    def _location(self) -> CheckpointLocation:
        if self.location is None:
            raise ValueError("GCSStorageReader has no checkpoint_id; pass 'gs://bucket/prefix'")
        return self.location

    def _errors(self) -> LoadErrors:
        return LoadErrors(self._location(), self.rank, self._live_generation)

    def _live_generation(self, name: str) -> int | None:
        """The live generation of object `name` in the checkpoint's bucket, None if absent."""
        info = self._object_store().stat(self._location().bucket, name)
        return None if info is None else info.generation

    def _object_store(self) -> ObjectStore:
        """The store for `.metadata` and the listing (made on first use, and again when the
        endpoint resolves elsewhere now, e.g. after $STORAGE_EMULATOR_HOST changed)."""
        if self._store is not None and self._store.endpoint != resolve_endpoint(self.endpoint):
            self._store.close()
            self._store = None
        if self._store is None:
            self._store = ObjectStore(
                self.endpoint, token_provider=self.token_provider, **self._store_options
            )
        return self._store

    def _pins(self, paths) -> Pins:
        """Pins for `paths` from one listing of the prefix (`load.listing.list_pins`)."""
        return list_pins(
            self._object_store(),
            self._location(),
            paths,
            (self._metadata_name, self._metadata_generation),
            self._errors(),
            self.load_stats,
            check_commit_order=self.check_commit_order,
        )

    def _reader(self) -> RangeReader:
        if self._range_reader is None:
            self._range_reader = RangeReader(self.endpoint, **self._reader_options)
        return self._range_reader

    def _close_clients(self) -> None:
        """Closes the range reader and the ObjectStore (made again on next use)."""
        reader, self._range_reader = self._range_reader, None
        if reader is not None:
            reader.close()
        if self._store is not None:
            self._store.close()
