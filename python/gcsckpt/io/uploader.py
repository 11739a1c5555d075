"""Uploader: resumable uploads of caller memory with many requests in flight (C++, libcurl).

The C++ uploader (``cc/gcsio/uploader.h``) runs every upload as a GCS JSON API resumable upload
on one curl multi handle in its own thread: a session start, then PUTs of at most ``chunk_bytes``
read straight from the caller's buffer or list of buffers (buffer protocol, no copy, GIL released).
Every answer is checked (a 308's ``Range``; the final size, generation and crc32c against the
CRC-32C computed in C++). Retries follow the one ``RetryPolicy``: a retry first asks the session
what it kept and sends only the rest; an expired session (404/410) starts over; 412 raises
``UploadPreconditionError``, a checksum mismatch ``UploadChecksumError``. Errors name
``gs://bucket/object``, the bytes committed and the attempts, never a token (docs/design.md,
"Where a request is retried").

Why our own C++ uploader rather than google-cloud-storage for ``.distcp`` data: many uploads in
flight with no Python thread per upload and no copy of the payload; ``dcp.save`` through it took
less than half the time of the previous path (docs/measurements.md, "Save").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from gcsckpt.io import defaults
from gcsckpt.io.auth import READ_WRITE_SCOPE
from gcsckpt.io.buffers import as_writable_buffer
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.errors import make_upload_error
from gcsckpt.io.extension import _gcsio
from gcsckpt.io.native_client import NativeClientFront, check_client_options, start_native_client
from gcsckpt.io.retry import RetryPolicy


class UploadResult(NamedTuple):
    """A finished upload: ``bucket``, ``object``, ``size`` (bytes), ``generation`` (int),
    ``crc32c`` (int, CRC-32C of the bytes, equal to the server's), ``requests`` (HTTP requests
    made), ``retries``, ``status_queries`` (committed-offset queries), ``restarts`` (new
    sessions after an expired one), ``resent_bytes`` (bytes sent a second time), ``block_crcs``
    (the CRC-32C of each block of ``submit(block_starts=...)``, little-endian uint32s; b""
    without blocks)."""

    bucket: str
    object: str
    size: int
    generation: int
    crc32c: int
    requests: int
    retries: int
    status_queries: int
    restarts: int
    resent_bytes: int
    block_crcs: bytes = b""


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of a C-contiguous buffer (bytes, bytearray, memoryview, numpy
    array, or a contiguous CPU torch tensor; or of the concatenation of a list/tuple of
    those), continuing from ``value`` (the CRC of the bytes
    before). Computed in C++ with the SSE4.2 crc32 instruction where the CPU has it (else a
    table), GIL released; see ``cc/gcsio/crc32c.h`` for its speed."""
    return _gcsio.crc32c(_as_buffer(data), value)


class UploadHandle:
    """One ``Uploader.submit``: the caller's buffers are held (and must not change) until the
    upload finished; ``cancel`` (or dropping the handle) stops it."""

    def __init__(self, upload, bucket: str, object_name: str):
        self._upload = upload
        self.bucket = bucket
        self.object = object_name

    def wait(self, timeout_s: float | None = None) -> UploadResult:
        """Blocks (GIL released) until the upload finished.

        Raises:
            UploadError: it failed for good (``UploadPreconditionError`` for HTTP 412,
                ``UploadChecksumError`` for a crc32c mismatch), or was cancelled.
            TimeoutError: not finished within ``timeout_s`` seconds (it keeps running).
        """
        if not self._upload.wait(timeout_s):
            raise TimeoutError(
                f"upload of gs://{self.bucket}/{self.object} not finished after {timeout_s} s"
            )
        r = self._upload.result()
        if not r["ok"]:
            raise make_upload_error(self.bucket, self.object, {**r, "status": r["status"] or None})
        return UploadResult(
            self.bucket,
            self.object,
            r["size"],
            r["generation"],
            r["crc32c"],
            r["requests"],
            r["retries"],
            r["status_queries"],
            r["restarts"],
            r["resent_bytes"],
            r["block_crcs"],
        )

    def done(self) -> bool:
        """True once the upload finished (succeeded, failed or cancelled)."""
        return self._upload.done()

    def cancel(self) -> None:
        """Stops the upload; on return its buffers are no longer read."""
        self._upload.cancel()


def check_chunk_bytes(chunk_bytes: int) -> None:
    """Checks an upload chunk size (bytes) by the C++ uploader's rule: a positive multiple of
    256 KiB (GCS's rule for every chunk of a resumable upload but the last).

    Raises:
        ValueError: it is not (the message names ``chunk_bytes`` and its value).
    """
    try:
        if int(chunk_bytes) != chunk_bytes:
            raise ValueError("chunk_bytes must be an int")
        _gcsio.validate_upload_chunk_bytes(int(chunk_bytes))
    except ValueError as refused:
        raise ValueError(f"{refused}, got {chunk_bytes!r}") from None


class Uploader(NativeClientFront):
    """Uploads caller buffers to GCS objects, many resumable uploads in flight (see the module
    docstring for the protocol, checks and retries).

    Args:
        endpoint: GCS endpoint; None -> ``$STORAGE_EMULATOR_HOST`` -> storage.googleapis.com.
        max_inflight_requests: upload requests running at once.
        max_inflight_bytes: chunk bytes of the running PUTs, summed (bytes); the payload is read
            from caller memory, so this bounds outstanding work, not buffering.
        chunk_bytes: longest PUT (bytes, a multiple of 256 KiB); smaller objects go up in one.
        retry: RetryPolicy (attempts and deadline count per request: a committed chunk starts
            them afresh; a status query counts as an attempt).
        token_provider: callable returning an OAuth2 access token with write scope; None ->
            ADC (``devstorage.read_write``).
        connect_timeout_s, stall_timeout_s: per request (seconds); a request with no byte sent
            or received for ``stall_timeout_s`` is retried.
        send_token: None -> send a token when ``token_provider`` is given (to any endpoint),
            else unless the endpoint is an emulator; True/False forces it.

    Raises:
        ValueError: an option is out of range (names it).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        max_inflight_requests: int = defaults.MAX_INFLIGHT_UPLOADS,
        max_inflight_bytes: int = defaults.UPLOAD_INFLIGHT_BYTES,
        chunk_bytes: int = defaults.UPLOAD_CHUNK_BYTES,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
        token_provider: Callable[[], str] | None = None,
        connect_timeout_s: float = defaults.CONNECT_TIMEOUT_S,
        stall_timeout_s: float = defaults.STALL_TIMEOUT_S,
        send_token: bool | None = None,
    ):
        self.endpoint = resolve_endpoint(endpoint)
        check_client_options(
            retry,
            {
                "max_inflight_requests": max_inflight_requests,
                "max_inflight_bytes": max_inflight_bytes,
            },
        )
        check_chunk_bytes(chunk_bytes)
        self.retry = retry
        self._options = {
            "max_inflight_requests": int(max_inflight_requests),
            "max_inflight_bytes": int(max_inflight_bytes),
            "chunk_bytes": int(chunk_bytes),
            "connect_timeout_s": float(connect_timeout_s),
            "stall_timeout_s": float(stall_timeout_s),
        }
        self._uploader, self.credential_description = start_native_client(
            _gcsio.Uploader,
            self.endpoint,
            retry,
            token_provider,
            send_token,
            self._options,
            scope=READ_WRITE_SCOPE,
        )

    def submit(
        self,
        bucket: str,
        object_name: str,
        data: Any,
        *,
        if_generation_match: int | None = None,
        block_starts: Any = None,
    ) -> UploadHandle:
        """Starts uploading ``data`` as ``gs://bucket/object_name``; returns at once (after
        computing its CRC-32C).

        ``data``: a C-contiguous buffer (bytes, bytearray, memoryview, numpy array), a
        contiguous CPU torch tensor, or a list/tuple of those, whose concatenation is the
        object (each part is read in place: no copy is made). Every part's memory must stay
        alive and unchanged until the handle is done (the handle holds a reference to each
        buffer, not to memory a buffer merely points into).
        ``if_generation_match``: None, 0 (only if absent) or the generation to replace.
        ``block_starts``: None, or the object's block starts (bytes; little-endian uint64s,
        ascending from 0, each below the size, e.g. a numpy uint64 array): the result's
        ``block_crcs`` then holds each block's CRC-32C, computed in the same pass as the
        object's (``BlockSums``).

        Raises:
            ValueError / TypeError: an empty name, or ``data`` (or a part of it, named by its
                index) is no contiguous buffer.
            RuntimeError: the token provider failed, or the uploader is closed.
        """
        match = -1 if if_generation_match is None else int(if_generation_match)
        if match < -1:
            raise ValueError(f"if_generation_match must be >= 0, got {if_generation_match}")
        handle = self._uploader.submit(bucket, object_name, _as_buffer(data), match, block_starts)
        return UploadHandle(handle, bucket, object_name)

    def upload(
        self, bucket: str, object_name: str, data: Any, *, if_generation_match: int | None = None
    ) -> UploadResult:
        """``submit(...).wait()``: uploads and blocks (GIL released). Raises what ``wait``
        raises."""
        return self.submit(
            bucket, object_name, data, if_generation_match=if_generation_match
        ).wait()

    def stats(self) -> dict:
        """Counters since creation: requests, bytes_sent, uploads_done, failures, retries,
        retries_by_cause (cause -> count), status_queries, restarts, connections_opened."""
        return self._uploader.stats()

    def close(self) -> None:
        """Cancels what is queued or running and stops the thread; later calls raise."""
        self._uploader.close()


def _as_buffer(data: Any) -> Any:
    """``data`` as what ``_gcsio`` takes: a buffer, or a list of buffers for a list/tuple."""
    if isinstance(data, (list, tuple)):
        return [_one_buffer(part, i) for i, part in enumerate(data)]
    return _one_buffer(data, 0)


def _one_buffer(data: Any, index: int) -> Any:
    # Torch tensors export no buffer; a uint8 numpy view of their memory does (no copy).
    return as_writable_buffer(data, index) if type(data).__module__.startswith("torch") else data
