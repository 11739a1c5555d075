"""CheckpointReadError, the one error a failed load raises, and the mapping into it.

In: what went wrong where: a `gcsckpt.io.RangeReadError` (its per-request failure dicts), or a
cause string with the object path and byte range at fault, or a ReadItem with no storage entry.
Out: a CheckpointReadError whose message names rank, `gs://bucket/object`, byte range and cause
(never credentials), or a ValueError naming the `.metadata` object for a missing entry.
"""

from __future__ import annotations

from collections.abc import Callable

from gcsckpt.dcp.paths import METADATA_NAME, CheckpointLocation
from gcsckpt.io import RangeReadError
from gcsckpt.io.errors import CRC32C_MISMATCH, GENERATION_CHANGED, failure_cause, failure_where
from gcsckpt.io.redact import redact, redact_value

# What the range reader calls a replaced object, and what a load calls it.
_READ_CHANGED = "object changed during read: "
_LOAD_CHANGED = "object changed during load: "


class CheckpointReadError(IOError):
    """A DCP load from GCS failed; the message names rank, gs:// object, byte range (none for
    a whole-object failure) and cause, formatted as the range reader formats its failures
    (`gcsckpt.io.errors`), with credentials redacted (`gcsckpt.io.redact`).

    Attributes:
        rank: the rank that failed. failures: list of dicts (bucket, object, offset, length,
            cause) for every failed byte range known.
    """

    def __init__(self, rank: int, failures: list[dict], summary: str = "") -> None:
        self.rank = rank
        # The range reader's texts are redacted already; causes built here may quote more.
        self.failures = [redact_value(dict(f)) for f in failures]
        self.summary = redact(summary)
        lines = [f"{failure_where(f)}: {f['cause']}" for f in self.failures]
        head = f"rank {rank}: checkpoint load failed" + (
            f" ({self.summary})" if self.summary else ""
        )
        super().__init__(head + ": " + "; ".join(lines))

    def __reduce__(self):
        # DCP pickles a failed rank's exception to every rank; rebuild it from its fields.
        return (type(self), (self.rank, self.failures, self.summary))


class LoadErrors:
    """Builds the errors of one rank's load of the checkpoint at `location`.

    Args:
        location: the checkpoint (bucket and prefix); relative paths are resolved below it.
        rank: the loading rank, named in every message.
        live_generation: object name (in the checkpoint's bucket) -> its live generation, or
            None when it does not exist (one metadata GET; OSError when that fails). Asked
            only when a GET of a pinned generation got HTTP 404, to tell a deleted object
            ("object deleted during load") from a replaced one; None -> never asked.
    """

    def __init__(
        self,
        location: CheckpointLocation,
        rank: int,
        live_generation: Callable[[str], int | None] | None = None,
    ) -> None:
        self.location = location
        self.rank = rank
        self._live_generation = live_generation

    def at(self, path: str, offset: int, length: int, cause: str) -> CheckpointReadError:
        """The error for bytes [offset, offset + length) of relative object `path`."""
        failure = dict(
            bucket=self.location.bucket,
            object=self.location.object_name(path),
            offset=offset,
            length=length,
            cause=cause,
        )
        return CheckpointReadError(self.rank, [failure])

    def from_range_error(self, error: RangeReadError) -> CheckpointReadError:
        """The range reader's failed requests (bucket, object, offset, length, HTTP status,
        error text, attempts), one failure each; its message alone if it lists none."""
        deleted: dict[str, str | None] = {}  # object -> its "deleted" cause: one stat each
        failures = [
            dict(
                bucket=f.get("bucket"),
                object=f.get("object"),
                offset=f.get("offset", 0),
                length=f.get("length", 0),
                cause=self._deleted_cause(f, deleted) or _cause(f),
            )
            for f in getattr(error, "failures", None) or []
        ]
        if not failures:
            return CheckpointReadError(self.rank, [], summary=str(error))
        return CheckpointReadError(self.rank, failures)

    def _deleted_cause(self, failure: dict, seen: dict[str, str | None]) -> str | None:
        """The cause "object deleted during load" when a GET of the pinned generation got HTTP
        404 and the object has no live version now; None otherwise (or when that cannot be
        told). `seen` keeps each object's answer, so an object is looked up once."""
        pinned = failure.get("pinned_generation") or 0
        if failure.get("cause") != GENERATION_CHANGED or failure.get("status") != 404:
            return None
        if not pinned or self._live_generation is None:
            return None
        name = failure.get("object")
        if name not in seen:
            try:
                gone = self._live_generation(name) is None  # else replaced, not deleted
            except (OSError, ValueError):
                gone = False
            seen[name] = (
                f"object deleted during load: generation {pinned} was read from it and the"
                " object no longer exists (HTTP 404)"
                if gone
                else None
            )
        return seen[name]

    def missing_entry(self, item) -> ValueError:
        """A ReadItem whose storage index `.metadata`'s storage_data does not hold."""
        return ValueError(
            f"rank {self.rank}: {self.location.url(METADATA_NAME)} has no storage entry"
            f" for {item.storage_index}"
        )


def _cause(failure: dict) -> str:
    """The range reader's failure as a load states it (`gcsckpt.io.errors.failure_cause`); a
    replaced object is "object changed during load"."""
    if failure.get("cause") == GENERATION_CHANGED:
        text = failure.get("error") or ""
        failure = {**failure, "error": _LOAD_CHANGED + text.removeprefix(_READ_CHANGED)}
    elif failure.get("cause") == CRC32C_MISMATCH:
        generation = failure.get("pinned_generation") or "unknown"
        text = failure.get("error") or ""
        failure = {
            **failure,
            "error": f"bytes differ from what was saved (generation {generation}): {text}",
        }
    return failure_cause(failure)
