"""Every byte of a committed checkpoint checked against its block checksums, without loading it.

`verify_checkpoint("gs://bucket/run/step-N")` reads the checkpoint's `.metadata` (one GET, the
restricted unpickler), lists the prefix once (each data object's size and generation), and
reads every byte of every data object `.metadata` names, pinned to the listed generation,
through the range reader with the object's `BlockSums` (`RangeRequest.checksums`): the CRC-32C
of each block is computed in C++ as its bytes arrive, exactly as on a load (`gcsckpt.dcp.load`),
so no checksum is computed in Python. One request per block, so a mismatch names its block and
the other blocks of the same GET (the reader coalesces neighbouring blocks) are still verified.
Reads go in windows of `window_bytes` (default half the reader's `max_inflight_bytes`, as a
load's windows), so memory stays bounded whatever the checkpoint's size.

An object missing from the listing, shorter than `.metadata` records, of another size than its
checksums record, or (with `check_commit_order`) written after `.metadata` is a problem of that
object; objects saved without checksums (stock torch, a peer) are reported unverified, their
bytes not read. The command line's `gcsckpt verify` prints the result (`gcsckpt.cli`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from gcsckpt.dcp.checksums import block_sums, records_of
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.missing import CheckpointNotFoundError
from gcsckpt.dcp.paths import METADATA_NAME, check_relative_path, parse_checkpoint_id
from gcsckpt.io import defaults
from gcsckpt.io.errors import CRC32C_MISMATCH, RangeReadError, failure_cause
from gcsckpt.io.objects import ObjectInfo, ObjectStore
from gcsckpt.io.range_reader import RangeReader
from gcsckpt.io.records import RangeRequest
from gcsckpt.io.retry import RetryPolicy


@dataclass(frozen=True)
class BlockMismatch:
    """A block whose bytes differ from the CRC-32C recorded at save time (also on a re-fetch).

    Attributes:
        url: `gs://bucket/object`. generation: the generation read (None: unknown).
        offset, length: the block's byte range in the object (bytes).
        expected_crc32c, computed_crc32c: the recorded and the computed CRC-32C (uint32 ints).
    """

    url: str
    generation: int | None
    offset: int
    length: int
    expected_crc32c: int
    computed_crc32c: int

    def __str__(self) -> str:
        return (
            f"{self.url} bytes={self.offset}-{self.offset + self.length - 1}"
            f" (generation {self.generation}): CRC-32C mismatch, expected"
            f" 0x{self.expected_crc32c:08x}, computed 0x{self.computed_crc32c:08x}"
        )


@dataclass
class ObjectVerification:
    """One data object of the checkpoint.

    Attributes:
        path: its relative path (as `.metadata` names it). url: `gs://bucket/prefix/path`.
        generation: the listed generation every read was pinned to (None: missing/unknown).
        size: listed size in bytes (None: missing). recorded_size: bytes `.metadata` records
            (the checksums' object size, else the end of its last item).
        checksummed: `.metadata` holds block checksums for it.
        bytes_verified: bytes read and matched against their block CRC-32Cs.
        mismatches: blocks that did not match (BlockMismatch).
        problems: other faults, each a sentence naming the object (missing, short, ...).
    """

    path: str
    url: str
    generation: int | None
    size: int | None
    recorded_size: int
    checksummed: bool
    bytes_verified: int = 0
    mismatches: list[BlockMismatch] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No mismatch and no problem (an unverified object is ok: nothing to check it by)."""
        return not self.mismatches and not self.problems

    @property
    def status(self) -> str:
        """ "ok", "unverified", "mismatch", "missing", "short" or "failed"."""
        if self.size is None:
            return "missing"
        if self.mismatches:
            return "mismatch"
        if self.size < self.recorded_size:
            return "short"
        if self.problems:
            return "failed"
        return "ok" if self.checksummed else "unverified"


@dataclass
class VerifyResult:
    """What `verify_checkpoint` found.

    Attributes:
        url: the checkpoint, `gs://bucket/prefix`. metadata_generation: `.metadata`'s generation.
        objects: one ObjectVerification per data object `.metadata` names, by path.
    """

    url: str
    metadata_generation: int | None
    objects: list[ObjectVerification]

    @property
    def ok(self) -> bool:
        """Every object present, whole, and every checksummed byte matched."""
        return all(o.ok for o in self.objects)

    @property
    def bytes_verified(self) -> int:
        return sum(o.bytes_verified for o in self.objects)

    @property
    def bytes_unverified(self) -> int:
        """Bytes of objects saved without checksums (present ones, listed size)."""
        return sum(o.size or 0 for o in self.objects if not o.checksummed)

    @property
    def mismatches(self) -> list[BlockMismatch]:
        return [m for o in self.objects for m in o.mismatches]

    def to_dict(self) -> dict:
        """Plain JSON-able dict: url, ok, byte totals, and per object its fields and status."""
        return {
            "url": self.url,
            "metadata_generation": self.metadata_generation,
            "ok": self.ok,
            "bytes_verified": self.bytes_verified,
            "bytes_unverified": self.bytes_unverified,
            "objects": [{**asdict(o), "status": o.status, "ok": o.ok} for o in self.objects],
        }


def _recorded_sizes(metadata, records: dict, source: str) -> dict[str, int]:
    """Relative path -> bytes `.metadata` records for it (checksums' size, else items' end)."""
    sizes: dict[str, int] = {}
    for index, info in (metadata.storage_data or {}).items():
        path = check_relative_path(info.relative_path, where=f"{source} ({index.fqn})")
        sizes[path] = max(sizes.get(path, 0), info.offset + info.length)
    for path, record in records.items():
        check_relative_path(path, where=f"{source} (checksums)")
        sizes[path] = max(sizes.get(path, 0), int(record[0]))
    return sizes


def _check_listing(
    obj: ObjectVerification, record, metadata_generation: int | None, check_commit_order: bool
) -> None:
    if obj.size is None:
        obj.problems.append(f"{obj.url} is missing (named by {METADATA_NAME})")
        return
    if obj.size < obj.recorded_size:
        obj.problems.append(
            f"{obj.url} holds {obj.size} bytes, {METADATA_NAME} records {obj.recorded_size}"
            " (truncated)"
        )
    elif record is not None and obj.size != int(record[0]):
        obj.problems.append(
            f"{obj.url} holds {obj.size} bytes, its checksums cover {int(record[0])}"
        )
    if (
        check_commit_order
        and metadata_generation is not None
        and obj.generation is not None
        and obj.generation > metadata_generation
    ):
        obj.problems.append(
            f"{obj.url} generation {obj.generation} was written after {METADATA_NAME}"
            f" (generation {metadata_generation}); a checkpoint copied object by object is in"
            " another order: verify it with check_commit_order=False (--no-commit-order)"
        )


def _blocks(record, size: int) -> list[tuple[int, int]]:
    """(offset, length) of every block of `record` that lies within the object's `size` bytes."""
    total = int(record[0])
    starts = np.frombuffer(record[1], dtype="<u8").astype(np.int64)
    ends = np.append(starts[1:], total)
    return [(int(s), int(e - s)) for s, e in zip(starts, ends, strict=True) if e <= size and e > s]


def verify_checkpoint(
    checkpoint_id: str | os.PathLike,
    *,
    endpoint: str | None = None,
    token_provider: Callable[[], str] | None = None,
    retry: RetryPolicy | None = None,
    window_bytes: int | None = None,
    check_commit_order: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyResult:
    """Reads every byte of every data object the checkpoint's `.metadata` names, pinned to its
    listed generation, against the block CRC-32Cs recorded at save time (see module doc).

    Args:
        checkpoint_id: `gs://bucket/prefix` of a committed checkpoint (e.g. `run/step-N`).
        endpoint, token_provider, retry: as GCSStorageReader's (None: $STORAGE_EMULATOR_HOST,
            else GCS; ADC; RetryPolicy()).
        window_bytes: bytes read per submit (memory held), default half of the reader's
            `max_inflight_bytes`; at least one block is read at a time.
        check_commit_order: report data objects newer than `.metadata` (as a load fails them).
        progress: called as progress(bytes done, bytes to read) before the first window and
            after each (for a progress bar); bytes to read are the checksummed objects'.

    Returns:
        VerifyResult; `.ok` is False on any mismatch, missing, short or changed object.

    Raises:
        ValueError: a bad checkpoint_id, or a `.metadata` that is not a safe DCP Metadata or
            whose checksums are unreadable (names the object). CheckpointNotFoundError: no
            `.metadata`. ObjectStoreError: the `.metadata` read or the listing failed.
    """
    location = parse_checkpoint_id(checkpoint_id)
    url = location.url()
    retry = retry if retry is not None else RetryPolicy()
    window = window_bytes if window_bytes is not None else defaults.MAX_INFLIGHT_BYTES // 2
    if window < 1:
        raise ValueError(f"window_bytes must be >= 1, got {window_bytes!r}")
    with ObjectStore(endpoint, token_provider=token_provider, retry=retry) as store:
        source = location.url(METADATA_NAME)
        try:
            data, metadata_generation = store.read(
                location.bucket, location.object_name(METADATA_NAME)
            )
        except FileNotFoundError:
            raise CheckpointNotFoundError(
                f"no checkpoint at {url} ({source} does not exist)"
            ) from None
        metadata = load_metadata(data, source=source)
        records = records_of(metadata)
        recorded = _recorded_sizes(metadata, records, source)
        prefix = location.object_name("")
        listing: dict[str, ObjectInfo] = {
            info.name[len(prefix) :]: info
            for info in store.list_objects(location.bucket, prefix, delimiter="/")
        }
    listed_metadata = listing.get(METADATA_NAME)
    if listed_metadata is not None and listed_metadata.generation is not None:
        metadata_generation = listed_metadata.generation
    objects = []
    for path in sorted(recorded):
        info = listing.get(path)
        obj = ObjectVerification(
            path=path,
            url=location.url(path),
            generation=None if info is None else info.generation,
            size=None if info is None else info.size,
            recorded_size=recorded[path],
            checksummed=path in records,
        )
        _check_listing(obj, records.get(path), metadata_generation, check_commit_order)
        objects.append(obj)
    sums = block_sums(records, [o.path for o in objects if o.checksummed and o.size is not None])
    work = [
        (obj, offset, length)
        for obj in objects
        if obj.path in sums
        for offset, length in _blocks(records[obj.path], obj.size)
    ]
    if work:
        reader = RangeReader(endpoint, token_provider=token_provider, retry=retry)
        try:
            _read_windows(reader, location.bucket, prefix, work, sums, window, progress)
        finally:
            reader.close()
    return VerifyResult(url, metadata_generation, objects)


def _read_windows(reader, bucket, prefix, work, sums, window, progress) -> None:
    start, done, todo = 0, 0, sum(length for _, _, length in work)
    if progress is not None:
        progress(0, todo)
    while start < len(work):
        end, total = start, 0
        while end < len(work) and (end == start or total + work[end][2] <= window):
            total += work[end][2]
            end += 1
        _read_window(reader, bucket, prefix, work[start:end], sums, total)
        done += total
        if progress is not None:
            progress(done, todo)
        start = end


def _read_window(reader, bucket, prefix, blocks, sums, total) -> None:
    """Reads one window of blocks, crediting each object's matched bytes and recording the
    mismatches and other failures the reader reports.

    A block that does not match fails the whole GET it arrived in, so a failure names its own
    block only for the request of that block; the other requests of that GET are read again in
    another pass (without the blocks found bad) until every block is matched or blamed.
    """
    buffer = np.empty(total, dtype=np.uint8)
    views, at = [], 0
    for _, _, length in blocks:
        views.append(buffer[at : at + length])
        at += length
    pending = list(range(len(blocks)))
    while pending:
        failed = _read_once(reader, bucket, prefix, blocks, sums, views, pending)
        again = []
        for i in pending:
            obj, offset, length = blocks[i]
            failure = failed.get(i)
            if failure is None:
                obj.bytes_verified += length
            elif failure.get("cause") != CRC32C_MISMATCH or "expected_crc32c" not in failure:
                _problem(obj, offset, length, failure_cause(failure))
            elif (int(failure["block_offset"]), int(failure["block_length"])) == (offset, length):
                obj.mismatches.append(
                    BlockMismatch(
                        obj.url,
                        obj.generation,
                        offset,
                        length,
                        int(failure["expected_crc32c"]),
                        int(failure["computed_crc32c"]),
                    )
                )
            else:  # another block of its GET did not match: read this one again
                again.append(i)
        if len(again) == len(pending):  # no block blamed: never loop for good
            for i in again:
                obj, offset, length = blocks[i]
                _problem(obj, offset, length, failure_cause(failed[i]))
            again = []
        pending = again


def _read_once(reader, bucket, prefix, blocks, sums, views, indices) -> dict[int, dict]:
    """{index into blocks: failure dict} of one submit of the blocks at `indices`."""
    requests = []
    for i in indices:
        obj, offset, length = blocks[i]
        requests.append(
            RangeRequest(
                bucket, prefix + obj.path, offset, length, views[i], obj.generation, sums[obj.path]
            )
        )
    try:
        reader.read(requests)
    except RangeReadError as exc:
        failed = {indices[f["index"]]: f for f in exc.failures if "index" in f}
        # Not one request to blame: every block of the submit failed with the error.
        return failed or {i: {"error": str(exc)} for i in indices}
    return {}


def _problem(obj: ObjectVerification, offset: int, length: int, cause: str) -> None:
    """Records a failed read of a block of `obj` (one line per object and cause)."""
    line = f"(generation {obj.generation}): {cause}"
    if not any(p.endswith(line) for p in obj.problems):
        obj.problems.append(f"{obj.url} bytes={offset}-{offset + length - 1} {line}")
