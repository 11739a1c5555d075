"""torch's checkpoint process, started when `GCSCheckpointer("process")` is made, not at its
first save, and stopped by its `close()`.

`dcp.async_save(async_checkpointer_type=PROCESS)` keeps one checkpoint process per rank (a
module global of `torch.distributed.checkpoint._async_process_executor`) and starts it inside
the first save: a broadcast of the TCPStore address on the save's group, then a "spawn" child
that imports torch and joins a gloo group with every rank's child. On a loaded 2-core node that
start is seconds, paid by the first checkpoint (docs/measurements.md, "Saves in a training
loop"). Here the broadcast runs on the caller's thread (a collective: every rank makes its
checkpointer at the same point) and the spawn and the children's group join run on a background
thread, so the training steps after construction go on while it starts; the first save waits
only for what is left of it. The started process is put where torch looks for it, so torch's
saves use it and start none.

Several checkpointers of one rank share the process: the first one starts it (unless torch
already runs one, which is then used and never stopped here), the last `release` stops it (a
terminate request, then SIGTERM after `STOP_TIMEOUT_S`). Built on torch 2.13's private module;
when its names are missing the checkpointer falls back to torch's start at the first save.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch.distributed as dist

try:
    from torch.distributed.checkpoint import _async_process_executor as _torch_process
except ImportError:  # a torch without process-based async saves
    _torch_process = None

STOP_TIMEOUT_S = 10.0  # how long `release` waits for the process to exit before SIGTERM
_NEEDED = ("_CHECKPOINT_PROCESS", "_AsyncCheckpointProcess", "_ProcessGroupInitInfo")

log = logging.getLogger(__name__)

_lock = threading.Lock()
_current: CheckpointProcess | None = None  # the process started here, shared by the rank
_users = 0


def supported() -> bool:
    """Whether this torch exposes what starting its checkpoint process early needs."""
    return _torch_process is not None and all(hasattr(_torch_process, n) for n in _NEEDED)


class CheckpointProcess:
    """One start of torch's checkpoint process (an `_AsyncCheckpointProcess`), in a thread."""

    def __init__(self, init_info: Any) -> None:
        self.process: Any = None  # torch's _AsyncCheckpointProcess once started
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._start, args=(init_info,), name="gcsckpt-checkpoint-process", daemon=True
        )
        self._thread.start()

    def _start(self, init_info: Any) -> None:
        try:
            # Spawns the child and waits for its gloo group (every rank's child) to form.
            self.process = _torch_process._AsyncCheckpointProcess(init_info)
        except BaseException as exc:  # reported to the save that waits for it
            self.error = exc
            return
        _torch_process._CHECKPOINT_PROCESS = self.process

    def wait_ready(self) -> None:
        """Blocks until the process runs (torch's saves then use it).

        Raises:
            RuntimeError: it failed to start (the cause is chained).
        """
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(
                f"torch's checkpoint process failed to start on rank {_rank()}: {self.error}"
            ) from self.error

    @property
    def pid(self) -> int | None:
        """The process id once the process runs, else None."""
        if self.process is None:
            return None
        return self.process._save_process.pid

    def stop(self) -> None:
        """Waits for the start, asks the process to exit (SIGTERM after STOP_TIMEOUT_S), and
        takes it out of torch's global so a later PROCESS save starts a fresh one."""
        self._thread.join()
        proc = self.process
        if proc is None:
            return
        if getattr(_torch_process, "_CHECKPOINT_PROCESS", None) is proc:
            _torch_process._CHECKPOINT_PROCESS = None
        child = proc._save_process
        try:
            if child.is_alive():
                proc._send(_torch_process._CheckpointSaveProcessControlOpts.TERMINATE)
                child.join(timeout=STOP_TIMEOUT_S)
        except (OSError, ValueError) as exc:  # the pipe is gone: the child died
            log.warning("rank %d: checkpoint process %s: %s", _rank(), child.pid, exc)
        finally:
            if child.is_alive():
                log.warning(
                    "rank %d: checkpoint process %s still alive %.0f s after the terminate"
                    " request; sending SIGTERM",
                    _rank(),
                    child.pid,
                    STOP_TIMEOUT_S,
                )
                child.terminate()
                child.join(timeout=STOP_TIMEOUT_S)
            proc._process_pipe.close()


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def acquire(group: dist.ProcessGroup | None) -> CheckpointProcess | None:
    """Starts torch's checkpoint process in the background unless this rank runs one; returns
    the started one (shared by the rank's callers; hand it back with `release`), or None when
    torch runs one already, the default group is not initialized, or this torch lacks the names
    (torch then starts it at the first save).

    A collective on `group` when it starts one (the TCPStore address goes from rank 0 to all):
    call on every rank at the same point.
    """
    global _current, _users
    if not supported() or not (dist.is_available() and dist.is_initialized()):
        return None
    with _lock:
        if _current is None:
            if _torch_process._CHECKPOINT_PROCESS is not None:
                return None  # torch's own, started by an earlier plain async_save: not ours
            _current = CheckpointProcess(_torch_process._ProcessGroupInitInfo(group))
        _users += 1
        return _current


def release(started: CheckpointProcess | None) -> None:
    """Hands back what `acquire` returned; the rank's last user stops the process."""
    global _current, _users
    if started is None:
        return
    with _lock:
        if started is not _current:
            return
        _users -= 1
        if _users > 0:
            return
        _current = None
    started.stop()
