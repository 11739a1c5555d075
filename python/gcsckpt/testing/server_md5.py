"""The Store's pending MD5s (see server_sums.py for why an md5Hash is computed lazily): one
`LazyMD5` per live generation without one, queued for the idle worker thread, finished first by
an answer that carries md5Hash, dropped when the generation goes.

`LazyMD5Tables` is a part of `server_store.Store` (its base class), kept here because it is one
job of its own. It uses the Store's `lock`, `objects`, `_links` (live generation -> link file),
`_md5_pending`, `_md5_queue`, `_soft_root`, `_link_path` and `changed`.
"""

from __future__ import annotations

import base64
import logging
import os

from gcsckpt.testing.server_sums import LazyMD5, file_checksums, lower_this_threads_priority


class LazyMD5Tables:
    """The MD5 half of `server_store.Store` (see module doc)."""

    def _md5_later(self, bucket: str, name: str, generation: int) -> None:
        pending = LazyMD5(bucket, name, generation, self._links[(bucket, name)])
        self._md5_pending[(bucket, name)] = pending
        self._md5_queue.put(pending)

    def fill_md5(self, obj: dict | None, wanted: bool = True) -> dict | None:
        """Gives the live object resource `obj` its md5Hash if it is pending (computing the
        rest now) when `wanted` (selects_md5 of the request); returns `obj`. Under the lock."""
        if obj is None or obj.get("md5Hash") or not wanted:
            return obj
        key = (obj.get("bucket"), obj.get("name"))
        pending = self._md5_pending.get(key)
        if pending is not None and str(pending.generation) == str(obj.get("generation")):
            obj["md5Hash"] = base64.b64encode(pending.finish()).decode("ascii")
            del self._md5_pending[key]
            self.changed()
        return obj

    def _fill_soft_deleted_md5(self, obj: dict, wanted: bool) -> dict:
        """A copy deleted while its MD5 was pending gets it from its kept link when asked."""
        if obj.get("md5Hash") or not wanted:
            return obj
        path = self._link_path(self._soft_root, obj["bucket"], obj["name"], obj["generation"])
        if os.path.isfile(path):
            obj["md5Hash"] = file_checksums(path, md5=True).md5
        return obj

    def _md5_worker(self) -> None:
        """Computes pending MD5s at idle priority, one generation at a time, for ever."""
        lower_this_threads_priority()
        while True:
            self.compute_md5(self._md5_queue.get())

    def compute_md5(self, pending: LazyMD5) -> None:
        """The worker's job for one generation: hashes it step by step (the lock not held),
        then stores its md5Hash if that generation is still live and pending."""
        try:
            fd = os.open(pending.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # replaced or deleted before its turn
        try:
            while pending.step(fd):
                pass
        except OSError as err:
            logging.warning("MD5 of %s left to its readers: %s", pending.path, err)
        finally:
            os.close(fd)
        digest = pending.digest()
        if digest is None:
            return  # stopped: gone, or an answer finished it
        with self.lock:
            key = (pending.bucket, pending.name)
            if self._md5_pending.get(key) is not pending:
                return
            obj = self.objects.get(pending.bucket, {}).get(pending.name)
            if obj is not None and str(obj.get("generation")) == str(pending.generation):
                obj["md5Hash"] = base64.b64encode(digest).decode("ascii")
                self.changed()
            del self._md5_pending[key]

    def pending_md5(self, bucket: str, name: str) -> LazyMD5 | None:
        """The live generation of gs://bucket/name's MD5 while it is pending, else None."""
        with self.lock:
            return self._md5_pending.get((bucket, name))
