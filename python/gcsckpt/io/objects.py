"""The control-plane and upload client: every GCS request of the package but ranged reads.

``ObjectStore`` reads whole small objects (``.metadata``, with their generation), creates objects
only if absent (``ifGenerationMatch=0``), stats, lists and deletes them, and uploads: one request
for an object up to ``chunk_bytes``, a streamed resumable upload (bounded memory) above. Ranged
reads of big objects go through the C++ engine (``gcsckpt.io.RangeReader``); everything else goes
through here, on google-cloud-storage (api_endpoint = the resolved endpoint; anonymous against an
emulator, ``gcsckpt.io.auth`` tokens against GCS) with a keep-alive connection pool shared by
threads. Every request runs under the one ``RetryPolicy`` (``gcsckpt.io.retry.api_core_retry``):
408, 429, 5xx (500, 502, 503, 504) and connection errors are retried with full-jitter backoff,
``max_attempts`` per request and ``deadline_s``; ``(connect_timeout_s, stall_timeout_s)`` bound
each attempt.

Upload speed through LocalGCS (gcp-storage-emulator, single-threaded, behind nginx) on the shared
2-core machine, this client against the hand-written `requests` JSON-API client it replaced, in
interleaved rounds (3 each, fresh bucket per measurement, medians; 8 x 16 MiB objects streamed
in 1 MiB writes, and 64 x 64 KiB objects; 1 / 4 threads):

- load average ~14: 16 MiB objects 42 / 54 MB/s (requests: 38 / 50); 64 KiB objects 25 / 31 ms
  each (requests: 28 / 24);
- load average 30-50: 16 / 26 MB/s (requests: 23 / 27); 75 / 61 ms each (requests: 67 / 51).

Big objects: within the machine's noise. Small objects: 0.9-1.3x the old client's time (a
multipart upload, where the old client sent a bare media upload). The emulator's single thread
bounds both; against GCS both are bound by the network.
"""

from __future__ import annotations

import inspect
import io
import json
import threading
from collections.abc import Callable
from typing import NamedTuple

from gcsckpt.io.auth import READ_WRITE_SCOPE, GoogleAuthTokenProvider, token_provider_credentials
from gcsckpt.io.endpoint import is_emulator_endpoint, resolve_endpoint
from gcsckpt.io.errors import after_attempts
from gcsckpt.io.reader import RangeReader
from gcsckpt.io.redact import redact
from gcsckpt.io.retry import ATTEMPTS_ATTR, RetryPolicy, api_core_retry

_CHUNK_QUANTUM = 256 * 1024  # resumable chunks are multiples of 256 KiB (GCS's rule)
_SNIPPET_CHARS = 200  # of a server's error text kept in messages
# No project is needed for object calls; google-cloud-storage's anonymous client uses the same.
_NO_PROJECT = "<none>"


def _reader_default(name: str) -> float:
    # The connect and stall timeouts are the range reader's, so both halves of the transport
    # give up on a dead endpoint alike.
    return float(inspect.signature(RangeReader.__init__).parameters[name].default)


class ObjectStoreError(IOError):
    """A GCS request failed for good; the message names method, gs:// URL, status (or the
    connection error), the attempts made and a short, token-free server message."""


class ObjectInfo(NamedTuple):
    """One stored object: ``name``, ``size`` (bytes), ``generation`` (int; None when the endpoint
    reports none)."""

    name: str
    size: int
    generation: int | None


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


def _server_message(exc: BaseException) -> str:
    """The server's own error text: the JSON API's `error.message`, else the body, else the
    library's message."""
    text = getattr(getattr(exc, "response", None), "text", None)
    if not text:
        return str(getattr(exc, "message", None) or exc)
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an api_core error or a media `InvalidResponse`, else None."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _cause(exc: BaseException) -> str:
    """Status and a short server message (api_core errors, media InvalidResponse), else the
    connection error's type and text; never a bearer token."""
    status = _status(exc)
    if status is not None:
        cause = f"HTTP {status} {redact(_server_message(exc))[:_SNIPPET_CHARS]!r}"
    else:
        cause = f"{type(exc).__name__}: {redact(str(exc))[:_SNIPPET_CHARS]}"
    notes = getattr(exc, "__notes__", None)
    return cause + "".join(f" ({note})" for note in notes or ())


def _attempts(exc: BaseException) -> int:
    """Attempts the retry made, from `exc` or the error it was raised from (google-cloud-storage
    re-raises media errors as api_core errors after the retry gave up)."""
    seen: BaseException | None = exc
    while seen is not None:
        attempts = getattr(seen, ATTEMPTS_ATTR, None)
        if attempts:
            return attempts
        seen = seen.__cause__ or seen.__context__
    return 1


def _generation(value) -> int | None:
    return int(value) if value not in (None, "") else None


class ObjectStore:
    """google-cloud-storage client for one GCS endpoint, safe to share between threads.

    Args:
        endpoint: base URL; None -> $STORAGE_EMULATOR_HOST, else https://storage.googleapis.com
            (resolved by `gcsckpt.io.resolve_endpoint`).
        token_provider: callable returning an OAuth2 access token; None -> google-auth ADC
            (read-write scope, `gcsckpt.io.auth`). Never called for an emulator endpoint.
        pool_size: connections kept alive (one per concurrent request).
        retry: the `gcsckpt.io.RetryPolicy` of every request (None -> its defaults).
        connect_timeout_s / stall_timeout_s: per attempt, the TCP connect limit and the longest
            wait for a byte (seconds); None -> the range reader's defaults.

    Errors (every method): FileNotFoundError for 404 where named, FileExistsError for a refused
    precondition (412), ObjectStoreError for anything else after the retries.
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
        if connect_timeout_s is None:
            connect_timeout_s = _reader_default("connect_timeout_s")
        if stall_timeout_s is None:
            stall_timeout_s = _reader_default("stall_timeout_s")
        self.timeout_s = (float(connect_timeout_s), float(stall_timeout_s))  # (connect, read)
        self._token_provider = token_provider
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
        from google.auth.credentials import AnonymousCredentials
        from google.auth.transport.requests import AuthorizedSession
        from google.cloud import storage
        from requests.adapters import HTTPAdapter

        if is_emulator_endpoint(self.endpoint):
            credentials = AnonymousCredentials()
        else:
            provider = self._token_provider or GoogleAuthTokenProvider(scope=READ_WRITE_SCOPE)
            credentials = token_provider_credentials(provider)
        session = self._session = AuthorizedSession(credentials)
        # Retries belong to the RetryPolicy, not to urllib3; one pool per scheme.
        adapter = HTTPAdapter(pool_connections=2, pool_maxsize=self._pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        client = storage.Client(
            project=_NO_PROJECT,
            credentials=credentials,
            _http=session,
            client_options={"api_endpoint": self.endpoint},
        )
        # google-cloud-storage 3.17 fetches each bucket's metadata in a background thread on
        # first use, only to label tracing spans: one GET more per bucket, racing our own
        # requests. Without its cache the client skips that.
        client._bucket_metadata_cache = None
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
            status = _status(exc)
            if status == 404:
                raise FileNotFoundError(f"{what}: not found (HTTP 404)") from None
            if status == 412:
                refused = FileExistsError(
                    f"{what}: precondition failed (HTTP 412), the object exists"
                )
                refused.attempts = _attempts(exc)
                raise refused from None
            raise ObjectStoreError(
                f"{method} {what} failed {after_attempts(_attempts(exc))}: {_cause(exc)}"
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
        blob = self._blob(bucket, name, generation)
        data = self._call(
            "GET", f"gs://{bucket}/{name}", lambda: blob.download_as_bytes(**self._options())
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
        return ObjectInfo(blob.name, int(blob.size or 0), _generation(blob.generation))

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
                fields="items(name,size,generation),prefixes,nextPageToken",
                **self._options(),
            )
            return [ObjectInfo(b.name, int(b.size or 0), _generation(b.generation)) for b in blobs]

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

        Args:
            if_generation_match: 0 makes the upload fail if the object already exists (GCS's
                create-if-absent); another value, unless the object has that generation.

        Returns:
            the new object's generation (None if the endpoint reports none).

        Raises:
            FileExistsError: precondition failed. ObjectStoreError: other failures.
        """
        body = data if isinstance(data, bytes) else bytes(data)
        blob = self._blob(bucket, name)
        what = f"gs://{bucket}/{name}"
        try:
            self._call(
                "POST",
                what,
                lambda: blob.upload_from_file(
                    io.BytesIO(body),
                    size=len(body),
                    rewind=True,
                    content_type="application/octet-stream",
                    if_generation_match=if_generation_match,
                    **self._options(),
                ),
            )
        except FileExistsError as refused:
            # A retry after a lost answer meets the object its first attempt created.
            if if_generation_match != 0 or getattr(refused, "attempts", 1) == 1:
                raise
            landed = self.read(bucket, name)
            if landed.data != body:
                raise
            if landed.generation is None:  # the endpoint's media reads carry no generation
                info = self.stat(bucket, name)
                return None if info is None else info.generation
            return landed.generation
        return _generation(blob.generation)

    def open_upload(
        self,
        bucket: str,
        name: str,
        *,
        chunk_bytes: int = 16 << 20,
        if_generation_match: int | None = None,
    ) -> UploadStream:
        """A write-only stream that becomes object `name` on `close()` (atomic: nothing is
        visible before then); `abort()` or an exception inside `with` discards it.

        Args:
            chunk_bytes: resumable chunk size (rounded up to 256 KiB), and the most the stream
                buffers; an object that fits in one chunk goes up as one `upload` at `close()`.
            if_generation_match: as for `upload`.
        """
        return UploadStream(self, bucket, name, chunk_bytes, if_generation_match)


class UploadStream(io.RawIOBase):
    """Write-only stream for one object; see `ObjectStore.open_upload`."""

    def __init__(
        self,
        store: ObjectStore,
        bucket: str,
        name: str,
        chunk_bytes: int,
        if_generation_match: int | None,
    ) -> None:
        super().__init__()
        self._store, self._bucket, self._name = store, bucket, name
        self._what = f"gs://{bucket}/{name}"
        self._chunk = max(_CHUNK_QUANTUM, -(-chunk_bytes // _CHUNK_QUANTUM) * _CHUNK_QUANTUM)
        self._precondition = if_generation_match
        self._buffer = bytearray()
        self._writer = None  # google-cloud-storage BlobWriter, once the object outgrows a chunk
        self._written = 0
        self._finished = False

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data) -> int:
        if self._finished:
            raise ValueError(f"{self._what}: write after close")
        view = memoryview(data).cast("B")
        if self._writer is None:
            self._buffer += view
            if len(self._buffer) > self._chunk:
                self._start_resumable()
        else:
            self._store._call("PUT", self._what, lambda: self._writer.write(view))
        self._written += len(view)
        return len(view)

    def _start_resumable(self) -> None:
        blob = self._store._blob(self._bucket, self._name)
        self._writer = blob.open(
            "wb",
            chunk_size=self._chunk,
            ignore_flush=True,
            content_type="application/octet-stream",
            if_generation_match=self._precondition,
            **self._store._options(),
        )
        buffered, self._buffer = self._buffer, bytearray()
        self._store._call("PUT", self._what, lambda: self._writer.write(buffered))

    def _finish_resumable(self) -> None:
        try:
            self._store._call("PUT", self._what, self._writer.close)
        except FileNotFoundError:
            # The last chunk landed but its answer was lost, and the endpoint forgot the finished
            # session (GCS answers the retry with the object): the object tells whether it did.
            info = self._store.stat(self._bucket, self._name)
            if info is None or info.size != self._written:
                raise

    def close(self) -> None:
        """Commits the object (the one point where it becomes visible)."""
        if self._finished or self.closed:
            return
        self._finished = True
        try:
            if self._writer is None:
                self._store.upload(
                    self._bucket, self._name, self._buffer, if_generation_match=self._precondition
                )
            else:
                self._finish_resumable()
        except BaseException:
            self.abort()
            raise
        finally:
            self._buffer = bytearray()
            super().close()

    def abort(self) -> None:
        """Discards the upload; the object is not created (or keeps its previous content)."""
        self._finished = True
        self._buffer = bytearray()
        writer, self._writer = self._writer, None
        if writer is not None and not writer.closed:
            try:
                writer.terminate()  # cancels the resumable session
            except Exception:
                pass  # best effort: an abandoned session expires on its own (GCS: one week)
        if not self.closed:
            super().close()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()
