"""The local endpoint's object store: buckets, object generations, soft deletes, on one data dir.

Objects live at `<data>/.cloudstorage/<bucket>/<object>` (where nginx serves media reads from).
Every version gets a generation from one counter (8 digits, increasing, so a later write has a
larger one, as with GCS's microsecond timestamps), is committed by renaming a finished file
into place (a read nginx opened before the rename keeps reading the old version whole), and is
hard-linked as `<data>/.generations/<bucket>/<generation>/<object>` for `generation=` reads.
The file's mtime spells the generation's decimal digits in hex, so nginx's own ETag carries
the generation and nginx copies it into `x-goog-generation` without asking Python. A delete in
a bucket with soft delete moves that link to `<data>/.soft_deleted/...` (no bytes copied).
One lock guards the tables; uploads hash and write outside it and take it only to commit.
The tables are written to `<data>/.cloudstorage/.meta` by a flusher (at most every
META_FLUSH_S, and at close), not after every change: a rewrite per change grew with everything
the data dir ever held (docs/measurements.md). The store's errors, generation stamps, object
resources and on-disk names are in server_objects.py, its pending MD5s in server_md5.py.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
import time

from gcsckpt.testing.server_http import UPLOADS_DIR
from gcsckpt.testing.server_md5 import LazyMD5Tables
from gcsckpt.testing.server_objects import (
    BucketNotFound,
    Conflict,
    NotFound,
    PreconditionFailed,
    generation_etag,
    generation_mtime,
    now_rfc3339,
    relative_path,
)
from gcsckpt.testing.server_sums import LazyMD5

OBJECTS_DIR = ".cloudstorage"
GENERATIONS_DIR = ".generations"
SOFT_DELETED_DIR = ".soft_deleted"
FIRST_GENERATION = 10_000_000
LAST_GENERATION = 99_999_999
DEFAULT_SOFT_DELETE_S = 7 * 24 * 3600  # GCS's default for new buckets
META_FLUSH_S = 0.5  # longest delay between a change and `.meta` holding it, seconds


class Store(LazyMD5Tables):
    """Buckets and objects of one data dir (absolute path); `lock` guards every table.

    Tables (JSON API resources as dicts): `buckets[b]`, `objects[b][name]`,
    `soft_deleted[b][name][generation]`. `md5_worker`: start the idle MD5 worker (off:
    md5Hash only on demand).
    """

    def __init__(self, data_dir: str, md5_worker: bool = True) -> None:
        self.lock = threading.RLock()
        self.data_dir = data_dir
        self.objects_root = os.path.join(data_dir, OBJECTS_DIR)
        self._gen_root = os.path.join(data_dir, GENERATIONS_DIR)
        self._soft_root = os.path.join(data_dir, SOFT_DELETED_DIR)
        self._tmp_dir = os.path.join(self._gen_root, ".tmp")
        self.uploads_dir = os.path.join(data_dir, UPLOADS_DIR)
        shutil.rmtree(self.uploads_dir, ignore_errors=True)  # sessions do not survive
        for path in (self.objects_root, self._tmp_dir, self.uploads_dir, self._soft_root):
            os.makedirs(path, exist_ok=True)
        self._meta_path = os.path.join(self.objects_root, ".meta")
        try:
            with open(self._meta_path) as f:
                meta = json.load(f)
        except FileNotFoundError:
            meta = {}
        self.buckets: dict[str, dict] = meta.get("buckets") or {}
        self.objects: dict[str, dict[str, dict]] = meta.get("objects") or {}
        self.soft_deleted: dict[str, dict[str, dict[str, dict]]] = meta.get("soft_deleted") or {}
        self._links: dict[tuple[str, str], str] = {}
        self._md5_pending: dict[tuple[str, str], LazyMD5] = {}  # live generations without one
        self._md5_queue: queue.SimpleQueue[LazyMD5] = queue.SimpleQueue()
        self._meta_dirty = threading.Event()
        self._adopt_existing_objects()
        threading.Thread(target=self._meta_flusher, name="meta-flush", daemon=True).start()
        if md5_worker:
            threading.Thread(target=self._md5_worker, name="md5-idle", daemon=True).start()

    def changed(self) -> None:
        """Marks `.meta` stale (the flusher writes it within META_FLUSH_S)."""
        self._meta_dirty.set()

    def _meta_flusher(self) -> None:
        while True:
            self._meta_dirty.wait()
            time.sleep(META_FLUSH_S)  # changes in the meantime share one write
            self.flush_metadata()

    def flush_metadata(self) -> None:
        """Writes `.meta` now (atomically, compact JSON) if a change is not yet in it."""
        with self.lock:
            if not self._meta_dirty.is_set():
                return
            self._meta_dirty.clear()
            self._write_meta()

    def _write_meta(self) -> None:
        tables = {"buckets": self.buckets, "objects": self.objects}
        tables["soft_deleted"] = self.soft_deleted
        tmp = self._meta_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(tables, f, separators=(",", ":"))
        os.replace(tmp, self._meta_path)

    def _link_path(self, root: str, bucket: str, name: str, generation) -> str:
        return os.path.join(root, bucket, str(generation), relative_path(name))

    def _take_generation(self) -> int:
        if self._next_generation > LAST_GENERATION:
            raise RuntimeError("LocalGCS ran out of 8-digit generations; use a new data dir")
        self._next_generation += 1
        return self._next_generation - 1

    def _adopt_existing_objects(self) -> None:
        """Links the objects of a reused data dir; gives foreign generations new ones."""
        known = [
            int(o.get("generation") or 0) for objs in self.objects.values() for o in objs.values()
        ]
        known += [
            int(g)
            for gens in self.soft_deleted.values()
            for by_gen in gens.values()
            for g in by_gen
        ]
        known = [g for g in known if FIRST_GENERATION <= g <= LAST_GENERATION]
        self._next_generation = max(known, default=FIRST_GENERATION - 1) + 1
        for bucket, objs in self.objects.items():
            for name, obj in list(objs.items()):
                path = self.object_file(bucket, name)
                if not os.path.isfile(path):
                    del objs[name]  # its entry outlived its file (a crash between the two)
                    self.changed()
                    continue
                generation = int(obj.get("generation") or 0)
                if not FIRST_GENERATION <= generation <= LAST_GENERATION:
                    generation = self._take_generation()
                    obj["generation"] = str(generation)
                    self.changed()
                mtime = generation_mtime(generation)
                os.utime(path, (mtime, mtime))
                self._link(bucket, name, path, generation)
                if not obj.get("md5Hash"):  # pending when the last run ended
                    self._md5_later(bucket, name, generation)

    def _link(self, bucket: str, name: str, path: str, generation: int) -> None:
        link = self._link_path(self._gen_root, bucket, name, generation)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.unlink(link)
        os.link(path, link)
        self._links[(bucket, name)] = link

    def _unlink(self, bucket: str, name: str, keep_as: str | None = None) -> None:
        """Drops the live generation's link (moved to `keep_as` when given) and pending MD5."""
        pending = self._md5_pending.pop((bucket, name), None)
        if pending is not None:
            pending.stop()  # that generation is gone: its MD5 is never needed
        link = self._links.pop((bucket, name), None)
        if link is None or not os.path.lexists(link):
            return
        if keep_as is None:
            os.unlink(link)
            return
        os.makedirs(os.path.dirname(keep_as), exist_ok=True)
        os.replace(link, keep_as)

    def object_file(self, bucket: str, name: str) -> str:
        """Where the live version of gs://bucket/name lies on disk."""
        return os.path.join(self.objects_root, bucket, relative_path(name))

    def generation_file(self, bucket: str, name: str, generation: str | int) -> str:
        """The hard link of one live generation of gs://bucket/name (absent when it is not)."""
        return self._link_path(self._gen_root, bucket, name, generation)

    def create_bucket(self, name: str, fields: dict | None = None) -> dict:
        """Creates bucket `name` with the resource `fields` given (softDeletePolicy, ...).

        Raises:
          Conflict: it exists.
        """
        with self.lock:
            if name in self.buckets:
                raise Conflict(f"bucket {name!r} already exists")
            now = now_rfc3339()
            bucket = {
                "kind": "storage#bucket",
                "id": name,
                "name": name,
                "projectNumber": "0",
                "timeCreated": now,
                "updated": now,
                "metageneration": "1",
                "location": "US",
                "storageClass": "STANDARD",
                "etag": "CAE=",
                "softDeletePolicy": {"retentionDurationSeconds": str(DEFAULT_SOFT_DELETE_S)},
            }
            bucket.update({k: v for k, v in (fields or {}).items() if k != "name"})
            self.buckets[name] = bucket
            os.makedirs(os.path.join(self.objects_root, name), exist_ok=True)
            self.changed()
            return dict(bucket)

    def bucket(self, name: str) -> dict:
        """The resource of bucket `name`. Raises BucketNotFound."""
        if name not in self.buckets:
            raise BucketNotFound(f"bucket {name!r} does not exist")
        return self.buckets[name]

    require_bucket = bucket

    def patch_bucket(self, name: str, fields: dict) -> dict:
        """Sets the resource fields given (softDeletePolicy, labels, ...). Raises NotFound."""
        with self.lock:
            bucket = self.bucket(name)
            bucket.update({k: v for k, v in fields.items() if k != "name"})
            bucket["metageneration"] = str(int(bucket.get("metageneration", "1")) + 1)
            bucket["updated"] = now_rfc3339()
            self.changed()
            return dict(bucket)

    def _retention_s(self, bucket: str) -> int:
        policy = self.buckets[bucket].get("softDeletePolicy") or {}
        return int(policy.get("retentionDurationSeconds", DEFAULT_SOFT_DELETE_S))

    def get_object(self, bucket: str, name: str, md5: bool = True) -> dict:
        """The live object resource of gs://bucket/name (md5Hash finished when `md5`).

        Raises:
          NotFound: the bucket or object does not exist.
        """
        with self.lock:
            self.bucket(bucket)
            obj = self.objects.get(bucket, {}).get(name)
            if obj is None:
                raise NotFound(f"gs://{bucket}/{name} does not exist")
            return self.fill_md5(obj, md5)

    def get_soft_deleted(self, bucket: str, name: str, generation: str, md5: bool = True) -> dict:
        """One soft-deleted generation's resource. Raises NotFound."""
        with self.lock:
            obj = self.soft_deleted.get(bucket, {}).get(name, {}).get(str(generation))
            if obj is None:
                raise NotFound(f"gs://{bucket}/{name}#{generation} is not soft-deleted")
            return self._fill_soft_deleted_md5(obj, md5)

    def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        delimiter: str = "",
        soft_deleted: bool = False,
        md5: bool = True,
    ) -> tuple[list[dict], list[str]]:
        """(copies of the objects, sorted by name, then generation; prefixes sorted).

        Raises:
          NotFound: the bucket does not exist.
        """
        with self.lock:
            self.bucket(bucket)
            if soft_deleted:
                found = [
                    self._fill_soft_deleted_md5(obj, md5)
                    for name, gens in self.soft_deleted.get(bucket, {}).items()
                    if name.startswith(prefix)
                    for obj in gens.values()
                ]
            else:
                found = [
                    self.fill_md5(obj, md5)
                    for name, obj in self.objects.get(bucket, {}).items()
                    if name.startswith(prefix)
                ]
            prefixes = set()
            if delimiter:
                kept = []
                for obj in found:
                    head, sep, _ = obj["name"][len(prefix) :].partition(delimiter)
                    if sep:
                        prefixes.add(prefix + head + delimiter)
                    else:
                        kept.append(obj)
                found = kept
            found.sort(key=lambda o: (o["name"], int(o["generation"])))
            return [dict(o) for o in found], sorted(prefixes)

    def check_precondition(self, bucket: str, name: str, wanted: str | int | None) -> None:
        """Raises PreconditionFailed unless gs://bucket/name is at generation `wanted`
        (0: absent); None or "" checks nothing. Under the lock."""
        if wanted is None or wanted == "":
            return
        current = self.objects.get(bucket, {}).get(name)
        have = int(current["generation"]) if current else 0
        if int(wanted) != have:
            raise PreconditionFailed(
                f"ifGenerationMatch={wanted} but gs://{bucket}/{name} has generation "
                f"{have}" + (" (it exists)" if have else " (it does not exist)")
            )

    def new_temp_path(self) -> str:
        """A fresh, empty file on the data disk (same file system as the objects)."""
        fd, path = tempfile.mkstemp(dir=self._tmp_dir)
        os.close(fd)
        return path

    def commit_file(
        self, bucket: str, name: str, src: str, file_obj: dict, if_generation_match=None
    ) -> dict:
        """Makes the finished file `src` the new live version of gs://bucket/name.

        `src` must be on the data disk; it is renamed (its name is gone afterwards, whatever
        happens). The precondition is checked and the generation taken under the lock, so of
        two racing create-if-absent commits exactly one wins. Without an md5Hash in
        `file_obj`, the generation's MD5 is left to the idle worker and the etag is
        generation_etag.

        Returns:
          `file_obj` with its generation, id, mediaLink (and etag) set; the table keeps a
          copy of its own (so the caller may serialize `file_obj` outside the lock).
        Raises:
          BucketNotFound, PreconditionFailed, ValueError (a name with a ".." segment).
        """
        try:
            with self.lock:
                self.bucket(bucket)
                self.check_precondition(bucket, name, if_generation_match)
                path = self.object_file(bucket, name)
                generation = self._take_generation()
                file_obj["generation"] = str(generation)
                file_obj["id"] = f"{bucket}/{name}/{generation}"
                if "mediaLink" in file_obj:
                    file_obj["mediaLink"] += f"?generation={generation}&alt=media"
                if not file_obj.get("etag"):
                    file_obj["etag"] = generation_etag(generation, os.path.getsize(src))
                mtime = generation_mtime(generation)
                os.utime(src, (mtime, mtime))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                self._unlink(bucket, name)
                self._link(bucket, name, src, generation)
                os.replace(src, path)  # readers see the old file or the new one, never a mix
                self.objects.setdefault(bucket, {})[name] = dict(file_obj)
                if not file_obj.get("md5Hash"):
                    self._md5_later(bucket, name, generation)
                self.changed()
                return file_obj
        finally:
            if os.path.exists(src):
                os.unlink(src)

    def patch_object(self, bucket: str, name: str, fields: dict) -> dict:
        """Sets metadata fields (metadata, contentType, ...); metageneration + 1. NotFound."""
        with self.lock:
            obj = self.get_object(bucket, name, md5=False)
            custom = fields.get("metadata")
            for key in ("contentType", "contentEncoding", "contentDisposition", "cacheControl"):
                if key in fields:
                    obj[key] = fields[key]
            if custom is not None:
                merged = {**(obj.get("metadata") or {}), **custom}
                obj["metadata"] = {k: v for k, v in merged.items() if v is not None}
            obj["metageneration"] = str(int(obj.get("metageneration", "1")) + 1)
            obj["updated"] = now_rfc3339()
            self.changed()
            return dict(self.fill_md5(obj))

    def delete_object(self, bucket: str, name: str, if_generation_match=None) -> None:
        """Deletes the live gs://bucket/name; with the bucket's soft delete on, its generation
        is kept (listed with softDeleted=true) by moving its link (no bytes copied).

        Raises:
          NotFound, PreconditionFailed.
        """
        with self.lock:
            obj = self.get_object(bucket, name, md5=False)
            self.check_precondition(bucket, name, if_generation_match)
            retention = self._retention_s(bucket)
            keep_as = None
            if retention > 0:
                generation = obj["generation"]
                keep_as = self._link_path(self._soft_root, bucket, name, generation)
                soft = {**obj, "softDeleteTime": now_rfc3339()}
                soft["hardDeleteTime"] = now_rfc3339(retention)
                self.soft_deleted.setdefault(bucket, {}).setdefault(name, {})[generation] = soft
            self._unlink(bucket, name, keep_as)
            del self.objects[bucket][name]
            path = self.object_file(bucket, name)
            if os.path.exists(path):
                os.unlink(path)
            self.changed()
