"""GCSStorageWriter: a DCP StorageWriter that saves to `gs://bucket/prefix`.

It is torch's FileSystemWriter (`_FileSystemWriter`: torch's split of items into objects, its
serializer, its `_StorageInfo` records) with GCS objects for files, so stock readers load what
it writes in the default TORCH_SAVE format (SAFETENSORS saves load with GCSStorageReader; torch's
own FileSystemReader refuses those blobs). Ours: the data objects go through
`gcsckpt.dcp.upload_pipeline` (tensor storage sent in place, many uploads in flight through the
C++ `gcsckpt.io.Uploader`), the first failure fails the save, and the commit (`gcsckpt.dcp.commit`).

A save never touches another save's bytes: its objects are named `__{rank}_{save}_{i}.distcp`
(`save`: 16 hex digits of the save_id). Only the save that commits `.metadata` is the
checkpoint: `finish()` uploads it last, through `ObjectStore.upload` with a precondition
(create-if-absent when overwrite=False: of two racing saves one wins, the other raises
`CheckpointExistsError`; at the generation read when overwriting). A refused or failed save
deletes its objects (best effort), unless its `.metadata` may have landed; objects of ranks
that finished while another rank failed stay behind, unreferenced.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.checkpoint._extension import StreamTransformExtension
from torch.distributed.checkpoint.filesystem import (
    CURRENT_DCP_VERSION,
    DEFAULT_SUFFIX,
    SerializationFormat,
    _FileSystemWriter,
    _StoragePrefix,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from gcsckpt.dcp import checksums, engines
from gcsckpt.dcp.background import lower_thread_priority
from gcsckpt.dcp.commit import CheckpointExistsError, SaveObjects
from gcsckpt.dcp.metadata_codec import dump_metadata
from gcsckpt.dcp.object_files import GCSObjectFiles
from gcsckpt.dcp.object_split import cached_groups, split_items
from gcsckpt.dcp.paths import (
    METADATA_NAME,
    CheckpointLocation,
    GCSCheckpointId,
    parse_checkpoint_id,
)
from gcsckpt.dcp.upload_pipeline import SaveStats, UploadPipeline
from gcsckpt.io import defaults
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.objects import ObjectStore, store_options
from gcsckpt.io.retry import RetryPolicy
from gcsckpt.io.uploader import Uploader, UploadResult, check_chunk_bytes


class GCSStorageWriter(GCSCheckpointId, _FileSystemWriter):
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
        # torch's constructor opens a local path; "" stands in until `fs` is ours.
        _FileSystemWriter.__init__(
            self,
            path="",
            single_file_per_rank=single_file_per_rank,
            sync_files=False,  # an object is durable once its upload completes
            thread_count=thread_count,
            overwrite=overwrite,
            _extensions=_extensions,
            serialization_format=serialization_format,
        )
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
        self.fs = GCSObjectFiles(self._object_store)
        self.location: CheckpointLocation | None = None
        self.path = ""
        if checkpoint_id is not None:
            self._set_location(checkpoint_id)
        self.is_coordinator = False

    # -- DCP StorageWriter API -----------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Starts a new save (new save_id), optionally to another checkpoint id (ValueError if
        bad)."""
        super().reset(None)
        # Clients are taken again (from `engines`, by the endpoint resolved now) for each save.
        self._store = self._uploader = None
        if checkpoint_id is not None:
            self._set_location(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Records the rank and whether ranks coordinate (`use_collectives`)."""
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self.is_coordinator = is_coordinator
        if self.background_nice is not None:
            lower_thread_priority(self.background_nice, main_thread_too=self._unpickled)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Refuses an existing checkpoint when overwrite=False (checked by the coordinator, or
        by every rank when ranks write their own metadata)."""
        checks = self.is_coordinator or not self.use_collectives
        if checks and not self.overwrite:
            name = self._metadata_name(rank_zero=True)
            if self._object_store().exists(self._loc().bucket, self._loc().object_name(name)):
                raise CheckpointExistsError(
                    f"Checkpoint already exists and overwrite=False: {self._loc().url(name)}"
                )
        if not self.use_collectives and self.rank is not None:
            prefix = _StoragePrefix(f"__{self.rank}_{self._save_tag()}_")
            plan = dataclasses.replace(plan, storage_data=prefix)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Gives rank i the object prefix `__{i}_{save}_` (see the module docstring)."""
        tag = self._save_tag()
        return [
            plan
            if plan.storage_data is not None
            else dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{i}_{tag}_"))
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Serializes and uploads this rank's items (torch's serialization; see
        `gcsckpt.dcp.upload_pipeline`): objects of about `object_bytes` each, at least
        `thread_count` of them (a group without items makes no object), many in flight through
        the C++ uploader. On failure, deletes the objects it wrote (best effort) and says so in
        a note on the error.

        Returns:
            a completed Future of one WriteResult per item (storage_data = _StorageInfo),
            once every upload finished (none reads tensor memory any more).
        """
        self._loc()
        # This save's own prefix: with plan caching (DefaultSavePlanner(enable_plan_caching=
        # True)) torch hands back the first save's finished plan, storage_data included.
        # (With use_collectives=False torch replaces the cached local plan by an empty delta,
        # so the prefix set in prepare_local_plan is lost too: always name them here.)
        prefix = plan.storage_data.prefix
        if self.rank is not None:
            prefix = f"__{self.rank}_{self._save_tag()}_"
        objects = []
        for i, group in enumerate(cached_groups(self, plan.items)):
            objects.append((f"{prefix}{i}{DEFAULT_SUFFIX}", group))
        try:
            return self._write_data(planner, objects)
        except BaseException as exc:
            exc.add_note(self._objects().discard([name for name, _ in objects]))
            raise

    def _groups(self, items: list) -> list[list]:
        """The rank's items as objects (`gcsckpt.dcp.object_split.split_items`)."""
        return split_items(self, items)

    def _write_data(self, planner: SavePlanner, objects: list) -> Future:
        if self.serialization_format == SerializationFormat.SAFETENSORS:
            planner = _ContiguousTensors(planner)
        loc = self._loc()
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
        written = _with_checksums(written, pipeline.checksums)
        future: Future[list[WriteResult]] = Future()
        future.set_result(written)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Commits the save: uploads `.metadata` last (create-if-absent when overwrite=False;
        when overwriting, replaces it and then deletes the objects the old one named).

        Raises:
            CheckpointExistsError: overwrite=False and another save committed first (this
                save's objects are deleted, best effort). ObjectStoreError: the upload failed.
        """
        metadata.version = CURRENT_DCP_VERSION
        storage_data, records = {}, {}
        for rs in results:
            for r in rs:
                info, record = checksums.strip(r.storage_data)
                storage_data[r.index] = info
                if record is not None:
                    records[info.relative_path] = record
        metadata.storage_data = storage_data
        metadata.storage_meta = self.storage_meta()
        if records:
            checksums.attach(metadata.storage_meta, records)
        ours = sorted({r.storage_data.relative_path for rs in results for r in rs})
        name = self._metadata_name(rank_zero=False)
        self._objects().commit(
            name,
            dump_metadata(metadata),
            overwrite=self.overwrite,
            ours=ours,
            save_id=self.save_id,
        )

    # -- plumbing ------------------------------------------------------------------------------
    def _set_location(self, checkpoint_id: str | os.PathLike) -> None:
        self.location = parse_checkpoint_id(checkpoint_id)
        self.path = self.location.url()

    def _loc(self) -> CheckpointLocation:
        if self.location is None:
            raise ValueError("GCSStorageWriter has no checkpoint_id; pass 'gs://bucket/prefix'")
        return self.location

    def __getstate__(self) -> dict:
        # Pickled into torch's checkpoint process for every PROCESS-mode save: the clients stay
        # behind (that process takes its own from `gcsckpt.dcp.engines`).
        return {**self.__dict__, "_store": None, "_uploader": None, "_unpickled": True}

    def _engine_key(self, *extra) -> tuple | None:
        # The endpoint as resolved now ($STORAGE_EMULATOR_HOST may have changed since another
        # writer built its clients), never the None the caller may have passed.
        options = (
            resolve_endpoint(self.endpoint),
            self.chunk_bytes,
            self.max_inflight_uploads,
            self._retry,
        )
        return engines.config_key(self.token_provider, *options, self._stall_timeout_s, *extra)

    def _object_store(self) -> ObjectStore:
        if self._store is None:
            self._store = engines.shared(
                "store",
                self._engine_key("store", self.thread_count),
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
            self._uploader = engines.shared(
                # Keyed by background_nice too: the C++ thread keeps its creator's nice value.
                "uploader",
                self._engine_key("uploader", self.background_nice),
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

    def _save_tag(self) -> str:
        return uuid.UUID(self.save_id).hex[:16]

    def _metadata_name(self, *, rank_zero: bool) -> str:
        if self.use_collectives or self.rank is None:
            return METADATA_NAME
        return f"__{0 if rank_zero else self.rank}{METADATA_NAME}"


def _with_checksums(written: list[WriteResult], records: dict) -> list[WriteResult]:
    """The WriteResults with each object's checksum record on its first item's storage info
    (`checksums.ChecksummedInfo`), to reach the coordinator's `finish`."""
    out, pending = [], dict(records)
    for r in written:
        info = r.storage_data
        record = pending.pop(info.relative_path, None)
        if record is not None:
            info = checksums.ChecksummedInfo(
                info.relative_path,
                info.offset,
                info.length,
                info.transform_descriptors,
                object_checksums=record,
            )
            r = dataclasses.replace(r, storage_data=info)
        out.append(r)
    return out


class _ContiguousTensors:
    """A planner whose tensors are contiguous: safetensors stores dense row-major bytes and
    torch's writer refuses views (a transposed or strided tensor); this writer packs them."""

    def __init__(self, planner: SavePlanner) -> None:
        self._planner = planner

    def resolve_data(self, item):
        data = self._planner.resolve_data(item)
        return data.contiguous() if isinstance(data, torch.Tensor) else data
