"""The exceptions `GCSCheckpointer`'s save and load raise: plain `Exception` subclasses.

torch's `dcp.save` / `dcp.load` report a rank's failure as `CheckpointException`, a
`BaseException`, so neither `except Exception` nor `except CheckpointReadError` catches it.
The checkpointer turns it into `CheckpointSaveError` / `CheckpointLoadError`, naming the
checkpoint and the failed ranks, with the lowest failed rank's own exception as `__cause__`.
"""

from __future__ import annotations

from torch.distributed.checkpoint.api import CheckpointException


class CheckpointError(Exception):
    """A checkpoint could not be saved or loaded. `url` is the checkpoint (or run root),
    `ranks` the ranks that failed (empty when not known)."""

    def __init__(self, message: str, *, url: str = "", ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.url, self.ranks = url, tuple(ranks)

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.url, self.ranks))


def _rebuild(cls: type, message: str, url: str, ranks: tuple[int, ...]) -> CheckpointError:
    return cls(message, url=url, ranks=ranks)


class CheckpointSaveError(CheckpointError):
    """A save failed (on any rank); nothing of it is committed."""


class CheckpointLoadError(CheckpointError):
    """No checkpoint could be loaded: the one asked for, or every complete step, failed."""


class NoCheckpointError(CheckpointLoadError, FileNotFoundError):
    """The step asked for is not a complete checkpoint under the run's root (`GCSCheckpointer`
    and the torchtitan manager); for one checkpoint path `GCSStorageReader` raises
    `CheckpointNotFoundError`. Both are FileNotFoundErrors."""


def first_cause(exc: BaseException) -> tuple[tuple[int, ...], BaseException]:
    """(failed ranks, the lowest failed rank's exception) of torch's CheckpointException;
    ((), exc) for any other exception."""
    if isinstance(exc, CheckpointException) and exc.failures:
        ranks = tuple(sorted(exc.failures))
        cause = exc.failures[ranks[0]]
        cause = cause[0] if isinstance(cause, tuple) else cause
        return ranks, cause if isinstance(cause, BaseException) else exc
    return (), exc


def wrap(cls: type[CheckpointError], what: str, url: str, exc: BaseException) -> CheckpointError:
    """`cls("<what> <url> failed on rank(s) R: <cause>")` with the cause chained by the caller
    (`raise wrap(...) from cause`)."""
    ranks, cause = first_cause(exc)
    where = f" on rank(s) {', '.join(map(str, ranks))}" if ranks else ""
    text = f"{type(cause).__name__}: {cause}"
    return cls(f"{what} {url} failed{where}: {text}", url=url, ranks=ranks)
