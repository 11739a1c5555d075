"""The control-plane client: every GCS request of the package but ranged reads and data uploads.

``ObjectStore`` reads whole small objects (``.metadata``, with their generation), stats, lists
and deletes them, and uploads small ones under a precondition (create-if-absent,
``ifGenerationMatch=0``, or replace-at-generation), telling a retry whose earlier attempt
landed from another writer's object. Ranged reads go through the C++ RangeReader
(``gcsckpt.io.RangeReader``), data objects through ``gcsckpt.io.Uploader``; the rest through
google-cloud-storage (anonymous against an emulator, ``gcsckpt.io.auth`` tokens against GCS),
on a keep-alive connection pool shared by threads (built by ``gcsckpt.io.storage_client``).
Every request runs under the one ``RetryPolicy`` (``gcsckpt.io.retry.api_core_retry``) with
``(connect_timeout_s, stall_timeout_s)`` per attempt. Its upload speed against the client it
replaced: docs/measurements.md, "The control-plane client". One job past 400 lines: one class,
GCS's object and bucket calls.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import NamedTuple

from gcsckpt.io import defaults
from gcsckpt.io.auth import credential_source
from gcsckpt.io.endpoint import resolve_endpoint
from gcsckpt.io.retry import RetryPolicy, api_core_retry
from gcsckpt.io.storage_client import BUCKET_METADATA_LOOKUP_ENV, make_storage_client
from gcsckpt.io.store_errors import ObjectStoreError, store_error

__all__ = [
    "BUCKET_METADATA_LOOKUP_ENV",
    "ObjectInfo",
    "ObjectStore",
    "ObjectStoreError",
    "StoredObject",
    "store_options",
]


class ObjectInfo(NamedTuple):
    """One stored object: ``name``, ``size`` (bytes), ``generation`` (int; None when the endpoint
    reports none), ``updated`` (last write, seconds since the epoch; None when not reported)."""

    name: str
    size: int
    generation: int | None
    updated: float | None = None


class StoredObject(NamedTuple):
    """A whole object: ``data`` (bytes) and the ``generation`` it was read at (None when the
    endpoint sends no ``x-goog-generation``)."""

    data: bytes
    generation: int | None


def store_options(retry: RetryPolicy | None = None, stall_timeout_s: float | None = None) -> dict:
    """ObjectStore keyword arguments from a `gcsckpt.io.RetryPolicy` and a stall timeout
    (seconds), so `.metadata` and upload requests follow the range reader's limits."""
    options: dict = {}
    if retry is not None:
        options["retry"] = retry
    if stall_timeout_s is not None:
        options["stall_timeout_s"] = stall_timeout_s
    return options


def _generation(value) -> int | None:
    return int(value) if value not in (None, "") else None


def _info(blob) -> ObjectInfo:
    updated = blob.updated  # a datetime, or None
    return ObjectInfo(
        blob.name,
        int(blob.size or 0),
        _generation(blob.generation),
        updated.timestamp() if updated is not None else None,
    )


class ObjectStore:
    """google-cloud-storage client for one GCS endpoint, safe to share between threads.

    Args:
        endpoint: base URL; None -> $STORAGE_EMULATOR_HOST, else https://storage.googleapis.com
            (resolved by `gcsckpt.io.resolve_endpoint`).
        token_provider: callable returning an OAuth2 access token, sent to any endpoint; None ->
            google-auth ADC (read-write scope, `gcsckpt.io.auth`), or anonymous for an emulator
            endpoint.
        pool_size: connections kept alive (one per concurrent request).
        retry: the `gcsckpt.io.RetryPolicy` of every request (None -> its defaults).
        connect_timeout_s / stall_timeout_s: per attempt, the TCP connect limit and the longest
            wait for a byte (seconds); None -> the range reader's defaults
            (`gcsckpt.io.defaults.CONNECT_TIMEOUT_S` / `STALL_TIMEOUT_S`).

    Its first request sets $DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA=true in this process
    unless the variable is set already: google-cloud-storage's switch, process-wide, that stops
    every client's bucket lookup for span labels (one background GET per bucket and client,
    racing the store's requests and needing storage.buckets.get). Set it to false beforehand to
    keep the labels.

    Errors (every method): FileNotFoundError for 404 where named, FileExistsError for a refused
    precondition (412), ObjectStoreError for anything else after the retries (for 401/403 it
    names the status, the endpoint and `credential_description`, never the token).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        token_provider: Callable[[], str] | None = None,
        pool_size: int = 16,
        retry: RetryPolicy | None = None,
        connect_timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
    ) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.retry_policy = retry if retry is not None else RetryPolicy()
        self._retry = api_core_retry(self.retry_policy)
        # The range reader's timeouts (gcsckpt.io.defaults), so both halves of the transport give
        # up on a dead endpoint alike.
        if connect_timeout_s is None:
            connect_timeout_s = defaults.CONNECT_TIMEOUT_S
        if stall_timeout_s is None:
            stall_timeout_s = defaults.STALL_TIMEOUT_S
        self.timeout_s = (float(connect_timeout_s), float(stall_timeout_s))  # (connect, read)
        self._token_provider = token_provider
        # Which credential source requests use, for 401/403 errors (`gcsckpt.io.auth`).
        self.credential_description = credential_source(self.endpoint, token_provider)
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._client = None
        self._session = None  # the client's keep-alive pool, ours to close

    def close(self) -> None:
        """Closes pooled connections (the store may be used again; it reconnects)."""
        with self._lock:
            session, self._client, self._session = self._session, None, None
        if session is not None:
            session.close()

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _storage_client(self):
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self):
        client, self._session, description = make_storage_client(
            self.endpoint, self._token_provider, self._pool_size
        )
        if description is not None:
            self.credential_description = description
        return client

    def _blob(self, bucket: str, name: str, generation: int | None = None):
        return self._storage_client().bucket(bucket).blob(name, generation=generation)

    def _call(self, method: str, what: str, fn: Callable):
        """Runs one library call and maps its failure (the message never carries a token)."""
        try:
            return fn()
        except (FileNotFoundError, FileExistsError, ObjectStoreError):
            raise
        except Exception as exc:  # api_core, media, requests and google-auth errors alike
            raise store_error(
                method, what, exc, credential=f"{self.credential_description} at {self.endpoint}"
            ) from None

    def _options(self) -> dict:
        return {"retry": self._retry, "timeout": self.timeout_s}

    # -- reads and metadata -----------------------------------------------------------------
    def read(self, bucket: str, name: str, *, generation: int | None = None) -> StoredObject:
        """The whole object in one media GET, with the generation the endpoint served.

        Args:
            generation: read this generation (sent as `generation=`), not the live one.

        Raises:
            FileNotFoundError: no such object (or generation). ObjectStoreError: any other
            failure.
        """
        return self._get(bucket, name, generation)  # no Range header: the library checks CRC/MD5

    def read_range(
        self,
        bucket: str,
        name: str,
        start: int,
        end: int | None = None,
        *,
        generation: int | None = None,
    ) -> StoredObject:
        """Bytes [start, end) of an object in one ranged media GET, with its generation.

        Args:
            start: first byte; negative: the last -start bytes (the whole object when it is
                shorter). end: one past the last byte (None: to the end).
            generation: read this generation, not the live one.

        Raises:
            FileNotFoundError: no such object (or generation). ObjectStoreError: any other
            failure (a range past the end of the object is one).
        """
        return self._get(
            bucket, name, generation, start=start, end=None if end is None else end - 1
        )

    def _get(self, bucket: str, name: str, generation: int | None, **span) -> StoredObject:
        blob = self._blob(bucket, name, generation)
        data = self._call(
            "GET",
            f"gs://{bucket}/{name}",
            lambda: blob.download_as_bytes(**span, **self._options()),
        )
        return StoredObject(data, _generation(blob.generation))

    def download(self, bucket: str, name: str) -> bytes:
        """The whole object's bytes (`read(...).data`)."""
        return self.read(bucket, name).data

    def stat(self, bucket: str, name: str) -> ObjectInfo | None:
        """Size and generation of one object (one metadata GET), or None if it does not exist."""
        blob = self._call(
            "GET",
            f"gs://{bucket}/{name}",
            lambda: self._storage_client().bucket(bucket).get_blob(name, **self._options()),
        )
        if blob is None:
            return None
        return _info(blob)

    def bucket_metadata(self, bucket: str):
        """The bucket's metadata (one ``buckets.get``), as a ``google.cloud.storage.Bucket``
        with location type, storage class and hierarchical namespace loaded.

        Raises:
            FileNotFoundError: no such bucket. ObjectStoreError: any other failure (e.g. 403).
        """
        return self._call(
            "GET",
            f"gs://{bucket}",
            lambda: self._storage_client().get_bucket(bucket, **self._options()),
        )

    def exists(self, bucket: str, name: str) -> bool:
        """True if the object exists (one metadata GET)."""
        return self.stat(bucket, name) is not None

    def size(self, bucket: str, name: str) -> int | None:
        """The object's size in bytes, or None if it does not exist (one metadata GET)."""
        info = self.stat(bucket, name)
        return None if info is None else info.size

    def list_objects(
        self, bucket: str, prefix: str = "", *, delimiter: str | None = None
    ) -> list[ObjectInfo]:
        """Every object whose name starts with `prefix`, in server (name) order, all pages.

        Args:
            delimiter: e.g. "/": only objects with no delimiter after `prefix` (the "files" of
                that "folder", not those of deeper ones).
        """

        def listing():
            blobs = self._storage_client().list_blobs(
                bucket,
                prefix=prefix,
                delimiter=delimiter,
                fields="items(name,size,generation,updated),prefixes,nextPageToken",
                **self._options(),
            )
            return [_info(b) for b in blobs]

        return self._call("LIST", f"gs://{bucket}/{prefix}*", listing)

    def list(self, bucket: str, prefix: str = "") -> list[str]:
        """Names of all objects whose name starts with `prefix`, in server (name) order."""
        return [info.name for info in self.list_objects(bucket, prefix)]

    def delete(
        self,
        bucket: str,
        name: str,
        *,
        missing_ok: bool = True,
        if_generation_match: int | None = None,
    ) -> None:
        """Deletes one object (only at `if_generation_match`, when given).

        Raises:
            FileNotFoundError: the object is missing and `missing_ok` is False.
            FileExistsError: the object has another generation than `if_generation_match`.
        """
        blob = self._blob(bucket, name)
        try:
            self._call(
                "DELETE",
                f"gs://{bucket}/{name}",
                lambda: blob.delete(if_generation_match=if_generation_match, **self._options()),
            )
        except FileNotFoundError:
            if not missing_ok:
                raise

    # -- uploads ----------------------------------------------------------------------------
    def upload(
        self, bucket: str, name: str, data, *, if_generation_match: int | None = None
    ) -> int | None:
        """Uploads `data` (bytes-like) as one object: one multipart request up to 8 MiB
        (google-cloud-storage's limit), a resumable upload in one PUT above.

        With a precondition this is the package's one upload-if-absent: a retry whose earlier
        attempt landed (its answer lost) meets the precondition's refusal, or the upload fails
        for good after landing; in both cases the object is read back (`landed`) and, when it
        holds `data` at a new generation, the upload has succeeded.

        Args:
            if_generation_match: 0: only if the object is absent (GCS's create-if-absent);
                G > 0: only over generation G; None: unconditionally.

        Returns:
            the new object's generation (None if the endpoint reports none).

        Raises:
            FileExistsError: the precondition refused the upload and the object is another
                writer's. ObjectStoreError: any other failure (with a precondition, its
                ``landed`` says whether the object holds `data`: False, or None if unknown).
        """
        body = data if isinstance(data, bytes) else bytes(data)
        what = f"gs://{bucket}/{name}"
        try:
            return self._put(bucket, name, body, if_generation_match)
        except FileExistsError as refused:
            if if_generation_match is None or getattr(refused, "attempts", 1) == 1:
                raise  # the first attempt was refused: nothing of this call landed
            landed, generation = self._read_back(bucket, name, body, if_generation_match)
            if landed:
                return generation
            if landed is False:
                raise
            unknown = ObjectStoreError(
                f"POST {what}: a retry was refused (HTTP 412) and reading the object back "
                "failed, so whether an earlier attempt landed is unknown"
            )
            unknown.landed = None
            raise unknown from None
        except ObjectStoreError as failed:
            if if_generation_match is None:
                raise
            landed, generation = self._read_back(bucket, name, body, if_generation_match)
            if landed:
                return generation  # every answer was lost, but the upload landed
            failed.landed = landed
            raise

    def landed(
        self, bucket: str, name: str, data, *, if_generation_match: int | None = None
    ) -> bool | None:
        """Whether an upload of `data` that failed (or whose answer was lost) landed after all.

        Args:
            if_generation_match: the upload's precondition; an object still at that generation
                is the one it meant to replace, not its own.

        Returns:
            True if the object holds `data` (at a generation other than `if_generation_match`);
            False if it is absent or holds other bytes; None if that cannot be told (the
            read failed too).
        """
        body = data if isinstance(data, bytes) else bytes(data)
        return self._read_back(bucket, name, body, if_generation_match)[0]

    def _put(self, bucket: str, name: str, body: bytes, if_generation_match: int | None):
        blob = self._blob(bucket, name)
        self._call(
            "POST",
            f"gs://{bucket}/{name}",
            lambda: blob.upload_from_file(
                io.BytesIO(body),
                size=len(body),
                rewind=True,
                content_type="application/octet-stream",
                if_generation_match=if_generation_match,
                **self._options(),
            ),
        )
        return _generation(blob.generation)

    def _read_back(
        self, bucket: str, name: str, body: bytes, replaced: int | None
    ) -> tuple[bool | None, int | None]:
        """(`landed`'s answer, the object's generation when it is ours)."""
        try:
            stored = self.read(bucket, name)
            generation = stored.generation
            if stored.data == body and generation is None:  # media reads carry none here
                info = self.stat(bucket, name)
                generation = None if info is None else info.generation
        except FileNotFoundError:
            return False, None
        except (OSError, ValueError):  # ObjectStoreError is an OSError
            return None, None
        if stored.data != body or (replaced and generation == replaced):
            return False, None
        return True, generation
