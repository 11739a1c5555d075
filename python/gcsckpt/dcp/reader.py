"""GCSStorageReader: a DCP StorageReader for `gs://bucket/prefix` checkpoints.

Reads the layout torch 2.13's FileSystemWriter/FsspecWriter writes (per-rank `.distcp` objects,
a pickled `.metadata`), in either serialization format. A load costs one GET for `.metadata`;
then every ReadItem becomes a byte range, all ranges of a memory window go to the C++ range reader
at once (it joins neighbours closer than `coalesce_gap_bytes`, splits big ranges and keeps many
GETs in flight with the GIL released), and while later ranges are in flight the finished ones are
decoded, narrowed and copied into the planner's tensors. Contiguous items cost one GET per
`chunk_bytes`; items scattered between other ranks' data (replicated scalars, which DCP's save
spreads over every rank's object) cost one GET per run unless the gap setting reads through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import time
import uuid
from collections import deque
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint._hf_utils import CUSTOM_METADATA_KEY
from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from gcsckpt.dcp.gc_control import HeapFreeze, collector_paused
from gcsckpt.dcp.load_stats import CheckpointReadError, LoadStats
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.paths import CheckpointLocation, GCSCheckpointId, parse_checkpoint_id
from gcsckpt.dcp.read_plan import (
    BYTES,
    RAW,
    TORCH_SAVE,
    Fetch,
    chunk_of,
    is_raw_tensor_item,
    item_kind,
    make_windows,
    narrow_block,
    raw_fetch,
)
from gcsckpt.dcp.safetensors_blob import BlobHeader, header_length, parse_header
from gcsckpt.dcp.torch_save_view import tensor_from_torch_save
from gcsckpt.io import RangeReader, RangeReadError, RangeRequest
from gcsckpt.io.objects import ObjectStore, store_options

METADATA_NAME = ".metadata"
# Buffer memory for bytes in flight plus bytes being decoded: two windows of half this each.
# 256 MiB keeps ~16 x 8 MiB GETs in flight per window (the local endpoint's ceiling was reached
# with 16 parallel 8 MiB GETs, DESIGN.md) while peak RSS stays within state bytes + 256 MiB.
DEFAULT_INFLIGHT_BYTES = 256 << 20
# Safetensors header size model (bytes): per tensor at least `"fqn":{"dtype":"F32","shape":[],
# "data_offsets":[0,0]}` (~45 + len(fqn)), at most ~160 + 2 x len(fqn) with the DCP sharding
# metadata; plus room for "__metadata__".
_HEADER_MIN_PER_TENSOR = 45
_HEADER_GUESS_PER_TENSOR = 160
_HEADER_GUESS_BASE = 4096


class GCSStorageReader(GCSCheckpointId, StorageReader):
    """Loads a DCP checkpoint from `gs://bucket/prefix` (torch 2.13 FileSystemWriter layout).

    Args:
        checkpoint_id: `gs://bucket[/prefix]`; may instead come later via `reset`/`dcp.load`.
        endpoint: GCS endpoint URL; None -> $STORAGE_EMULATOR_HOST, else storage.googleapis.com.
        token_provider: callable returning an OAuth2 access token; None -> google-auth ADC
            (never used against an emulator endpoint).
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

    After each load, `load_stats` (a LoadStats) holds this rank's counters.

    Raises (from the DCP calls): ValueError for a bad checkpoint id or unsafe `.metadata`;
    FileNotFoundError if `.metadata` is missing; CheckpointReadError for any failed range or
    undecodable item (naming rank, object, byte range and cause).
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
        self._range_reader: Any = None
        self._store: ObjectStore | None = None
        self.metadata: Metadata | None = None
        self.storage_data: dict = {}
        self.rank = 0
        self.load_id = str(uuid.uuid4())
        self.load_stats = LoadStats()
        self.tune_gc = tune_gc
        self._heap = HeapFreeze()

    # -- DCP StorageReader API -----------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Starts a new load, optionally of another checkpoint (ValueError if the id is bad)."""
        if checkpoint_id is not None:
            self.location = parse_checkpoint_id(checkpoint_id)
        self.metadata, self.storage_data = None, {}
        self.load_id = str(uuid.uuid4())
        self.load_stats = LoadStats()
        self._heap.thaw()

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Fetches `.metadata` (or `__{rank}.metadata` with `rank=`) in one GET and unpickles it
        with the restricted unpickler of `metadata_codec`.

        Raises:
            FileNotFoundError: the object is missing. ValueError/UnsafeMetadataError: it is
                not a safe DCP Metadata.
        """
        location = self._location()
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        start = time.perf_counter()
        data = self._object_store().download(location.bucket, location.object_name(name))
        if self.tune_gc:
            with collector_paused():
                metadata = load_metadata(data, source=location.url(name))
            self._heap.freeze()
        else:
            metadata = load_metadata(data, source=location.url(name))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        stats = self.load_stats
        stats.metadata_requests += 1
        stats.metadata_bytes += len(data)
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
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.rank = rank
        self.load_stats.rank = rank

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Sorts the rank's items by (object, offset) so ranges come out in object order."""
        return dataclasses.replace(plan, items=self._sorted_items(plan.items))

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """Passes plans through unchanged."""
        return plans

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
        before = self._reader().stats()
        try:
            with collector_paused() if self.tune_gc else contextlib.nullcontext():
                fetches = self._plan_fetches(plan, planner)
                stats.plan_s = time.perf_counter() - start
                self._run_windows(fetches, planner)
        finally:
            self._heap.thaw()
            after = self._reader().stats()
            stats.requests += after["requests"] - before["requests"]
            stats.bytes_fetched += after["bytes_received"] - before["bytes_received"]
            stats.retries += after["retries"] - before["retries"]
            stats.total_s = time.perf_counter() - start
        future: Future[None] = Future()
        future.set_result(None)
        return future

    # -- plumbing ------------------------------------------------------------------------------
    def _location(self) -> CheckpointLocation:
        if self.location is None:
            raise ValueError("GCSStorageReader has no checkpoint_id; pass 'gs://bucket/prefix'")
        return self.location

    def _object_store(self) -> ObjectStore:
        if self._store is None:
            self._store = ObjectStore(
                self.endpoint, token_provider=self.token_provider, **self._store_options
            )
        return self._store

    def _reader(self):
        if self._range_reader is None:
            self._range_reader = RangeReader(self.endpoint, **self._reader_options)
        return self._range_reader

    def _sorted_items(self, items):
        storage_data = self.storage_data
        keyed = []
        for item in items:
            info = storage_data.get(item.storage_index)
            if info is None:
                raise self._missing_entry(item)
            keyed.append((info.relative_path, info.offset, item))
        keyed.sort(key=lambda k: (k[0], k[1]))
        return [k[2] for k in keyed]

    def _missing_entry(self, item) -> ValueError:
        return ValueError(
            f"rank {self.rank}: {self._location().url(METADATA_NAME)} has no storage entry"
            f" for {item.storage_index}"
        )

    def _fail(self, path: str, offset: int, length: int, cause: str) -> CheckpointReadError:
        location = self._location()
        failure = dict(
            bucket=location.bucket,
            object=location.object_name(path),
            offset=offset,
            length=length,
            cause=cause,
        )
        return CheckpointReadError(self.rank, [failure])

    def _plan_fetches(self, plan: LoadPlan, planner: LoadPlanner) -> list[Fetch]:
        """One Fetch per item, in (object, offset) order; SAFETENSORS items need their blob's
        header first (one extra round trip for all blobs of the load)."""
        storage_data, metadata, stats = self.storage_data, self.metadata, self.load_stats
        fetches: list[Fetch] = []
        raw_pending: list[tuple[Fetch, Any, torch.dtype]] = []
        blobs: set[tuple[str, int]] = set()
        for item in plan.items:
            info = storage_data.get(item.storage_index)
            if info is None:
                raise self._missing_entry(item)
            kind = item_kind(item)
            descriptors = tuple(getattr(info, "transform_descriptors", None) or ())
            fetch = Fetch(info.relative_path, info.offset, info.length, item, kind, descriptors)
            if kind == BYTES:
                stats.bytes_items += 1
                fetches.append(fetch)
                continue
            stats.tensor_items += 1
            try:
                chunk, dtype = chunk_of(metadata, item.storage_index)
            except ValueError as e:
                raise self._fail(info.relative_path, info.offset, info.length, str(e)) from None
            if descriptors or not is_raw_tensor_item(info.length, chunk.sizes, dtype):
                fetches.append(fetch)
                continue
            fetch.kind = RAW
            blobs.add((info.relative_path, info.offset))
            raw_pending.append((fetch, chunk, dtype))
        stats.read_items = len(plan.items)
        if raw_pending:
            headers = self._read_blob_headers(self._blob_read_sizes(blobs))
            for fetch, chunk, dtype in raw_pending:
                blob, saved = headers[(fetch.path, fetch.offset)]
                begin = self._blob_tensor_start(fetch, blob, saved, chunk, dtype)
                fetches.append(raw_fetch(fetch, begin, chunk.sizes, dtype, planner.resolve_tensor))
        fetches.sort(key=_object_order)  # near-linear: prepare_local_plan already sorted items
        stats.direct_items = sum(1 for f in fetches if f.target is not None)
        stats.objects = len({f.path for f in fetches})
        return fetches

    def _blob_tensor_start(
        self, fetch: Fetch, blob: BlobHeader, saved_offsets: dict, chunk, dtype
    ) -> int:
        index = fetch.item.storage_index
        entry = blob.tensors.get(index.fqn)
        where = (fetch.path, fetch.offset, fetch.length)
        if entry is None:
            raise self._fail(*where, f"safetensors blob has no tensor {index.fqn!r}")
        if entry.dtype != dtype or entry.shape != tuple(chunk.sizes):
            raise self._fail(
                *where,
                f"safetensors tensor {index.fqn!r} is {entry.dtype} {entry.shape}, metadata says"
                f" {dtype} {tuple(chunk.sizes)}",
            )
        saved = saved_offsets.get(index.fqn)
        if saved is not None and tuple(saved) != tuple(index.offset or ()):
            raise self._fail(
                *where,
                f"safetensors tensor {index.fqn!r} holds the chunk at {tuple(saved)}, not"
                f" {tuple(index.offset or ())} (two chunks of one FQN in one object)",
            )
        return fetch.offset + entry.begin

    def _blob_read_sizes(self, blobs: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """How many bytes to read first from each safetensors blob: a guess that covers its
        header, capped by a lower bound on the blob's size (its tensors' bytes plus the least
        header they need) so the read never runs past the object's end. One pass over
        storage_data, since the blob holds every tensor of that object, not just ours."""
        sdm = self.metadata.state_dict_metadata
        low = dict.fromkeys(blobs, 8 + 2)
        guess = dict.fromkeys(blobs, 8 + _HEADER_GUESS_BASE)
        for index, info in self.storage_data.items():
            key = (info.relative_path, info.offset)
            if key in low and isinstance(sdm.get(index.fqn), TensorStorageMetadata):
                low[key] += info.length + _HEADER_MIN_PER_TENSOR + len(index.fqn)
                guess[key] += _HEADER_GUESS_PER_TENSOR + 2 * len(index.fqn)
        return {key: min(low[key], guess[key]) for key in blobs}

    def _read_blob_headers(self, blobs: dict[tuple[str, int], int]) -> dict:
        """Reads and parses each safetensors blob header, first `blobs[(path, offset)]` bytes,
        then the rest of any header longer than that.
        Returns (path, offset) -> (BlobHeader, {fqn: saved chunk offsets})."""
        buffers = {key: bytearray(size) for key, size in blobs.items()}
        self._read_into(buffers)
        larger = {}
        for key, buf in buffers.items():
            need = self._parse_blob(key, buf, header_length)
            if need > len(buf):
                larger[key] = bytearray(need)
        if larger:
            self._read_into(larger)
            buffers.update(larger)
        headers = {}
        for key, buf in buffers.items():
            blob = self._parse_blob(key, buf, parse_header)
            headers[key] = (blob, _saved_offsets(blob))
        return headers

    def _parse_blob(self, key: tuple[str, int], buf: bytearray, parse):
        """`parse(buf)` for the blob at (path, offset) `key`; a ValueError becomes the range error
        naming that object and byte range."""
        try:
            return parse(buf)
        except ValueError as e:
            raise self._fail(key[0], key[1], len(buf), str(e)) from None

    def _read_into(self, buffers: dict[tuple[str, int], bytearray]) -> None:
        location = self._location()
        requests = [
            RangeRequest(location.bucket, location.object_name(path), offset, len(buf), buf)
            for (path, offset), buf in buffers.items()
        ]
        self.load_stats.ranges += len(requests)
        try:
            self._reader().read(requests)
        except RangeReadError as e:
            raise self._range_error(e) from e

    def _range_error(self, error: RangeReadError) -> CheckpointReadError:
        failures = [
            dict(
                bucket=f.get("bucket"),
                object=f.get("object"),
                offset=f.get("offset", 0),
                length=f.get("length", 0),
                cause=_cause(f),
            )
            for f in getattr(error, "failures", None) or []
        ]
        if not failures:
            return CheckpointReadError(self.rank, [], summary=str(error))
        return CheckpointReadError(self.rank, failures)

    def _run_windows(self, fetches: list[Fetch], planner: LoadPlanner) -> None:
        """Fetches window after window (two in flight) and consumes completions as they come."""
        windows = make_windows(fetches, max(1, self.max_inflight_bytes // 2))
        stats = self.load_stats
        stats.windows = len(windows)
        location, reader = self._location(), self._reader()
        pending: deque = deque()
        spare: list[torch.Tensor] = []
        next_window = 0
        fetch_start = time.perf_counter()

        def submit() -> None:
            nonlocal next_window
            window = windows[next_window]
            next_window += 1
            buffer = next((b for b in spare if b.numel() >= window.buffer_bytes), None)
            if buffer is None:
                spare.clear()  # free a too-small buffer before allocating its replacement
                buffer = torch.empty(window.buffer_bytes, dtype=torch.uint8)
            else:
                spare.remove(buffer)
            host = buffer.numpy()
            requests = []
            for f in window.fetches:
                if f.target is not None:
                    dest = f.target.reshape(-1).view(torch.uint8).numpy()
                else:
                    dest = host[f.slot : f.slot + f.length]
                requests.append(RangeRequest(bucket, prefix + f.path, f.offset, f.length, dest))
            stats.ranges += len(requests)
            stats.bytes_needed += sum(f.length for f in window.fetches)
            pending.append((window, reader.submit(requests), buffer))

        bucket = location.bucket
        prefix = f"{location.prefix}/" if location.prefix else ""
        try:
            while next_window < len(windows) and len(pending) < 2:
                submit()
            while pending:
                window, handle, buffer = pending[0]
                while True:
                    waited = time.perf_counter()
                    done = handle.next_completed()
                    stats.wait_s += time.perf_counter() - waited
                    if not done:
                        break
                    for i in done:
                        self._consume(window.fetches[i], buffer, planner)
                pending.popleft()
                spare.append(buffer)
                if next_window < len(windows):
                    submit()
            stats.fetch_s = time.perf_counter() - fetch_start
        except RangeReadError as e:
            _cancel_all(pending)
            raise self._range_error(e) from e
        except BaseException:
            _cancel_all(pending)
            raise

    def _consume(self, fetch: Fetch, buffer: torch.Tensor, planner: LoadPlanner) -> None:
        """Decodes one fetched item and hands it to the planner."""
        stats, item = self.load_stats, fetch.item
        began = time.perf_counter()
        try:
            if fetch.target is not None:
                planner.commit_tensor(item, fetch.target)
                stats.copy_s += time.perf_counter() - began
                return
            data = buffer[fetch.slot : fetch.slot + fetch.length]
            if fetch.descriptors:
                data = self._untransform(fetch, data)
            if fetch.kind == BYTES:
                planner.load_bytes(item, io.BytesIO(data.numpy().tobytes()))
                stats.deserialize_s += time.perf_counter() - began
                return
            if fetch.kind == TORCH_SAVE:
                tensor = tensor_from_torch_save(data)
                tensor = narrow_block(tensor, item.storage_offsets, item.lengths)
            elif fetch.length:
                tensor = data.view(fetch.dtype).view(fetch.shape)
                if fetch.narrow is not None:
                    tensor = narrow_block(tensor, *fetch.narrow)
            else:
                tensor = torch.empty(fetch.shape, dtype=fetch.dtype)
            decoded = time.perf_counter()
            stats.deserialize_s += decoded - began
            target = planner.resolve_tensor(item).detach()
            if target.shape != tensor.shape:
                raise ValueError(
                    f"stored region has shape {tuple(tensor.shape)}, target expects"
                    f" {tuple(target.shape)}"
                )
            target.copy_(tensor)
            planner.commit_tensor(item, target)
            stats.copy_s += time.perf_counter() - decoded
        except CheckpointReadError:
            raise
        except Exception as e:
            raise self._fail(
                fetch.path, fetch.offset, fetch.length, f"FQN {item.storage_index.fqn!r}: {e}"
            ) from e

    def _untransform(self, fetch: Fetch, data: torch.Tensor) -> torch.Tensor:
        stream = self._transforms.transform_load_stream(
            fetch.item, fetch.descriptors, io.BytesIO(data.numpy().tobytes())
        )
        return torch.frombuffer(bytearray(stream.read()), dtype=torch.uint8)


def _saved_offsets(blob: BlobHeader) -> dict:
    """FQN -> chunk offsets, as the DCP safetensors writer records them in "__metadata__"."""
    raw = blob.metadata.get(CUSTOM_METADATA_KEY)
    try:
        table = json.loads(raw) if raw else {}
        return {fqn: entry["saved_offsets"] for fqn, entry in table.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _cause(failure: dict) -> str:
    status = failure.get("status")
    attempts = failure.get("attempts")
    text = failure.get("error") or "failed"
    if status is not None and f"HTTP {status}" not in text:
        text = f"HTTP {status}: {text}"
    if attempts:
        text += f" after {attempts} attempt(s)"
    return text


def _object_order(fetch: Fetch) -> tuple[str, int]:
    return fetch.path, fetch.offset


def _cancel_all(pending: deque) -> None:
    for _, handle, _ in pending:
        handle.cancel()
    pending.clear()
