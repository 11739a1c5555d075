"""Checking a saved checkpoint on the rank side, for the save benchmark and the training
benchmark alike: a byte-exact copy of its objects on this node's disk, node-local save folders,
and the load back with torch's stock ``FileSystemReader`` compared entry by entry.

Saves are checked with the stock reader (and its default planner, counted), never with the
arm's own reader.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader

from ckptbench.worker.counting_planner import counting_planner_for
from ckptbench.worker.load_job import LISTED_KEYS, compare_checksums
from ckptbench.workloads.models.state import expected_bytes, local_checksums
from gcsckpt.io import ObjectStore

VERIFY_READER = "FileSystemReader"


def empty_prefix(store: ObjectStore, bucket: str, prefix: str) -> int:
    """Deletes every object under ``prefix/`` in ``bucket``; returns the bytes they held."""
    objects = store.list_objects(bucket, f"{prefix}/")
    for info in objects:
        store.delete(bucket, info.name)
    return sum(info.size for info in objects)


def copy_to_disk(store: ObjectStore, bucket: str, prefix: str, folder: str) -> int:
    """Downloads every object under ``prefix/`` into ``folder`` (same relative names, byte for
    byte, 4 at a time through ObjectStore); returns the bytes copied."""
    objects = store.list_objects(bucket, f"{prefix}/")

    def fetch(info) -> int:
        path = os.path.join(folder, info.name[len(prefix) + 1 :])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = store.download(bucket, info.name)
        with open(path, "wb") as f:
            f.write(data)
        return len(data)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return sum(pool.map(fetch, objects))


def node_local_folder(root: str | None, scratch: str, name: str) -> str:
    """A node-local save folder (the ``localfs`` reference, the local tier):
    ``<root or scratch>/gcsckpt-bench-<scratch id>-<name>``; ``root`` is ``/dev/shm`` when it
    has room (``arms.local_save_root``), ``scratch`` the job's scratch dir.

    Raises:
      ValueError: the ranks span more than one node (the folder is node-local).
    """
    world = dist.get_world_size()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if local_world != world:
        raise ValueError(
            f"{name}: a node-local save folder needs every rank on one node (world size "
            f"{world}, {local_world} ranks on this node)"
        )
    return os.path.join(root or scratch, f"gcsckpt-bench-{os.path.basename(scratch)}-{name}")


@dataclasses.dataclass(frozen=True)
class LoadBack:
    """One rank's stock load of a saved checkpoint, compared with the state's checksums.

    Attributes:
      mismatched: keys whose sha256 differs (first ``LISTED_KEYS``); ``mismatch_count`` all.
      missing: keys on one side only (first ``LISTED_KEYS``); ``missing_count`` all.
      committed_bytes: tensor bytes the stock planner saw committed.
      expected_bytes: tensor bytes the target state holds.
    """

    mismatched: tuple[str, ...]
    mismatch_count: int
    missing: tuple[str, ...]
    missing_count: int
    committed_bytes: int
    expected_bytes: int


def load_back(target: dict, folder: str, saved_sums: dict[str, str]) -> LoadBack:
    """Loads the checkpoint in ``folder`` into ``target`` with torch's stock FileSystemReader
    (every rank, a collective) and compares every entry with ``saved_sums`` (``{key: sha256}``
    taken when it was saved).

    Raises:
      what ``dcp.load`` raises (e.g. CheckpointException naming each failing rank).
    """
    planner = counting_planner_for(VERIFY_READER)
    dcp.load(target, storage_reader=FileSystemReader(folder), planner=planner)
    differ, missing = compare_checksums(saved_sums, local_checksums(target))
    return LoadBack(
        tuple(differ[:LISTED_KEYS]),
        len(differ),
        tuple(missing[:LISTED_KEYS]),
        len(missing),
        planner.committed_tensor_bytes,
        expected_bytes(target),
    )
