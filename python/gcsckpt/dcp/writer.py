"""GCSStorageWriter: a DCP StorageWriter that saves to `gs://bucket/prefix`.

Same layout as torch 2.13's FileSystemWriter, so stock FsspecReader/FileSystemReader (and
GCSStorageReader) read it: objects `__{rank}_{i}.distcp` holding the rank's BYTE_IO items then its
tensors (`torch.save` archives, or one safetensors blob), and a pickled `.metadata` of
`_StorageInfo(relative_path, offset, length)` entries. Each object is streamed to GCS (one media
upload, or a chunked resumable upload for big ones), so it appears atomically when complete; a
rank's objects upload in parallel threads. `.metadata` is uploaded last, by the coordinator, after
every rank's objects are complete, so an interrupted save never looks like a checkpoint.
"""

from __future__ import annotations

import dataclasses
import heapq
import io
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.checkpoint._hf_utils import (
    CUSTOM_METADATA_KEY,
    DCP_VERSION_KEY,
    FORMAT_KEY,
    FORMAT_VALUE,
    HF_DCP_VERSION,
)
from torch.distributed.checkpoint.filesystem import (
    CURRENT_DCP_VERSION,
    SerializationFormat,
    _StorageInfo,
    _StoragePrefix,
)
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from gcsckpt.dcp.metadata_codec import dump_metadata
from gcsckpt.dcp.objects import ObjectStore, UploadStream, store_options
from gcsckpt.dcp.paths import CheckpointLocation, GCSCheckpointId, parse_checkpoint_id
from gcsckpt.dcp.safetensors_blob import encode_header

METADATA_NAME = ".metadata"
SUFFIX = ".distcp"


class GCSStorageWriter(GCSCheckpointId, StorageWriter):
    """Saves a DCP checkpoint to `gs://bucket/prefix` in torch's FileSystemWriter layout.

    Args:
        checkpoint_id: `gs://bucket[/prefix]`; may instead come later via `reset`/`dcp.save`.
        endpoint: GCS endpoint URL; None -> $STORAGE_EMULATOR_HOST, else storage.googleapis.com.
        token_provider: callable returning an OAuth2 access token (read-write scope); None ->
            google-auth ADC; never used against an emulator endpoint.
        single_file_per_rank: True -> `thread_count` objects per rank (items balanced by size);
            False -> one object per item.
        thread_count: objects of one rank serialized and uploaded in parallel (default 4).
        overwrite: False (default) refuses to save where `.metadata` already exists; True deletes
            the old `.metadata` before writing any object, then writes the new one last.
        serialization_format: SerializationFormat.TORCH_SAVE (default) or SAFETENSORS.
        chunk_bytes: resumable-upload chunk (bytes, default 16 MiB); also the most a stream
            buffers before sending. Smaller objects go up in one request.
        retry: a `gcsckpt.io.RetryPolicy` (None -> 6 attempts, 120 s deadline) for uploads.
        stall_timeout_s: an upload request with no progress for this long (seconds, default 30)
            is retried.

    Raises (from the DCP calls): ValueError for a bad id; FileExistsError when the checkpoint
    exists and overwrite=False; ObjectStoreError when an upload fails for good.
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
        chunk_bytes: int = 16 << 20,
        retry=None,
        stall_timeout_s: float | None = None,
    ) -> None:
        super().__init__()
        self.location: CheckpointLocation | None = None
        if checkpoint_id is not None:
            self.location = parse_checkpoint_id(checkpoint_id)
        if thread_count < 1:
            raise ValueError(f"thread_count must be >= 1, got {thread_count}")
        self.endpoint = endpoint
        self.token_provider = token_provider
        self.single_file_per_rank = single_file_per_rank
        self.thread_count = thread_count
        self.overwrite = overwrite
        self.serialization_format = SerializationFormat(serialization_format)
        self.chunk_bytes = chunk_bytes
        self._store_options = store_options(retry, stall_timeout_s)
        self.save_id = str(uuid.uuid4())
        self.rank: int | None = None
        self.is_coordinator = False
        self.use_collectives = True
        self._store: ObjectStore | None = None

    # -- DCP StorageWriter API -----------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Starts a new save, optionally to another checkpoint id (ValueError if bad)."""
        if checkpoint_id is not None:
            self.location = parse_checkpoint_id(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Records the rank and whether ranks coordinate (`use_collectives`)."""
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def storage_meta(self) -> StorageMeta | None:
        """StorageMeta(checkpoint_id=gs:// URL, save_id) recorded in `.metadata`."""
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Refuses an existing checkpoint when overwrite=False (checked by the coordinator, or
        by every rank when ranks write their own metadata)."""
        checks = self.is_coordinator or not self.use_collectives
        if checks and not self.overwrite:
            name = self._metadata_name(rank_zero=True)
            if self._object_store().exists(self._loc().bucket, self._loc().object_name(name)):
                raise FileExistsError(
                    f"checkpoint {self._loc().url(name)} already exists and overwrite=False"
                )
        if not self.use_collectives and self.rank is not None:
            plan = dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Gives rank i the object prefix `__{i}_`; when overwriting, deletes the old
        `.metadata` first so a half-overwritten checkpoint never looks complete."""
        if self.overwrite:
            loc = self._loc()
            self._object_store().delete(loc.bucket, loc.object_name(METADATA_NAME))
        return [
            plan
            if plan.storage_data is not None
            else dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{i}_"))
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Serializes and uploads this rank's items, `thread_count` objects at a time.

        Returns:
            a completed Future of one WriteResult per item (storage_data = _StorageInfo).
        """
        prefix = plan.storage_data.prefix
        if self.single_file_per_rank:
            groups = _balance(plan.items, self.thread_count)
        else:
            groups = [[item] for item in plan.items]
        jobs = [(f"{prefix}{i}{SUFFIX}", g) for i, g in enumerate(groups) if g]
        with ThreadPoolExecutor(max_workers=min(self.thread_count, max(1, len(jobs)))) as pool:
            parts = list(pool.map(lambda job: self._write_object(*job, planner), jobs))
        future: Future[list[WriteResult]] = Future()
        future.set_result([result for part in parts for result in part])
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Uploads `.metadata` (last; `ifGenerationMatch=0` when overwrite=False)."""
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {r.index: r.storage_data for rs in results for r in rs}
        metadata.storage_meta = self.storage_meta()
        loc = self._loc()
        self._object_store().upload(
            loc.bucket,
            loc.object_name(self._metadata_name(rank_zero=False)),
            dump_metadata(metadata),
            if_generation_match=None if self.overwrite else 0,
        )

    # -- plumbing ------------------------------------------------------------------------------
    def _loc(self) -> CheckpointLocation:
        if self.location is None:
            raise ValueError("GCSStorageWriter has no checkpoint_id; pass 'gs://bucket/prefix'")
        return self.location

    def _object_store(self) -> ObjectStore:
        if self._store is None:
            self._store = ObjectStore(
                self.endpoint,
                token_provider=self.token_provider,
                pool_size=self.thread_count + 2,
                **self._store_options,
            )
        return self._store

    def _metadata_name(self, *, rank_zero: bool) -> str:
        if self.use_collectives or self.rank is None:
            return METADATA_NAME
        return f"__{0 if rank_zero else self.rank}{METADATA_NAME}"

    def _write_object(
        self, file_name: str, items: list[WriteItem], planner: SavePlanner
    ) -> list[WriteResult]:
        loc = self._loc()
        stream = self._object_store().open_upload(
            loc.bucket, loc.object_name(file_name), chunk_bytes=self.chunk_bytes
        )
        with stream:
            results = []
            for item in items:
                if item.type == WriteItemType.BYTE_IO:
                    data: io.BytesIO = planner.resolve_data(item)
                    offset = stream.tell()
                    stream.write(data.getbuffer())
                    results.append(_result(item, file_name, offset, stream.tell() - offset))
            tensors = [item for item in items if item.type != WriteItemType.BYTE_IO]
            if self.serialization_format == SerializationFormat.SAFETENSORS:
                results += self._write_safetensors(stream, file_name, tensors, planner)
            else:
                for item in tensors:
                    tensor = _cpu_tensor(planner.resolve_data(item))
                    offset = stream.tell()
                    torch.save(tensor, stream)
                    results.append(_result(item, file_name, offset, stream.tell() - offset))
        return results

    def _write_safetensors(
        self, stream: UploadStream, file_name: str, items: list[WriteItem], planner: SavePlanner
    ) -> list[WriteResult]:
        """One safetensors blob of the tensors keyed by FQN, with DCP's sharding metadata; every
        item's _StorageInfo points at the blob start with its tensor's byte length (as torch's
        FileSystemWriter records it)."""
        blob_start = stream.tell()
        tensors = [_cpu_tensor(planner.resolve_data(item)).contiguous() for item in items]
        names = [item.index.fqn for item in items]
        sharding = {
            item.index.fqn: {"saved_offsets": list(item.tensor_data.chunk.offsets)}
            for item in items
        }
        header = encode_header(
            [(n, t.dtype, tuple(t.shape)) for n, t in zip(names, tensors, strict=True)],
            {
                CUSTOM_METADATA_KEY: json.dumps(sharding),
                DCP_VERSION_KEY: str(HF_DCP_VERSION),
                FORMAT_KEY: FORMAT_VALUE,
            },
        )
        stream.write(header)
        results = []
        for item, tensor in zip(items, tensors, strict=True):
            if tensor.numel():
                stream.write(tensor.reshape(-1).view(torch.uint8).numpy())
            results.append(_result(item, file_name, blob_start, tensor.nbytes))
        return results


def _cpu_tensor(data: Any) -> torch.Tensor:
    """A CPU tensor whose storage holds just its own bytes (torch.save writes whole storages)."""
    tensor = data.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.untyped_storage().nbytes() != tensor.nbytes:
        tensor = tensor.clone()
    return tensor


def _result(item: WriteItem, file_name: str, offset: int, length: int) -> WriteResult:
    return WriteResult(
        index=item.index,
        size_in_bytes=length,
        storage_data=_StorageInfo(file_name, offset, length),
    )


def _item_bytes(item: WriteItem) -> int:
    data = item.tensor_data
    numel = 1
    for d in data.size:
        numel *= d
    return numel * data.properties.dtype.itemsize


def _balance(items: list[WriteItem], bins: int) -> list[list[WriteItem]]:
    """Splits items into `bins` groups: BYTE_IO round-robin, tensors largest first into the
    group with the fewest bytes so far."""
    if bins == 1:
        return [list(items)]
    groups: list[list[WriteItem]] = [[] for _ in range(bins)]
    byte_items = [item for item in items if item.type == WriteItemType.BYTE_IO]
    for i, item in enumerate(byte_items):
        groups[i % bins].append(item)
    tensors = sorted(
        (item for item in items if item.type != WriteItemType.BYTE_IO),
        key=_item_bytes,
        reverse=True,
    )
    heap = [(0, i) for i in range(bins)]
    for item in tensors:
        load, i = heapq.heappop(heap)
        groups[i].append(item)
        heapq.heappush(heap, (load + _item_bytes(item), i))
    return groups
