"""Checksums of the local endpoint's objects: CRC32C and MD5 read from files, and the lazy MD5.

An upload's crc32c is computed while it is answered (every writer checks it); its MD5 only when
the request sends one to check. Otherwise the generation's md5Hash is pending (`LazyMD5`): the
store's worker thread, at idle scheduling priority, hashes it from the generation's link file,
and an answer that carries md5Hash finishes it first (taking over the worker's progress). Why:
MD5 is many times slower than crc32c per core (docs/measurements.md, "Endpoint ceilings",
Uploads), and this endpoint shares its CPUs with the clients it measures, while GCS computes
both on its own servers.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import os
import threading

_HASH_CHUNK_BYTES = 8 << 20
_MD5_STEP_BYTES = 1 << 20  # the idle worker's unit of work (~1.5 ms of one core)

# At most one hash per CPU runs at a time in answers, so that many uploads in flight do not
# thrash the cores they share with nginx and the clients (the idle MD5 worker takes no slot:
# starved of CPU while holding one, it would hold the answers up).
HASHING_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Checksums:
    """What GCS reports for an object's bytes.

    Attributes:
      size: bytes.
      crc32c: base64 of the big-endian CRC32C (as GCS's `crc32c` field).
      crc32c_int: the CRC32C as an unsigned int.
      md5: base64 of the MD5 digest (as GCS's `md5Hash` field); None when not computed.
      md5_hex: the MD5 digest in hex (the XML API's ETag, without quotes); None likewise.
    """

    size: int
    crc32c: str
    crc32c_int: int
    md5: str | None = None
    md5_hex: str | None = None

    @classmethod
    def of(cls, size: int, crc_digest: bytes, md5_digest: bytes | None = None) -> Checksums:
        """From the 4-byte big-endian CRC32C digest and the 16-byte MD5 digest (or None)."""
        return cls(
            size=size,
            crc32c=base64.b64encode(crc_digest).decode("ascii"),
            crc32c_int=int.from_bytes(crc_digest, "big"),
            md5=base64.b64encode(md5_digest).decode("ascii") if md5_digest else None,
            md5_hex=md5_digest.hex() if md5_digest else None,
        )


def file_checksums(
    path: str, offset: int = 0, length: int | None = None, *, md5: bool = False
) -> Checksums:
    """CRC32C (and MD5 when `md5`) of `length` bytes of `path` from `offset` (None: to the
    end), one read, in one of HASHING_SLOTS."""
    import google_crc32c  # a dependency of google-cloud-storage

    crc = google_crc32c.Checksum()
    md5_hash = hashlib.md5() if md5 else None
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
            if md5_hash is not None:
                md5_hash.update(chunk)
            size += len(chunk)
            if left is not None:
                left -= len(chunk)
    if length is not None and size != length:
        raise OSError(f"{path}: {size} bytes from offset {offset}, expected {length}")
    return Checksums.of(size, crc.digest(), md5_hash.digest() if md5_hash else None)


class LazyMD5:
    """The MD5 of one generation's bytes (its link file `path`, never written again), computed
    once: step by step by the idle worker, or at once by an answer that needs it (`finish`,
    which takes over the worker's progress). The lock is held only to swap state, never while
    hashing, so a starved idle worker never holds an answer up.
    """

    def __init__(self, bucket: str, name: str, generation: int, path: str) -> None:
        self.bucket, self.name, self.generation, self.path = bucket, name, generation, path
        self._lock = threading.Lock()
        self._hasher = hashlib.md5()
        self._done = 0  # bytes hashed into _hasher
        self._digest: bytes | None = None
        self._stopped = False  # taken over by finish(), or the generation is gone

    def stop(self) -> None:
        """The worker stops at its next step (finish() took over, or the generation is gone)."""
        with self._lock:
            self._stopped = True

    def step(self, fd: int) -> bool:
        """Hashes the next _MD5_STEP_BYTES of the open file `fd`; False once nothing is left
        to do here (finished, stopped). For the worker."""
        with self._lock:
            if self._stopped or self._digest is not None:
                return False
            hasher, at = self._hasher.copy(), self._done
        chunk = os.pread(fd, _MD5_STEP_BYTES, at)
        hasher.update(chunk)
        with self._lock:
            if self._stopped or self._done != at:
                return False
            self._hasher, self._done = hasher, at + len(chunk)
            if not chunk:
                self._digest = hasher.digest()
                return False
        return True

    def digest(self) -> bytes | None:
        """The MD5 digest once finished, else None."""
        with self._lock:
            return self._digest

    def finish(self) -> bytes:
        """The MD5 digest, hashing what the worker has not yet (in one of HASHING_SLOTS).
        Callers hold the storage lock, so two finish() never run at once.

        Raises:
          OSError: the link file is gone (callers finish live generations only).
        """
        with self._lock:
            if self._digest is not None:
                return self._digest
            self._stopped = True
            hasher, at = self._hasher.copy(), self._done
        with HASHING_SLOTS, open(self.path, "rb", buffering=0) as f:
            f.seek(at)
            while chunk := f.read(_HASH_CHUNK_BYTES):
                hasher.update(chunk)
        with self._lock:
            self._digest = hasher.digest()
            return self._digest


def lower_this_threads_priority() -> None:
    """SCHED_IDLE for the calling thread (Linux), else nice 19; the process is untouched."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        except OSError as err:
            logging.warning("MD5 worker runs at normal priority: %s", err)


def copy_range(src: str, dst: str, dst_offset: int, length: int, src_offset: int = 0) -> None:
    """Copies `length` bytes of file `src` from `src_offset` into the existing file `dst` at
    `dst_offset`, in the kernel (copy_file_range; pread/pwrite where the file system refuses).

    Raises:
      OSError: `src` ends early, or the copy fails.
    """
    with open(src, "rb", buffering=0) as f, open(dst, "r+b", buffering=0) as out:
        done = 0
        while done < length:
            at, to = src_offset + done, dst_offset + done
            try:
                n = os.copy_file_range(f.fileno(), out.fileno(), length - done, at, to)
            except OSError as err:
                if err.errno not in (18, 22, 38, 95):  # EXDEV EINVAL ENOSYS EOPNOTSUPP
                    raise
                chunk = os.pread(f.fileno(), min(length - done, _HASH_CHUNK_BYTES), at)
                n = os.pwrite(out.fileno(), chunk, to) if chunk else 0
            if n == 0:
                raise OSError(f"{src}: ends before byte {at}, expected {length} from {src_offset}")
            done += n


def concatenate(paths: list[str], dst: str) -> None:
    """Writes the files `paths`, one after another, into the existing file `dst` (in the
    kernel; compose, copy and the XML API's completed uploads). Raises OSError."""
    at = 0
    for path in paths:
        size = os.path.getsize(path)
        copy_range(path, dst, at, size)
        at += size
