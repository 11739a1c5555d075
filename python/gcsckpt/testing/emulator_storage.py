"""The emulator's object store with generations nginx can serve and atomic, path-based commits.

Imported by emulator_main.py (a script started by LocalGCS; it imports this module as a sibling,
so it runs without gcsckpt on sys.path).

- Generations. Every object version gets a generation from one counter (increasing, so a later
  write has a larger generation, as with GCS's microsecond timestamps), is written atomically
  (temp file, then rename: a media read that nginx opened before the rename keeps reading the
  old version whole, one after it reads the new one whole), and is linked as
  `<data>/.generations/<bucket>/<generation>/<object>` (one hard link, removed when the object
  is replaced or deleted). nginx serves `generation=G` and `ifGenerationMatch=G` media reads
  from that link. The file's mtime is set to the generation's decimal digits read as
  hexadecimal, so nginx's own ETag (`"<mtime hex>-<size hex>"`) starts with the generation's
  decimal digits, and nginx copies them into `x-goog-generation` on every media answer without
  any request reaching Python. Generations have 8 digits (10000000..99999999, mtimes
  1978..2051, which every Linux file system keeps).
- Commits by path. `commit_file` takes a finished file on the data disk (an upload body nginx
  wrote, a part concatenation), checks the precondition, numbers it and renames it into place;
  the bytes are never copied through Python. `file_checksums` reads such a file once for its
  crc32c (google-crc32c) and md5.
- One lock (`storage.lock`) guards the emulator's metadata (its object table and its `.meta`
  file); uploads hash and write outside it and take it only to commit.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading

GENERATIONS_DIR = ".generations"  # under the data dir, next to .cloudstorage
UPLOADS_DIR = ".uploads"  # under the data dir: upload bodies, resumable sessions, XML parts
FIRST_GENERATION = 10_000_000
LAST_GENERATION = 99_999_999
_HASH_CHUNK_BYTES = 8 << 20

# Hashing uploads is the endpoint's main CPU cost (md5 ~0.7 GB/s per core): at most one hash
# per CPU runs at a time, so that many uploads in flight do not thrash the cores they share
# with nginx and the clients.
HASHING_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)

# The query of the request the emulator's own handlers are serving (for their preconditions).
REQUEST = threading.local()


def _request_if_generation_match() -> str | None:
    wanted = getattr(REQUEST, "query", {}).get("ifGenerationMatch")
    return wanted[0] if wanted else None


def generation_mtime(generation: int) -> int:
    """The file mtime (s) whose hex digits spell `generation`'s decimal digits."""
    return int(str(generation), 16)


class PreconditionFailed(Exception):
    """An upload's ifGenerationMatch does not hold; answered as HTTP 412."""


class BucketNotFound(Exception):
    """The upload's bucket does not exist; answered as HTTP 404."""


@dataclasses.dataclass(frozen=True)
class Checksums:
    """What GCS reports for an object's bytes.

    Attributes:
      size: bytes.
      crc32c: base64 of the big-endian CRC32C (as GCS's `crc32c` field).
      md5: base64 of the MD5 digest (as GCS's `md5Hash` field).
      md5_hex: the MD5 digest in hex (the XML API's ETag, without quotes).
      crc32c_int: the CRC32C as an unsigned int.
    """

    size: int
    crc32c: str
    md5: str
    md5_hex: str
    crc32c_int: int


def file_checksums(path: str, offset: int = 0, length: int | None = None) -> Checksums:
    """CRC32C and MD5 of `length` bytes of `path` from `offset` (None: to the end), one read."""
    import google_crc32c  # a dependency of google-cloud-storage and of the emulator

    crc = google_crc32c.Checksum()
    md5 = hashlib.md5()
    size = 0
    with HASHING_SLOTS, open(path, "rb", buffering=0) as f:
        f.seek(offset)
        left = length
        while left is None or left > 0:
            # bytes, not a memoryview of a reused buffer or a map: google-crc32c takes only
            # buffers without a release hook.
            chunk = f.read(_HASH_CHUNK_BYTES if left is None else min(_HASH_CHUNK_BYTES, left))
            if not chunk:
                break
            crc.update(chunk)
            md5.update(chunk)
            size += len(chunk)
            if left is not None:
                left -= len(chunk)
    if length is not None and size != length:
        raise OSError(f"{path}: {size} bytes from offset {offset}, expected {length}")
    crc_bytes = crc.digest()
    digest = md5.digest()
    return Checksums(
        size=size,
        crc32c=base64.b64encode(crc_bytes).decode("ascii"),
        md5=base64.b64encode(digest).decode("ascii"),
        md5_hex=digest.hex(),
        crc32c_int=int.from_bytes(crc_bytes, "big"),
    )


def new_object_resource(
    make_object_resource, handler, bucket: str, name: str, content_type, metadata, sums: Checksums
) -> dict:
    """The object resource (a dict, GCS JSON API fields) of an upload that just made a new
    generation of gs://bucket/name, for both APIs' upload handlers: the emulator's
    `make_object_resource` (its self links name the request's Host), with the upload's
    checksums (`sums`: crc32c, md5Hash, and md5Hash as the etag) and metageneration 1.
    `metadata`: the custom metadata fields, or None."""
    obj = make_object_resource(
        f"http://{handler.headers.get('Host') or '127.0.0.1'}",
        bucket,
        name,
        content_type,
        str(sums.size),
        metadata or None,
    )
    # A new object's metageneration is 1 (the emulator counts its metadata as a patch).
    obj.update(crc32c=sums.crc32c, md5Hash=sums.md5, etag=sums.md5, metageneration="1")
    return obj


def copy_range(src: str, dst_fd: int, dst_offset: int, length: int, src_offset: int = 0) -> None:
    """Copies `length` bytes of `src` from `src_offset` to the open file `dst_fd` at
    `dst_offset`, in the kernel (copy_file_range; pread/pwrite where the file system refuses)."""
    with open(src, "rb", buffering=0) as f:
        done = 0
        while done < length:
            at, to = src_offset + done, dst_offset + done
            try:
                n = os.copy_file_range(f.fileno(), dst_fd, length - done, at, to)
            except OSError as err:
                if err.errno not in (18, 22, 38, 95):  # EXDEV EINVAL ENOSYS EOPNOTSUPP
                    raise
                chunk = os.pread(f.fileno(), min(length - done, _HASH_CHUNK_BYTES), at)
                n = os.pwrite(dst_fd, chunk, to) if chunk else 0
            if n == 0:
                raise OSError(f"{src}: ends before byte {at}, expected {length} from {src_offset}")
            done += n


def make_storage_class(base, resumable_dir: str):
    """A subclass of the emulator's Storage with generation links, preconditions, path commits."""

    class GenerationStorage(base):
        def __init__(self, *, data_dir: str, **kwargs) -> None:
            self.lock = threading.RLock()
            self._gen_root = os.path.join(data_dir, GENERATIONS_DIR)
            self._tmp_dir = os.path.join(self._gen_root, ".tmp")
            self.uploads_dir = os.path.join(data_dir, UPLOADS_DIR)
            shutil.rmtree(self.uploads_dir, ignore_errors=True)  # sessions do not survive
            os.makedirs(self._tmp_dir, exist_ok=True)
            os.makedirs(self.uploads_dir, exist_ok=True)
            super().__init__(data_dir=data_dir, **kwargs)
            self._links: dict[tuple[str, str], str] = {}
            self._next_generation = FIRST_GENERATION
            self._adopt_existing_objects()

        # generations -----------------------------------------------------------------------

        def _within_bucket(self, bucket: str, name: str) -> str:
            rel = self._store._norm(self._object_path(bucket, name))  # the emulator's own rule
            return rel[len(bucket) + 1 :]

        def _link_path(self, bucket: str, name: str, generation: int) -> str:
            return os.path.join(
                self._gen_root, bucket, str(generation), self._within_bucket(bucket, name)
            )

        def _take_generation(self) -> int:
            if self._next_generation > LAST_GENERATION:
                raise RuntimeError("LocalGCS ran out of 8-digit generations; use a new data dir")
            generation = self._next_generation
            self._next_generation += 1
            return generation

        def _adopt_existing_objects(self) -> None:
            """Links objects of a reused data dir; gives foreign generations new ones."""
            known = [
                int(obj["generation"])
                for objs in self.objects.values()
                for obj in objs.values()
                if FIRST_GENERATION <= int(obj.get("generation") or 0) <= LAST_GENERATION
            ]
            self._next_generation = max(known, default=FIRST_GENERATION - 1) + 1
            changed = False
            for bucket, objs in self.objects.items():
                for name, obj in objs.items():
                    path = self.object_file(bucket, name)
                    if not os.path.isfile(path):
                        continue
                    generation = int(obj.get("generation") or 0)
                    if not FIRST_GENERATION <= generation <= LAST_GENERATION:
                        generation = self._take_generation()
                        self._set_generation(obj, generation)
                        changed = True
                    mtime = generation_mtime(generation)
                    os.utime(path, (mtime, mtime))
                    self._link(bucket, name, path, generation)
            if changed:
                self._write_config_to_file()

        def _link(self, bucket: str, name: str, path: str, generation: int) -> None:
            link = self._link_path(bucket, name, generation)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if os.path.lexists(link):
                os.unlink(link)
            os.link(path, link)
            self._links[(bucket, name)] = link

        def _unlink(self, bucket: str, name: str) -> None:
            link = self._links.pop((bucket, name), None)
            if link is not None and os.path.lexists(link):
                os.unlink(link)

        @staticmethod
        def _set_generation(obj: dict, generation: int) -> None:
            old = str(obj.get("generation") or "")
            obj["generation"] = str(generation)
            for key in ("id", "mediaLink"):
                if old and isinstance(obj.get(key), str):
                    obj[key] = obj[key].replace(old, str(generation))

        def object_file(self, bucket: str, name: str) -> str:
            """Where the live version of gs://bucket/name lies on disk."""
            return str(self._store._disk_path(self._object_path(bucket, name)))

        # preconditions ---------------------------------------------------------------------

        def generation_of(self, bucket: str, name: str) -> int:
            """The live generation of gs://bucket/name; 0 when it does not exist."""
            current = self.objects.get(bucket, {}).get(name)
            return int(current["generation"]) if current else 0

        def check_precondition(self, bucket: str, name: str, wanted: str | int | None) -> None:
            """Raises PreconditionFailed unless gs://bucket/name is at generation `wanted`
            (0: absent); None or "" checks nothing."""
            if wanted is None or wanted == "":
                return
            have = self.generation_of(bucket, name)
            if int(wanted) != have:
                raise PreconditionFailed(
                    f"ifGenerationMatch={wanted} but gs://{bucket}/{name} has generation "
                    f"{have}" + (" (it exists)" if have else " (it does not exist)")
                )

        def require_bucket(self, bucket: str) -> None:
            if bucket not in self.buckets:
                raise BucketNotFound(f"bucket {bucket!r} does not exist")

        # commits ---------------------------------------------------------------------------

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
            happens). The precondition is checked and the generation taken under the lock, so
            of two racing create-if-absent commits exactly one wins.

            Returns:
              `file_obj` with its generation set.
            Raises:
              BucketNotFound, PreconditionFailed.
            """
            try:
                with self.lock:
                    self.require_bucket(bucket)
                    self.check_precondition(bucket, name, if_generation_match)
                    generation = self._take_generation()
                    self._set_generation(file_obj, generation)
                    mtime = generation_mtime(generation)
                    os.utime(src, (mtime, mtime))
                    path = self.object_file(bucket, name)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    self._unlink(bucket, name)
                    self._link(bucket, name, src, generation)
                    os.replace(src, path)  # readers see the old file or the new one, never a mix
                    self.objects.setdefault(bucket, {})[name] = file_obj
                    self._write_config_to_file()
                    return file_obj
            finally:
                if os.path.exists(src):
                    os.unlink(src)

        # the emulator's storage hooks (its own handlers: compose, copy, rewrite) -----------

        def create_resumable_upload(self, bucket_name, file_name, file_obj):
            self.check_precondition(bucket_name, file_name, _request_if_generation_match())
            return super().create_resumable_upload(bucket_name, file_name, file_obj)

        def create_file(self, bucket_name, file_name, content, file_obj, file_id=None):
            if bucket_name not in self.buckets:
                return super().create_file(bucket_name, file_name, content, file_obj, file_id)
            self.check_precondition(bucket_name, file_name, _request_if_generation_match())
            tmp = self.new_temp_path()
            with open(tmp, "wb") as out:
                out.write(content or b"")
            self.commit_file(bucket_name, file_name, tmp, file_obj, _request_if_generation_match())
            if file_id:
                self.delete_resumable_file_obj(file_id)
                self._delete_file(resumable_dir, self.safe_id(file_id))
                self._write_config_to_file()

        def _delete_file(self, bucket_name, file_name):
            self._unlink(bucket_name, file_name)
            super()._delete_file(bucket_name, file_name)

        def wipe(self, keep_buckets=False):
            for key in list(self._links):
                self._unlink(*key)
            super().wipe(keep_buckets)

    return GenerationStorage
