"""Errors raised by the range reader, and the one formatter of failures.

``format_failure`` (``failure_where`` + ``failure_cause``) writes every failed request as
``gs://bucket/object bytes=a-b: <cause> after N attempts``, for ``RangeReadError`` and for
``gcsckpt.dcp``'s CheckpointReadError alike; ``after_attempts`` is also the wording of
``ObjectStoreError``. Credentials are removed by ``gcsckpt.io.redact``.
"""

from __future__ import annotations

from gcsckpt.io.redact import redact_value

# The failure cause the C++ RangeReader reports when an object was replaced while it was being read.
GENERATION_CHANGED = "generation_changed"
# ... and when a block's bytes did not match their CRC-32C, also after one re-fetch (the same
# cause an upload reports when the server's CRC-32C differs from the bytes sent).
CRC32C_MISMATCH = "crc32c_mismatch"


def after_attempts(attempts: int) -> str:
    """``after 1 attempt`` / ``after N attempts``: how every error of the package that gave up
    says how often it tried."""
    return f"after {attempts} attempt" + ("" if attempts == 1 else "s")


def failure_where(failure: dict) -> str:
    """``gs://bucket/object bytes=a-b`` of a failure dict (no byte range when ``length`` is 0
    or missing: the failure concerns the whole object)."""
    where = f"gs://{failure['bucket']}/{failure['object']}"
    if failure.get("length"):
        first = failure["offset"]
        where += f" bytes={first}-{first + failure['length'] - 1}"
    return where


def failure_cause(failure: dict) -> str:
    """What went wrong: ``[HTTP status: ]error[ after N attempts]`` (an error status only when
    the error text does not already name it; the attempts only when known)."""
    text = failure.get("error") or "failed"
    status = failure.get("status")
    if status is not None and status >= 400 and f"HTTP {status}" not in text:
        text = f"HTTP {status}: {text}"
    attempts = failure.get("attempts")
    return f"{text} {after_attempts(attempts)}" if attempts else text


def format_failure(failure: dict) -> str:
    """One line for a failed request: ``gs://b/o bytes=a-b: <error> after N attempts``; the one
    formatter of range failures (``RangeReadError``, and ``CheckpointReadError`` of a load)."""
    return f"{failure_where(failure)}: {failure_cause(failure)}"


class RangeReadError(IOError):
    """One or more requests failed for good (after retries).

    Attributes:
        failures: one dict per failed request with keys ``bucket``, ``object``, ``offset``,
            ``length`` (bytes), ``status`` (HTTP status int, or None when no answer arrived),
            ``error`` (str: the last cause and how far the GET got, e.g. "(16,095,232 of
            16,777,216 bytes of GET bytes=0-16777215 received, up to offset 16,095,232)";
            never contains credentials) and ``attempts`` (int). Failures from the C++ RangeReader
            also carry ``index`` (into the submitted requests), ``cause`` (e.g.
            ``connection_reset``, ``beyond_end``, ``generation_changed``), ``bytes_received``
            and ``offset_reached`` (bytes, of the failed GET over all its attempts), and
            ``pinned_generation`` / ``seen_generation`` (0 when unknown).

    ``str(err)`` lists every failed request, one per line. Every string in ``failures`` (and so
    in str, repr, args and pickles) has bearer tokens redacted (``gcsckpt.io.redact``).
    """

    def __init__(self, failures: list[dict], *, total: int | None = None):
        self.failures = [redact_value(dict(f)) for f in failures]
        head = f"{len(self.failures)} range request(s) failed"
        if total is not None:
            head = f"{len(self.failures)} of {total} range request(s) failed"
        lines = [head + ":"] + ["  " + format_failure(f) for f in self.failures]
        self.total = total
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return (_rebuild, (type(self), self.failures, self.total))


def _rebuild(cls: type, failures: list[dict], total: int | None) -> RangeReadError:
    return cls(failures, total=total)


class ObjectNotFoundError(RangeReadError, FileNotFoundError):
    """Every failed request got HTTP 404: the bucket or the object does not exist."""


class ObjectChangedError(RangeReadError):
    """An object was replaced (or deleted) while it was being read: no mixed bytes were kept.

    Raised when an answer's ``x-goog-generation`` differs from the generation the read is
    pinned to, or a GET naming that generation got HTTP 404 or 412. The failures concerned
    carry ``cause == "generation_changed"``, ``pinned_generation`` and ``seen_generation``.

    Attributes:
        changed: the failures with that cause.
    """

    @property
    def changed(self) -> list[dict]:
        return [f for f in self.failures if f.get("cause") == GENERATION_CHANGED]


class ChecksumMismatchError(RangeReadError):
    """Bytes of an object did not match the block CRC-32C recorded when it was saved, also
    after one re-fetch of the block: the object's bytes differ from what was saved (or the
    object is shorter than its checksums cover). Failures carry ``block_offset``,
    ``block_length`` (bytes), ``expected_crc32c`` and ``computed_crc32c`` (ints) and
    ``pinned_generation``; the destinations of the failed requests must not be used."""


def make_error(failures: list[dict], total: int | None = None) -> RangeReadError:
    """The most specific error class for ``failures``.

    Any object changed during the read -> ObjectChangedError; 404-only -> ObjectNotFoundError.
    """
    if any(f.get("cause") == GENERATION_CHANGED for f in failures):
        return ObjectChangedError(failures, total=total)
    if any(f.get("cause") == CRC32C_MISMATCH for f in failures):
        return ChecksumMismatchError(failures, total=total)
    if failures and all(f["status"] == 404 for f in failures):
        return ObjectNotFoundError(failures, total=total)
    return RangeReadError(failures, total=total)


# Failure causes of an upload the C++ uploader reports (cc/gcsio/upload_response.h).
PRECONDITION_FAILED = "precondition_failed"


class UploadError(IOError):
    """An upload failed for good (after retries), or was cancelled.

    Attributes:
        bucket, object: the object the upload was writing.
        failure: the uploader's record: ``status`` (HTTP status int, or None when no answer
            arrived), ``cause`` (e.g. ``http_503``, ``connection_reset``,
            ``precondition_failed``, ``crc32c_mismatch``, ``cancelled``), ``error`` (names
            ``gs://bucket/object``, the bytes committed / offset reached and the attempts;
            never credentials), ``attempts`` (of the last request), ``requests``,
            ``committed`` (bytes the server confirmed), ``retries``, ``status_queries``,
            ``restarts``.

    Every string in ``failure`` (and so str, repr, args, pickles) is redacted.
    """

    def __init__(self, bucket: str, object_name: str, failure: dict):
        self.bucket = bucket
        self.object = object_name
        self.failure = redact_value(dict(failure))
        super().__init__(failure_cause({**self.failure, "attempts": None}))

    def __reduce__(self):
        return (type(self), (self.bucket, self.object, self.failure))


class UploadPreconditionError(UploadError, FileExistsError):
    """HTTP 412: the upload's ``ifGenerationMatch`` did not hold (with 0: the object exists)."""


class UploadChecksumError(UploadError):
    """The server's crc32c of the uploaded object differs from the bytes sent (or is missing);
    the message names the object, its generation and both checksums."""


def make_upload_error(bucket: str, object_name: str, failure: dict) -> UploadError:
    """The most specific UploadError for the uploader's ``failure`` record."""
    cause = failure.get("cause")
    cls = {PRECONDITION_FAILED: UploadPreconditionError, CRC32C_MISMATCH: UploadChecksumError}
    return cls.get(cause, UploadError)(bucket, object_name, failure)
