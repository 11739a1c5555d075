"""GCSStorageWriter: a DCP StorageWriter that saves to `gs://bucket/prefix`.

It writes torch 2.13's FileSystemWriter layout (per-rank `.distcp` objects of torch's
serialization, `_StorageInfo` records, a pickled `.metadata`), so stock readers load what it
writes in the default TORCH_SAVE format (SAFETENSORS saves load with GCSStorageReader; torch's
own FileSystemReader refuses those blobs). This module holds the DCP calls only; the save itself
is `gcsckpt.dcp.save`, one module per step:

    reset                  a new save_id (the save's object names), optionally a new checkpoint
    set_up_storage_writer  rank, coordination; an async save's thread at background priority
    prepare_local_plan     overwrite=False: an existing `.metadata` refuses the save
    prepare_global_plan    rank i's objects are `__{i}_{save}_{n}.distcp` (save.split)
    write_data             items -> objects (save.split) -> serializer thread + C++ uploader
                           (save.upload_pipeline); the first failure deletes what it wrote
    finish                 Metadata with the checksum records -> `.metadata` committed last,
                           create-if-absent or replaced at its generation (save.commit)

Why `StorageWriter` and not torch's `_FileSystemWriter`: every DCP call differs (object names
per save, a commit with a precondition instead of a rename, one serializer thread feeding the
C++ uploader instead of `thread_count` file threads, checksum records in `.metadata`), so
inheriting it would leave its `fs` (a local filesystem) and its file loop as code nothing runs.
What is torch's stays torch's through its helpers: the item split (`_split_by_size_and_type`),
the per-object loop (`_write_files_from_queue`), the stream transforms
(`_StorageWriterTransforms`) and the `_StorageInfo` records.

A save never touches another save's bytes: only the save that commits `.metadata` is the
checkpoint. A refused or failed save deletes its objects (best effort), unless its `.metadata`
may have landed; objects of ranks that finished while another rank failed stay behind,
unreferenced.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from typing import Any

from torch.distributed.checkpoint._extension import StreamTransformExtension
from torch.distributed.checkpoint.filesystem import (
    SerializationFormat,
    _StoragePrefix,
    _StorageWriterTransforms,
)
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from gcsckpt.dcp import checksums, client_cache
from gcsckpt.dcp.metadata_index import dump_indexed
from gcsckpt.dcp.paths import CheckpointLocation, GCSCheckpointId, parse_checkpoint_id
from gcsckpt.dcp.save.background import lower_thread_priority
from gcsckpt.dcp.save.commit import CheckpointExistsError, SaveObjects, complete_metadata
from gcsckpt.dcp.save.split import cached_split, metadata_name, object_names, object_prefix
from gcsckpt.dcp.save.upload_pipeline import SaveStats, UploadPipeline
from gcsckpt.io import defaults
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.objects import ObjectStore, store_options
from gcsckpt.io.retry import RetryPolicy
from gcsckpt.io.uploader import Uploader, UploadResult, check_chunk_bytes

# Bytes torch's accelerator loader copies to the CPU ahead of the serializer (its
# FileSystemWriter's `per_thread_copy_ahead` default); CPU tensors are not copied ahead.
_COPY_AHEAD_BYTES = 10_000_000


class GCSStorageWriter(GCSCheckpointId, StorageWriter):
    """Saves a DCP checkpoint to `gs://bucket/prefix` in torch's FileSystemWriter layout.

    Args:
        checkpoint_id: `gs://bucket[/prefix]`; may instead come later via `reset`/`dcp.save`.
        endpoint: GCS endpoint URL; None -> $STORAGE_EMULATOR_HOST, else storage.googleapis.com.
        token_provider: callable returning an OAuth2 access token (read-write scope); None ->
            google-auth ADC, or no token for an emulator endpoint. A provider given is used
            for any endpoint (private endpoints, gateways).
        single_file_per_rank: True -> `thread_count` objects per rank (items balanced by size,
            torch's split); False -> one object per item.
        thread_count: the fewest objects a rank writes (default 4; more when its tensor bytes
            exceed thread_count x object_bytes).
        overwrite: False (default) refuses to save where `.metadata` already exists (checked
            before writing, and again by the create-if-absent commit); True replaces it and then
            deletes the previous checkpoint's objects.
        serialization_format: SerializationFormat.TORCH_SAVE (default) or SAFETENSORS.
        chunk_bytes: longest PUT of a data object's resumable upload (bytes, a multiple of
            256 KiB; default the table's UPLOAD_CHUNK_BYTES, 64 MiB); smaller objects go up in
            one PUT.
        retry: a `gcsckpt.io.RetryPolicy` (None -> its defaults) for every request.
        stall_timeout_s: a request with no progress for this long (seconds, default the range
            reader's) is retried.
        object_bytes: target tensor bytes per data object (default UPLOAD_OBJECT_BYTES,
            16 MiB), so that a rank's save is many uploads in flight (an item is never split:
            one larger than this is an object of its own size).
        staging_bytes: copied bytes a rank holds at once, not yet uploaded (default
            UPLOAD_STAGING_BYTES, 256 MiB): serializer records and tensor bytes that cannot be
            sent in place (views of larger storages, GPU tensors, BYTE_IO items, transformed
            or safetensors data); tensor bytes sent from their own storage cost no staging.
            The save's extra memory is at most about this much.
        max_inflight_uploads: upload requests of a rank at once (default 16).
        background_nice: None (default) leaves thread priorities alone; an int 1-19 sets the
            nice value of the thread that runs the save when it is not a main thread
            (async_save's upload thread) or the writer was unpickled (torch's checkpoint
            process, which only saves), so its
            serializer and the C++ uploader threads it starts run at background priority.
        checksum_block_bytes: the longest block of the CRC-32C block checksums committed with
            every data object (bytes, default CHECKSUM_BLOCK_BYTES, 1 MiB; items shorter than
            this are blocks of their own; see `gcsckpt.dcp.checksums`), which every
            GCSStorageReader load checks; 0 saves none (loads then report the bytes
            unverified).
        _extensions: torch write-side stream transforms (`StreamTransformExtension`s, e.g.
            `torch.distributed.checkpoint._extension.ZStandard`) applied to every item, as
            torch's FileSystemWriter(_extensions=...) does; loading needs a reader that knows them
            (GCSStorageReader(extension_registry=...), or torch's default registry). TORCH_SAVE
            only (ValueError with SAFETENSORS).

    Tensors must not change until `write_data` returned (its future resolves only after
    every upload finished, since uploads read tensor storage in place): a synchronous
    `dcp.save` guarantees it; `dcp.async_save` stages copies first. After each save,
    `save_stats` (a `SaveStats`) counts this rank's objects and the bytes sent by reference
    and copied.

    Raises (from the DCP calls): ValueError for a bad id; RuntimeError + FileExistsError
    (`CheckpointExistsError`, torch's "Checkpoint already exists" wording) when the checkpoint
    exists and overwrite=False; `gcsckpt.io.UploadError` (names the object, the bytes committed
    and the attempts) when a data upload fails for good; ObjectStoreError when `.metadata`'s
    does.
    """

    def __init__(
        self,
        checkpoint_id: str | os.PathLike | None = None,
        *,
        endpoint: str | None = None,
        token_provider=None,
        single_file_per_rank: bool = True,
        thread_count: int = 4,
        overwrite: bool = False,
        serialization_format: SerializationFormat = SerializationFormat.TORCH_SAVE,
        chunk_bytes: int = defaults.UPLOAD_CHUNK_BYTES,
        retry=None,
        stall_timeout_s: float | None = None,
        object_bytes: int = defaults.UPLOAD_OBJECT_BYTES,
        staging_bytes: int = defaults.UPLOAD_STAGING_BYTES,
        max_inflight_uploads: int = defaults.MAX_INFLIGHT_UPLOADS,
        background_nice: int | None = None,
        checksum_block_bytes: int = defaults.CHECKSUM_BLOCK_BYTES,
        _extensions: Sequence[StreamTransformExtension] | None = None,
    ) -> None:
        if thread_count < 1:
            raise ValueError(f"thread_count must be >= 1, got {thread_count}")
        if int(checksum_block_bytes) != checksum_block_bytes or checksum_block_bytes < 0:
            raise ValueError(
                f"checksum_block_bytes must be an int >= 0, got {checksum_block_bytes!r}"
            )
        self.checksum_block_bytes = int(checksum_block_bytes)
        for name, value in (
            ("object_bytes", object_bytes),
            ("staging_bytes", staging_bytes),
            ("max_inflight_uploads", max_inflight_uploads),
        ):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        check_chunk_bytes(chunk_bytes)
        serialization_format = SerializationFormat(serialization_format)
        if _extensions and serialization_format == SerializationFormat.SAFETENSORS:
            # torch writes the safetensors blob untransformed yet records the transforms on
            # its tensors, so no reader could decode them.
            raise ValueError(
                "_extensions (stream transforms) need SerializationFormat.TORCH_SAVE; torch "
                "writes the SAFETENSORS blob without them"
            )
        super().__init__()
        self.single_file_per_rank = single_file_per_rank
        self.thread_count = thread_count
        self.overwrite = overwrite
        self.serialization_format = serialization_format
        self.transforms = _StorageWriterTransforms(_extensions)
        self.per_thread_copy_ahead = _COPY_AHEAD_BYTES
        self.save_id = str(uuid.uuid4())
        self.rank: int | None = None
        self.use_collectives = True
        self.endpoint = endpoint
        self.token_provider = token_provider
        self.chunk_bytes = chunk_bytes
        self.object_bytes = int(object_bytes)
        self.staging_bytes = int(staging_bytes)
        self.max_inflight_uploads = int(max_inflight_uploads)
        if background_nice is not None and not 1 <= int(background_nice) <= 19:
            raise ValueError(f"background_nice must be None or 1-19, got {background_nice!r}")
        self.background_nice = background_nice
        self._retry = retry if retry is not None else RetryPolicy()
        self._stall_timeout_s = stall_timeout_s
        self._store_options = store_options(retry, stall_timeout_s)
        self._store: ObjectStore | None = None
        self._uploader: Uploader | None = None
        self.uploads: list[UploadResult] = []  # this rank's data objects of the last save
        self.save_stats = SaveStats()  # and what they were made of
        self._unpickled = False  # True in a process the writer was pickled into
        self.location: CheckpointLocation | None = None
        if checkpoint_id is not None:
            self._set_location(checkpoint_id)
        self.is_coordinator = False

    # -- DCP StorageWriter API -----------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Starts a new save (new save_id), optionally to another checkpoint id (ValueError if
        bad)."""
        self.save_id = str(uuid.uuid4())
        # Clients are taken again (from `client_cache`, by the endpoint resolved now) for each save.
        self._store = self._uploader = None
        if checkpoint_id is not None:
            self._set_location(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Records the rank (`rank=`) and whether ranks coordinate (`use_collectives=`, default
        True); with background_nice, lowers the calling thread's priority (see __init__)."""
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)
        self.is_coordinator = is_coordinator
        if self.background_nice is not None:
            lower_thread_priority(self.background_nice, main_thread_too=self._unpickled)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Refuses an existing checkpoint when overwrite=False (checked by the coordinator, or
        by every rank when ranks write their own metadata)."""
        checks = self.is_coordinator or not self.use_collectives
        if checks and not self.overwrite:
            # Ranks that each commit their own metadata: rank 0's stands for the checkpoint.
            rank = None if self.rank is None else 0
            name = metadata_name(rank, use_collectives=self.use_collectives)
            if self._object_store().exists(self._loc().bucket, self._loc().object_name(name)):
                raise CheckpointExistsError(
                    f"Checkpoint already exists and overwrite=False: {self._loc().url(name)}"
                )
        if not self.use_collectives and self.rank is not None:
            prefix = _StoragePrefix(object_prefix(self.rank, self.save_id))
            plan = dataclasses.replace(plan, storage_data=prefix)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Gives rank i the object prefix `__{i}_{save}_` (`gcsckpt.dcp.save.split`)."""
        return [
            plan
            if plan.storage_data is not None
            else dataclasses.replace(
                plan, storage_data=_StoragePrefix(object_prefix(i, self.save_id))
            )
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Serializes and uploads this rank's items (`gcsckpt.dcp.save.upload_pipeline`):
        objects of about `object_bytes` each, at least `thread_count` of them (a group without
        items makes no object), many in flight through the C++ uploader. On failure, deletes
        the objects it wrote (best effort) and says so in a note on the error.

        Returns:
            a completed Future of one WriteResult per item (storage_data = `_StorageInfo`; an
            object's first item carries its checksum record to `finish`), once every upload
            finished (none reads tensor memory any more).
        """
        loc = self._loc()
        # This save's own prefix: with plan caching (DefaultSavePlanner(enable_plan_caching=
        # True)) torch hands back the first save's finished plan, storage_data included.
        # (With use_collectives=False torch replaces the cached local plan by an empty delta,
        # so the prefix set in prepare_local_plan is lost too: always name them here.)
        prefix = plan.storage_data.prefix
        if self.rank is not None:
            prefix = object_prefix(self.rank, self.save_id)
        groups = cached_split(
            plan.items,
            single_file_per_rank=self.single_file_per_rank,
            thread_count=self.thread_count,
            object_bytes=self.object_bytes,
        )
        objects = object_names(prefix, groups)
        try:
            pipeline = UploadPipeline(
                self._data_uploader(),
                loc.bucket,
                loc.object_name,
                self.staging_bytes,
                planner,
                self.transforms,
                self.serialization_format,
                self.per_thread_copy_ahead,
                self.checksum_block_bytes,
            )
            self.save_stats = pipeline.stats
            written, self.uploads = pipeline.run(objects)
        except BaseException as exc:
            exc.add_note(self._objects().discard([name for name, _ in objects]))
            raise
        future: Future[list[WriteResult]] = Future()
        future.set_result(checksums.with_records(written, pipeline.checksums))
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Commits the save: uploads `.metadata` last (create-if-absent when overwrite=False;
        when overwriting, replaces it and then deletes the objects the old one named).

        Raises:
            CheckpointExistsError: overwrite=False and another save committed first (this
                save's objects are deleted, best effort). ObjectStoreError: the upload failed.
        """
        ours = complete_metadata(metadata, results, self.storage_meta())
        self._objects().commit(
            metadata_name(self.rank, use_collectives=self.use_collectives),
            dump_indexed(metadata),
            overwrite=self.overwrite,
            ours=ours,
            save_id=self.save_id,
        )

    def storage_meta(self) -> StorageMeta:
        """The checkpoint URL and this save's id, committed inside `.metadata`."""
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    # -- plumbing ------------------------------------------------------------------------------
    def _set_location(self, checkpoint_id: str | os.PathLike) -> None:
        self.location = parse_checkpoint_id(checkpoint_id)

    def _loc(self) -> CheckpointLocation:
        if self.location is None:
            raise ValueError("GCSStorageWriter has no checkpoint_id; pass 'gs://bucket/prefix'")
        return self.location

    def __getstate__(self) -> dict:
        # Pickled into torch's checkpoint process for every PROCESS-mode save: the clients stay
        # behind (that process takes its own from `gcsckpt.dcp.client_cache`).
        return {**self.__dict__, "_store": None, "_uploader": None, "_unpickled": True}

    def _client_key(self, *extra) -> tuple | None:
        # The endpoint as resolved now ($STORAGE_EMULATOR_HOST may have changed since another
        # writer built its clients), never the None the caller may have passed.
        options = (
            resolve_endpoint(self.endpoint),
            self.chunk_bytes,
            self.max_inflight_uploads,
            self._retry,
        )
        return client_cache.config_key(self.token_provider, *options, self._stall_timeout_s, *extra)

    def _object_store(self) -> ObjectStore:
        if self._store is None:
            self._store = client_cache.shared(
                "store",
                self._client_key("store", self.thread_count),
                lambda: ObjectStore(
                    resolve_endpoint(self.endpoint),
                    token_provider=self.token_provider,
                    pool_size=self.thread_count + 2,
                    **self._store_options,
                ),
            )
        return self._store

    def _data_uploader(self) -> Uploader:
        if self._uploader is None:
            self._uploader = client_cache.shared(
                # Keyed by background_nice too: the C++ thread keeps its creator's nice value.
                "uploader",
                self._client_key("uploader", self.background_nice),
                self._new_uploader,
            )
        return self._uploader

    def _new_uploader(self) -> Uploader:
        stall = {} if self._stall_timeout_s is None else {"stall_timeout_s": self._stall_timeout_s}
        return Uploader(
            resolve_endpoint(self.endpoint),
            token_provider=self.token_provider,
            chunk_bytes=self.chunk_bytes,
            max_inflight_requests=self.max_inflight_uploads,
            retry=self._retry,
            **stall,
        )

    def _objects(self) -> SaveObjects:
        return SaveObjects(self._object_store(), self._loc())
