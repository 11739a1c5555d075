"""Every byte to or from GCS: the C++ range reader (`_gcsio`) and the object client beside it.

``RangeReader`` (``gcsckpt.io.range_reader``, over ``_gcsio.RangeReader``) reads many byte
ranges of many GCS objects into caller-owned memory with many ranged GETs in flight (libcurl,
keep-alive, GIL released), retrying transient failures and checking every answer;
``Uploader`` (``gcsckpt.io.uploader``, over ``_gcsio.Uploader``) writes objects from caller
memory the same way, many resumable uploads in flight, each checked by CRC-32C. See
``RangeReader`` for the behaviour and docs/measurements.md, "Tuning constants", for how the
defaults were measured.
``ObjectStore`` (``gcsckpt.io.objects``, on google-cloud-storage) does the rest: whole small
objects (``.metadata``), create-if-absent uploads, stat, list and delete. All retry under one
``RetryPolicy``.
"""

from gcsckpt.io.auth import GoogleAuthTokenProvider, default_token_provider
from gcsckpt.io.endpoint import is_emulator_endpoint, resolve_endpoint
from gcsckpt.io.errors import (
    ChecksumMismatchError,
    ObjectChangedError,
    ObjectNotFoundError,
    RangeReadError,
    UploadChecksumError,
    UploadError,
    UploadPreconditionError,
)
from gcsckpt.io.objects import ObjectInfo, ObjectStore, ObjectStoreError, StoredObject
from gcsckpt.io.range_reader import BlockSums, RangeReader, ReadHandle
from gcsckpt.io.records import RangeRequest
from gcsckpt.io.retry import RetryPolicy
from gcsckpt.io.uploader import Uploader, UploadHandle, UploadResult, crc32c

__all__ = [
    "BlockSums",
    "ChecksumMismatchError",
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
    "UploadChecksumError",
    "UploadError",
    "UploadHandle",
    "UploadPreconditionError",
    "UploadResult",
    "Uploader",
    "crc32c",
    "default_token_provider",
    "is_emulator_endpoint",
    "resolve_endpoint",
]
