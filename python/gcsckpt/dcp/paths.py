"""gs:// checkpoint ids and the object paths a checkpoint's `.metadata` may name.

A checkpoint lives under `gs://BUCKET/PREFIX/`; every object it names in `storage_data` is a plain
relative path below that prefix. Anything else (absolute paths, `..`, URLs) is refused, because a
crafted `.metadata` could otherwise steer reads to another bucket or prefix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from gcsckpt.io.names import bucket_name_problem

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class CheckpointLocation:
    """Where a checkpoint lives: `bucket` and `prefix` (no leading/trailing slash, may be "")."""

    bucket: str
    prefix: str

    def object_name(self, relative_path: str) -> str:
        """Object name of `relative_path` (already checked) below the checkpoint prefix."""
        return f"{self.prefix}/{relative_path}" if self.prefix else relative_path

    def url(self, relative_path: str = "") -> str:
        """`gs://bucket/prefix[/relative_path]`, for messages and `checkpoint_id`."""
        name = self.object_name(relative_path) if relative_path else self.prefix
        return f"gs://{self.bucket}/{name}" if name else f"gs://{self.bucket}"


def parse_checkpoint_id(checkpoint_id: str | os.PathLike) -> CheckpointLocation:
    """Parses `gs://bucket[/prefix]` into a CheckpointLocation.

    Raises:
        ValueError: not a str, not `gs://`, bad bucket name, or a prefix with empty, `.` or `..`
            segments or control characters; the message quotes the offending id.
    """
    if not isinstance(checkpoint_id, str):
        raise ValueError(
            "checkpoint_id must be a 'gs://bucket/prefix' string, got"
            f" {type(checkpoint_id).__name__} {checkpoint_id!r}"
        )
    if not checkpoint_id.startswith("gs://"):
        raise ValueError(f"checkpoint_id {checkpoint_id!r} does not start with 'gs://'")
    bucket, _, prefix = checkpoint_id[len("gs://") :].partition("/")
    problem = bucket_name_problem(bucket)  # GCS's rules, as LocalGCS.create_bucket applies them
    if problem is not None:
        raise ValueError(
            f"checkpoint_id {checkpoint_id!r}: {bucket!r} is not a valid bucket name ({problem})"
        )
    prefix = prefix.rstrip("/")
    if prefix:
        _check_segments(prefix, f"checkpoint_id {checkpoint_id!r}")
    return CheckpointLocation(bucket, prefix)


def is_gcs_checkpoint_id(checkpoint_id: object) -> bool:
    """True when `checkpoint_id` parses as a `gs://` checkpoint id (never raises)."""
    try:
        parse_checkpoint_id(checkpoint_id)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def check_relative_path(relative_path: object, *, where: str) -> str:
    """Returns `relative_path` if it is a safe path below the checkpoint prefix.

    Refuses non-strings, "", absolute paths, URLs/schemes (`gs:`, `http:`, `C:`), backslashes,
    control characters and empty, `.` or `..` segments.

    Raises:
        ValueError: naming `where` (e.g. the `.metadata` object and the FQN) and the path.
    """
    if not isinstance(relative_path, str) or not relative_path:
        raise ValueError(f"{where}: relative path {relative_path!r} is not a non-empty string")
    if relative_path.startswith("/"):
        raise ValueError(f"{where}: relative path {relative_path!r} is absolute")
    if _SCHEME_RE.match(relative_path) or "://" in relative_path:
        raise ValueError(f"{where}: relative path {relative_path!r} carries a scheme")
    if "\\" in relative_path:
        raise ValueError(f"{where}: relative path {relative_path!r} contains a backslash")
    _check_segments(relative_path, where)
    return relative_path


def _check_segments(path: str, where: str) -> None:
    if _CONTROL_RE.search(path):
        raise ValueError(f"{where}: path {path!r} contains control characters")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"{where}: path {path!r} has an empty, '.' or '..' segment")


class GCSCheckpointId:
    """Mixin for StorageReader/StorageWriter: the `gs://` checkpoint id DCP asks about.

    Keeps `self.location` (a CheckpointLocation, or None until an id is given).
    """

    location: CheckpointLocation | None = None

    @property
    def checkpoint_id(self) -> str | None:
        """The `gs://bucket/prefix` URL of the checkpoint (None until one is given)."""
        return self.location.url() if self.location else None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        """True for ids of the form `gs://bucket[/prefix]`."""
        return is_gcs_checkpoint_id(checkpoint_id)


# The checkpoint's global metadata object (torch's FileSystemWriter layout); rank-local metadata
# is `__{rank}.metadata`.
METADATA_NAME = ".metadata"
