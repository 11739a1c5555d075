"""The node-local tier of `GCSCheckpointer(local_dir=...)`: each rank's newest checkpoint on the
node as well, so a restart on the same nodes reads memory (tmpfs) instead of GCS.

Each rank writes what it saved with torch's own `FileSystemWriter` (`no_dist`: the rank's items
only, no collectives) into `<local_dir>/<bucket>/<run prefix>/rank-<r>-of-<w>/step-N/`, then a
manifest, `gcsckpt-local.json` (step, rank, world size and every file's size and CRC-32C),
written last by rename: a folder without it is a copy cut short. Only the newest step is kept.
Before a load uses the copy, every file is read and checked against the manifest (`verify`), so
a corrupted or truncated local file is caught and GCS used instead; torch's `FileSystemReader`
then loads it (`no_dist`), each file read once into memory and each TORCH_SAVE item decoded by
`torch_save_view` and committed as a GCS load commits (`load.decode.commit_stored`) instead of a
`torch.load` per item (`_TierReader`: torch.load was 0.74 ms of an item's cost, and the tier's
restart took 2x the GCS path's before: docs/measurements.md, "Resume from the node-local
tier"). GCS stays the durable copy: the tier is used only when its
step is the newest complete step in GCS (decided by `GCSCheckpointer.load`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.futures import Future

from gcsckpt.dcp.load.decode import commit_stored, copy_into
from gcsckpt.dcp.load.regions import narrow_block
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.dcp.torch_save_view import tensor_from_torch_save
from gcsckpt.io.uploader import crc32c

MANIFEST = "gcsckpt-local.json"
_READ_BYTES = 64 << 20  # CRC-32C is computed over reads of this size
_ALIGN = 64  # torch.save aligns storages to 64 bytes within an archive


def default_local_dir() -> str:
    """Where `local_dir=True` keeps copies: `/dev/shm/gcsckpt` (tmpfs, memory) where /dev/shm
    exists, else `<tempdir>/gcsckpt-local`."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm/gcsckpt"
    return os.path.join(tempfile.gettempdir(), "gcsckpt-local")


def file_crc32c(path: str) -> int:
    """CRC-32C of a whole file (read in 64 MiB pieces).

    Raises:
        OSError: the file cannot be read.
    """
    value = 0
    with open(path, "rb") as f:
        while chunk := f.read(_READ_BYTES):
            value = crc32c(chunk, value)
    return value


@contextlib.contextmanager
def _no_single_process_warning():
    # no_dist is the point here: torch's "assuming the intent is to save in a single process"
    # warning says nothing to the user.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


class _TierReader(FileSystemReader):
    """torch's `FileSystemReader` for a tier copy (TORCH_SAVE items, no transforms, as
    `LocalTier.write` saves them): each file is read once into memory and each tensor item is a
    view decoded by `tensor_from_torch_save` (which falls back to `torch.load` for anything but a
    plain tensor), copied into its destination. Items with transforms go through torch's own
    `read_data`."""

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        infos = [self.storage_data[item.storage_index] for item in plan.items]
        if any(info.transform_descriptors for info in infos):
            return super().read_data(plan, planner)
        per_file: dict[str, list] = {}
        for item, info in zip(plan.items, infos, strict=True):
            per_file.setdefault(info.relative_path, []).append((item, info))
        # One reused aligned buffer (no page faults per item) for archives that start unaligned;
        # each item's view of it is copied into its destination before the next item.
        scratch = torch.empty(max((info.length for info in infos), default=0), dtype=torch.uint8)
        for relative_path, items in per_file.items():
            path = os.path.join(str(self.path), relative_path)
            data = torch.from_file(
                path, shared=False, size=os.path.getsize(path), dtype=torch.uint8
            )
            for item, info in items:
                piece = data[info.offset : info.offset + info.length]
                if piece.data_ptr() % _ALIGN:  # archives sit back to back: realign for a view
                    piece = copy_into(scratch[: info.length], piece)
                if item.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(item, io.BytesIO(piece.numpy().tobytes()))
                    continue
                tensor = narrow_block(
                    tensor_from_torch_save(piece), item.storage_offsets, item.lengths
                )
                try:
                    commit_stored(planner, item, tensor)
                except ValueError as exc:
                    raise ValueError(f"{path}: item {item.storage_index}: {exc}") from None
        done: Future[None] = Future()
        done.set_result(None)
        return done


class LocalTier:
    """One rank's local copies under `local_dir` for the run at `location`.

    Args:
        local_dir: the node-local folder (e.g. `default_local_dir()`).
        location: the run's root (bucket and prefix), which names the sub-folder, so two runs
            never share copies.
        rank, world_size: this rank and the job's size (a copy is used only at the same size).
    """

    def __init__(
        self, local_dir: str, location: CheckpointLocation, rank: int, world_size: int
    ) -> None:
        parts = [location.bucket, *filter(None, location.prefix.split("/"))]
        self.rank, self.world_size = rank, world_size
        self.base = os.path.join(local_dir, *parts, f"rank-{rank}-of-{world_size}")

    def folder(self, step: int) -> str:
        """The folder of step `step`'s copy."""
        return os.path.join(self.base, f"step-{step}")

    def write(
        self, state_dict: dict[str, Any], step: int, committed: Callable[[], int | None]
    ) -> None:
        """Saves this rank's `state_dict` as step `step` (torch FileSystemWriter, no_dist), then
        waits for GCS's commit (`committed()`: the generation of the step's `.metadata` in GCS,
        None if unknown; it raises when the GCS save failed), then writes the manifest, which
        records that generation (a copy matches that commit only, not a later save of the same
        step), then removes older copies.

        Raises:
            OSError / torch's CheckpointException: the copy failed (the caller logs it; GCS is
            unaffected). A copy without a manifest is never used.
        """
        folder = self.folder(step)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        with _no_single_process_warning():
            dcp.save(
                state_dict,
                storage_writer=FileSystemWriter(folder, sync_files=False, overwrite=True),
                no_dist=True,
            )
        files = {}
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            files[name] = {"size": os.path.getsize(path), "crc32c": file_crc32c(path)}
        manifest = {
            "step": step,
            "rank": self.rank,
            "world_size": self.world_size,
            "gcs_generation": committed(),
            "files": files,
        }
        tmp = os.path.join(folder, MANIFEST + ".tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f)
        os.replace(tmp, os.path.join(folder, MANIFEST))
        self.discard(keep=step)

    def newest(self) -> int | None:
        """The newest step with a manifest, or None."""
        steps = []
        for name in os.listdir(self.base) if os.path.isdir(self.base) else ():
            if name.startswith("step-") and name[5:].isdigit():
                if os.path.exists(os.path.join(self.base, name, MANIFEST)):
                    steps.append(int(name[5:]))
        return max(steps) if steps else None

    def verify(self, step: int, gcs_generation: int | None) -> str:
        """Empty when step `step`'s copy is whole (manifest present, every file's size and
        CRC-32C as recorded) and of the GCS commit at `gcs_generation` (when both are known);
        otherwise what is wrong, naming the file."""
        folder = self.folder(step)
        try:
            with open(os.path.join(folder, MANIFEST)) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as exc:
            return f"{folder}: no readable {MANIFEST} ({exc})"
        if (manifest.get("step"), manifest.get("world_size")) != (step, self.world_size):
            return f"{folder}/{MANIFEST} is for another step or world size"
        recorded = manifest.get("gcs_generation")
        if None not in (recorded, gcs_generation) and recorded != gcs_generation:
            return (
                f"{folder} is a copy of .metadata generation {recorded}, GCS holds"
                f" generation {gcs_generation} (another save of step-{step})"
            )
        for name, want in manifest.get("files", {}).items():
            path = os.path.join(folder, name)
            try:
                size, crc = os.path.getsize(path), file_crc32c(path)
            except OSError as exc:
                return f"{path}: {exc}"
            if size != want["size"]:
                return f"{path} holds {size} bytes, the manifest records {want['size']}"
            if crc != want["crc32c"]:
                return f"{path}: CRC-32C {crc:#010x}, the manifest records {want['crc32c']:#010x}"
        return ""

    def load(self, state_dict: dict[str, Any], step: int) -> None:
        """Loads this rank's copy of step `step` into `state_dict` (`_TierReader` and
        `GCSLoadPlanner`, as a GCS load plans, no_dist).
        Raises what `dcp.load` raises."""
        with _no_single_process_warning():
            dcp.load(
                state_dict,
                storage_reader=_TierReader(self.folder(step)),
                planner=GCSLoadPlanner(),  # BYTE_IO decoded once per distinct value
                no_dist=True,
            )

    def discard(self, keep: int | None = None) -> None:
        """Removes every copy but step `keep`'s (None: every copy)."""
        if not os.path.isdir(self.base):
            return
        for name in os.listdir(self.base):
            if name != f"step-{keep}":
                shutil.rmtree(os.path.join(self.base, name), ignore_errors=True)
