"""Errors raised by the range reader."""

from __future__ import annotations


def format_failure(failure: dict) -> str:
    """One line for a failed request: ``gs://b/o bytes=a-b: <error> after N attempts``."""
    where = f"gs://{failure['bucket']}/{failure['object']}"
    if failure["length"] > 0:
        first = failure["offset"]
        where += f" bytes={first}-{first + failure['length'] - 1}"
    attempts = failure["attempts"]
    plural = "attempt" if attempts == 1 else "attempts"
    return f"{where}: {failure['error']} after {attempts} {plural}"


class RangeReadError(IOError):
    """One or more requests failed for good (after retries).

    Attributes:
        failures: one dict per failed request with keys ``bucket``, ``object``, ``offset``,
            ``length`` (bytes), ``status`` (HTTP status int, or None when no answer arrived),
            ``error`` (str, never contains credentials) and ``attempts`` (int).

    ``str(err)`` lists every failed request, one per line.
    """

    def __init__(self, failures: list[dict], *, total: int | None = None):
        self.failures = list(failures)
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


def make_error(failures: list[dict], total: int | None = None) -> RangeReadError:
    """The most specific error class for ``failures`` (404-only -> ObjectNotFoundError)."""
    if failures and all(f["status"] == 404 for f in failures):
        return ObjectNotFoundError(failures, total=total)
    return RangeReadError(failures, total=total)
