"""A checkpoint that does not exist: one clear error from `dcp.load`, and no tracebacks first.

torch's `dcp.load` asks the reader for `.metadata`; when that raises, it logs "Global metadata
is not found. Falling back to rank local metadata." with the traceback, asks for the rank's
`__{rank}.metadata`, logs "Rank local metadata is not found." with that traceback, then raises
its own error quoting both messages. For a prefix that holds no checkpoint the reader raises
`CheckpointNotFoundError` both times, and `quiet_torch_fallback` drops those two log records
(only records that carry a `CheckpointNotFoundError`; torch logs them on the root logger), so
the error torch raises, quoting ours, is the only thing printed.
"""

from __future__ import annotations

import logging
import threading

# The two warnings torch.distributed.checkpoint.state_dict_loader logs before it gives up.
_TORCH_FALLBACK_MESSAGES = frozenset(
    {
        "Global metadata is not found. Falling back to rank local metadata.",
        "Rank local metadata is not found.",
    }
)
_lock = threading.Lock()
_installed = False


class CheckpointNotFoundError(FileNotFoundError):
    """No checkpoint at a gs:// prefix: its `.metadata` (and the rank's `__{rank}.metadata`)
    does not exist. The message names the prefix and the objects looked for. Raised by
    `GCSStorageReader` for one checkpoint path; `GCSCheckpointer.load` says the same of a run's
    step with `NoCheckpointError`."""


def _not_our_fallback(record: logging.LogRecord) -> bool:
    """A logging filter: False for torch's fallback warnings about a CheckpointNotFoundError."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, CheckpointNotFoundError):
        return record.getMessage() not in _TORCH_FALLBACK_MESSAGES
    return True


def quiet_torch_fallback() -> None:
    """Installs the filter on the root logger (torch's DCP logger), once per process."""
    global _installed
    with _lock:
        if not _installed:
            logging.getLogger().addFilter(_not_our_fallback)
            _installed = True
