"""The setup manifest: proof that a case's checkpoint is complete and matches the run's config.

Layout below ``gs://<bucket>/<prefix>/<case>/``: ``checkpoint/`` (the DCP objects),
``setup/rank_NNNNN.json`` (each rank's checksums and tensor bytes) and ``setup/manifest.json``,
written last by the runner. A checkpoint is reused only when the manifest exists, its config hash
(``parallel.app_state.state_config_hash`` with the save seed) matches, every rank's checksum
object exists, and the objects under ``checkpoint/`` are exactly the ones the manifest lists,
with the same sizes. Talks to GCS through ``gcsckpt.io.ObjectStore`` (anonymous against an
emulator, Application Default Credentials against GCS).
"""

from __future__ import annotations

import dataclasses
import datetime
import json

from ckptbench.worker.case_jobs import Storage, checksums_object
from gcsckpt.io import ObjectStore

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SetupManifest:
    """What a finished setup wrote.

    Attributes:
      case_name: the case. config_hash: 16 hex digits (see module doc). world_size: ranks.
      objects: checkpoint object name (relative to the checkpoint prefix) -> size in bytes.
      created_at: ISO-8601 UTC time the manifest was written.
      version: manifest format version.
    """

    case_name: str
    config_hash: str
    world_size: int
    objects: dict[str, int]
    created_at: str
    version: int = MANIFEST_VERSION

    @property
    def physical_size_bytes(self) -> int:
        """Stored bytes of all checkpoint objects (``.distcp`` and ``.metadata``)."""
        return sum(self.objects.values())

    @property
    def object_count(self) -> int:
        """Number of checkpoint objects."""
        return len(self.objects)


def manifest_object(storage: Storage) -> str:
    """Object name of the case's manifest."""
    return f"{storage.setup_prefix}/{MANIFEST_NAME}"


def list_sizes(store: ObjectStore, bucket: str, prefix: str) -> dict[str, int]:
    """Object name (relative to ``prefix``) -> size in bytes, for every object under ``prefix/``."""
    folder = f"{prefix}/"
    return {info.name[len(folder) :]: info.size for info in store.list_objects(bucket, folder)}


def delete_prefix(store: ObjectStore, bucket: str, prefix: str) -> int:
    """Deletes every object under ``prefix/``; returns how many."""
    names = store.list(bucket, f"{prefix}/")
    for name in names:
        store.delete(bucket, name)
    return len(names)


def read_manifest(store: ObjectStore, storage: Storage) -> SetupManifest | None:
    """The case's manifest, or None when it is absent or unreadable (then setup runs again)."""
    try:
        data = json.loads(store.download(storage.bucket, manifest_object(storage)))
        return SetupManifest(**data)
    except (FileNotFoundError, ValueError, TypeError):  # absent, not JSON, other layout: again
        return None


def reusable(
    store: ObjectStore,
    storage: Storage,
    manifest: SetupManifest | None,
    config_hash: str,
    world_size: int,
) -> str | None:
    """Why the stored checkpoint cannot be reused, or None when it can.

    Args:
      manifest: from ``read_manifest``.
      config_hash: the hash the run needs. world_size: the case's ranks.
    """
    if manifest is None:
        return "no setup manifest"
    if manifest.version != MANIFEST_VERSION:
        return f"manifest version {manifest.version} != {MANIFEST_VERSION}"
    if manifest.config_hash != config_hash:
        return f"config hash {manifest.config_hash} != {config_hash}"
    if manifest.world_size != world_size:
        return f"world size {manifest.world_size} != {world_size}"
    stored = list_sizes(store, storage.bucket, storage.checkpoint_prefix)
    if stored != manifest.objects:
        return "checkpoint objects differ from the manifest's list"
    setup = list_sizes(store, storage.bucket, storage.setup_prefix)
    folder = f"{storage.setup_prefix}/"
    for rank in range(world_size):
        if checksums_object(storage.setup_prefix, rank)[len(folder) :] not in setup:
            return f"checksums of rank {rank} are missing"
    return None


def write_manifest(
    store: ObjectStore, storage: Storage, case_name: str, config_hash: str, world_size: int
) -> SetupManifest:
    """Lists the checkpoint's objects and writes the manifest (the last object of a setup).

    Raises:
      RuntimeError: the checkpoint has no ``.metadata`` (the save did not finish).
    """
    objects = list_sizes(store, storage.bucket, storage.checkpoint_prefix)
    if ".metadata" not in objects:
        raise RuntimeError(f"{storage.checkpoint_url}/.metadata is missing after the save")
    manifest = SetupManifest(
        case_name=case_name,
        config_hash=config_hash,
        world_size=world_size,
        objects=dict(sorted(objects.items())),
        created_at=datetime.datetime.now(datetime.UTC).isoformat(),
    )
    body = json.dumps(dataclasses.asdict(manifest), indent=1, sort_keys=True)
    store.upload(storage.bucket, manifest_object(storage), body.encode())
    return manifest
