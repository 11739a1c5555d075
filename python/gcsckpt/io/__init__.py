"""Every byte to or from GCS: the C++ range reader (`_gcsio`) and the object client beside it.

``RangeReader`` reads many byte ranges of many GCS objects into caller-owned memory with many
ranged GETs in flight (libcurl, keep-alive, GIL released), retrying transient failures and
checking every answer. See ``RangeReader`` for the behaviour and ``gcsckpt.io.defaults`` for
how the default tuning was measured. ``ObjectStore`` (``gcsckpt.io.objects``, on
google-cloud-storage) does the rest: whole small objects, create-if-absent, stat, list, delete
and uploads. Both retry under one ``RetryPolicy``.
"""

from gcsckpt.io.auth import GoogleAuthTokenProvider, default_token_provider
from gcsckpt.io.endpoint import is_emulator_endpoint, resolve_endpoint
from gcsckpt.io.errors import ObjectChangedError, ObjectNotFoundError, RangeReadError
from gcsckpt.io.objects import ObjectInfo, ObjectStore, ObjectStoreError, StoredObject, UploadStream
from gcsckpt.io.reader import RangeReader, ReadHandle
from gcsckpt.io.records import RangeRequest
from gcsckpt.io.retry import RetryPolicy

__all__ = [
    "GoogleAuthTokenProvider",
    "ObjectChangedError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreError",
    "RangeReadError",
    "RangeReader",
    "RangeRequest",
    "ReadHandle",
    "RetryPolicy",
    "StoredObject",
    "UploadStream",
    "default_token_provider",
    "is_emulator_endpoint",
    "resolve_endpoint",
]
