"""GCSObjectFiles: the file operations torch's `_FileSystemWriter` asks of its `fs`, on GCS.

Kept apart from `gcsckpt.dcp.writer`, which holds the StorageWriter itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gcsckpt.dcp.paths import parse_checkpoint_id
from gcsckpt.io.objects import ObjectStore


class GCSObjectFiles:
    """The file operations torch's `_FileSystemWriter` asks of its `fs`, on GCS objects.

    Paths are `gs://bucket/prefix[/name]` URLs. GCS has no folders, so `mkdir` does nothing.
    Objects are written by the writer itself (data through the uploader, `.metadata` through
    `ObjectStore.upload`), never through a stream of this class.

    Args:
        store: returns the writer's ObjectStore (made on first use: a writer is built before
            DCP says which rank it serves).
    """

    def __init__(self, store: Callable[[], ObjectStore]) -> None:
        self._store = store

    @property
    def store(self) -> ObjectStore:
        """The writer's ObjectStore."""
        return self._store()

    def init_path(self, path: str | os.PathLike) -> str:
        """The checkpoint URL, normalized (ValueError for a bad id)."""
        return parse_checkpoint_id(path).url()

    def concat_path(self, path: str | os.PathLike, suffix: str) -> str:
        """`path/suffix` (suffix: an object name relative to the checkpoint)."""
        return f"{str(path).rstrip('/')}/{suffix}"

    def mkdir(self, path: str | os.PathLike) -> None:
        """Nothing to create: a GCS prefix exists once an object is below it."""

    def exists(self, path: str | os.PathLike) -> bool:
        """True if the object at `path` exists (one metadata GET)."""
        loc = parse_checkpoint_id(path)
        return self.store.exists(loc.bucket, loc.prefix)

    def rm_file(self, path: str | os.PathLike) -> None:
        """Deletes the object at `path` (missing is fine)."""
        loc = parse_checkpoint_id(path)
        self.store.delete(loc.bucket, loc.prefix)
