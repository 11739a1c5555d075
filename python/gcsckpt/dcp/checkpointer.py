"""GCSCheckpointer: the recommended way to checkpoint a training job to gs:// with gcsckpt.

It wires torch's pieces the way that costs the training loop least (docs/measurements.md,
"Cutting the stall"): one `DefaultStager` kept for the whole run, so an async save copies the
state into the same host buffers every time (pinned on CUDA, shared memory for the checkpoint
process) instead of touching fresh pages; in PROCESS mode, torch's checkpoint process started
with the checkpointer, in the background, instead of inside the first save
(`gcsckpt.dcp.checkpoint_process`); one `GCSSavePlanner`, so saves 2..N reuse the first
save's plans and Metadata; a GCSStorageWriter per save whose clients come from
`gcsckpt.dcp.client_cache` (built once per process: in PROCESS mode, once in torch's checkpoint
process); and the save's threads at background priority. Because the staging buffers are
reused, a save first waits for the previous one to be committed.

With `root="gs://bucket/run"` it also owns the run's steps (`gcsckpt.dcp.steps`): `save(state,
step=N)` writes `run/step-N`, `steps()` / `latest()` list the complete ones, `load(state)`
restores the newest complete step (falling back to the previous one when it fails), old steps
are deleted in the background (`keep_latest`, `keep_every`) and, with `local_dir`, each rank
keeps its newest checkpoint on the node as well (`gcsckpt.dcp.local_tier`). Listing and retention
live in `gcsckpt.dcp.checkpointer_steps` (RunSteps), loads in `gcsckpt.dcp.checkpointer_load`
(RunLoads): the checkpointer's two base classes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from gcsckpt.dcp import checkpoint_process
from gcsckpt.dcp.checkpoint_errors import (
    CheckpointError,
    CheckpointLoadError,
    CheckpointSaveError,
    NoCheckpointError,
    first_cause,
    wrap,
)
from gcsckpt.dcp.checkpointer_load import RunLoads
from gcsckpt.dcp.checkpointer_steps import RunSteps
from gcsckpt.dcp.local_tier import LocalTier, default_local_dir
from gcsckpt.dcp.main_guard import check_main_guard
from gcsckpt.dcp.save.plan_cache import GCSSavePlanner
from gcsckpt.dcp.steps import parse_root, step_url
from gcsckpt.dcp.writer import GCSStorageWriter
from gcsckpt.io.objects import ObjectStore

MODES = ("sync", "thread", "process")
BACKGROUND_NICE = 10  # the nice value of an async save's threads (see gcsckpt.dcp.save.background)
# Writer options the run's listing (ObjectStore) and loads (GCSStorageReader) share.
_SHARED_OPTIONS = ("endpoint", "token_provider", "retry")

log = logging.getLogger(__name__)


class _KeepingStager(DefaultStager):
    """DefaultStager that keeps the state dict it staged last (for the local tier's copy)."""

    staged: dict[str, Any] | None = None

    def stage(self, state_dict, **kwargs):
        staged = super().stage(state_dict, **kwargs)
        self.staged = staged if isinstance(staged, dict) else None
        return staged


class GCSCheckpointer(RunLoads, RunSteps):
    """Saves a training job's checkpoints to gs:// and, given a run `root`, owns its steps.

    Make one per job, on every rank at the same point (it may create gloo groups), then
    `save(state, step=N)` every N steps (or `save(state, "gs://bucket/run/step-N")`),
    `load(state)` on start, and `close()` at the end.

    Args:
        mode: "thread" (default: `dcp.async_save` with the upload in a thread of the rank),
            "process" (the upload in torch's checkpoint process, off the trainer's GIL; the
            process starts here, in the background, and `close()` stops it; the script needs
            an `if __name__ == "__main__":` guard), or "sync" (`dcp.save`: returns once
            committed).
        root: the run's `gs://bucket/prefix`: steps are `root/step-N`. Needed by `save(step=)`,
            `steps`, `latest` and `load`.
        keep_latest: K >= 1: after each committed save, delete (rank 0, in a background thread)
            every step older than the newest complete one but the K newest complete steps;
            None (default): delete nothing.
        keep_every: M >= 1: complete steps with N % M == 0 are never deleted.
        local_dir: keep each rank's newest checkpoint on the node too (a folder; True:
            `/dev/shm/gcsckpt` where /dev/shm exists, else a folder in the temp dir; None: off).
            Costs the state's bytes of node memory when on tmpfs.
        process_group: the group of the save's collectives; None -> a new gloo group made
            here (async saves must not share the training loop's group), or the default group
            for "sync".
        background_nice: nice value (1-19) of an async save's threads; None leaves them alone.
        **writer_options: GCSStorageWriter keyword arguments for every save (endpoint,
            token_provider, thread_count, object_bytes, ...); the token provider must pickle
            for "process" mode. endpoint, token_provider and retry also serve listings and
            loads.

    Raises:
        ValueError: an unknown mode, a bad root, keep_latest or keep_every (a bad writer
            option, at the first save). RuntimeError: "process" mode from a script's top level
            without an `if __name__ == "__main__":` guard (the message says what to add);
            a failed start of the checkpoint process surfaces at the first save, as
            CheckpointSaveError.
    """

    def __init__(
        self,
        mode: str = "thread",
        *,
        root: str | None = None,
        keep_latest: int | None = None,
        keep_every: int | None = None,
        local_dir: str | os.PathLike | bool | None = None,
        process_group: dist.ProcessGroup | None = None,
        background_nice: int | None = BACKGROUND_NICE,
        **writer_options: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        for name, value in (("keep_latest", keep_latest), ("keep_every", keep_every)):
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
        if (keep_latest or keep_every or local_dir) and root is None:
            raise ValueError("keep_latest, keep_every and local_dir need root='gs://bucket/run'")
        if mode == "process":
            check_main_guard(sys._getframe(1))
        self.mode = mode
        self.root = parse_root(root).url() if root is not None else None
        self.keep_latest, self.keep_every = keep_latest, keep_every
        self.planner = GCSSavePlanner()
        self._writer_options = dict(writer_options)
        self._shared = {k: writer_options[k] for k in _SHARED_OPTIONS if k in writer_options}
        distributed = dist.is_available() and dist.is_initialized()
        if mode != "sync":
            self._writer_options.setdefault("background_nice", background_nice)
            if process_group is None and distributed:
                process_group = dist.new_group(backend="gloo")
        self._group = process_group
        # The run's own collectives (step lists, local-tier votes): gloo, CPU objects.
        self._control = None
        if root is not None and distributed:
            self._control = process_group if mode != "sync" and process_group else None
            if self._control is None:
                self._control = dist.new_group(backend="gloo")
        self._rank = dist.get_rank() if distributed else 0
        self._world = dist.get_world_size() if distributed else 1
        self._stager = None
        if mode != "sync":
            self._stager = _KeepingStager(
                StagingOptions(
                    use_pinned_memory=torch.cuda.is_available(),
                    use_shared_memory=mode == "process",
                    use_async_staging=False,
                    use_non_blocking_copy=False,
                )
            )
        self._tier = None
        if local_dir:
            folder = default_local_dir() if local_dir is True else os.fspath(local_dir)
            self._tier = LocalTier(folder, parse_root(self.root), self._rank, self._world)
        self._future: Future | None = None
        self._local_future: Future | None = None
        self._saving: str | None = None
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}  # url -> saves/loads using it now (never deleted)
        self._store: ObjectStore | None = None
        self._retention: ThreadPoolExecutor | None = None
        self._retention_runs: list[Future] = []
        self.last_load: dict[str, Any] = {}
        # "process": torch's checkpoint process starts now, in the background, not in save 1.
        self._process = checkpoint_process.acquire(process_group) if mode == "process" else None

    def checkpoint_pid(self) -> int | None:
        """The pid of the checkpoint process this checkpointer started ("process" mode),
        once it runs (waits for its start); None in other modes, after `close()`, or when torch
        started it (an earlier plain PROCESS `async_save`) or will at the first save.

        Raises:
            RuntimeError: the process failed to start.
        """
        if self._process is None:
            return None
        self._process.wait_ready()
        return self._process.pid

    # -- saves ---------------------------------------------------------------------------------
    def save(
        self,
        state_dict: dict[str, Any],
        checkpoint_id: str | os.PathLike | None = None,
        *,
        step: int | None = None,
    ) -> Future | None:
        """Checkpoints `state_dict` to `root/step-<step>` (or to `checkpoint_id`,
        `gs://bucket/prefix`).

        First waits for the previous save (its staged buffers are about to be reused). "sync":
        returns None once `.metadata` is committed. "thread"/"process": returns once the state
        is copied into the staging buffers (the tensors may change from then on); the Future's
        result is the Metadata once committed, and it raises what torch raised. Once a save is
        committed, rank 0 deletes old steps in a background thread (`keep_latest`), and with
        `local_dir` each rank writes its copy in a background thread.

        Raises:
            ValueError: neither or both of checkpoint_id and step, or step without root.
            CheckpointSaveError: the previous save failed, or ("sync") this one did; the failed
                rank's exception is its `__cause__`.
        """
        if (checkpoint_id is None) == (step is None):
            raise ValueError("save wants either step=N (with root=) or a checkpoint_id")
        if step is not None and self.root is None:
            raise ValueError("save(step=N) needs GCSCheckpointer(root='gs://bucket/run')")
        url = step_url(self.root, step) if step is not None else os.fspath(checkpoint_id)
        self.wait()
        writer = GCSStorageWriter(url, **self._writer_options)
        self._hold(url)
        self._saving = url
        if self.mode == "sync":
            try:
                dcp.save(
                    state_dict,
                    storage_writer=writer,
                    planner=self.planner,
                    process_group=self._group,
                )
            except (CheckpointException, Exception) as exc:
                raise self._save_failed(url, exc) from first_cause(exc)[1]
            self._saving = None
            self._committed(url)
            if self._tier is not None and step is not None:
                self._write_local(state_dict, step, url, None)
            return None
        kind = (
            AsyncCheckpointerType.PROCESS
            if self.mode == "process"
            else AsyncCheckpointerType.THREAD
        )
        try:
            if self._process is not None:
                self._process.wait_ready()  # what is left of its start (usually nothing)
            upload = dcp.async_save(
                state_dict,
                storage_writer=writer,
                planner=self.planner,
                process_group=self._group,
                async_checkpointer_type=kind,
                async_stager=self._stager,
            )
        except (CheckpointException, Exception) as exc:
            raise self._save_failed(url, exc) from first_cause(exc)[1]
        # The caller's Future settles after `_done`: whoever waits on it (wait, close) finds
        # the retention run of this commit already queued.
        self._future = Future()
        upload.add_done_callback(lambda f, mine=self._future: self._done(f, url, mine))
        if self._tier is not None and step is not None and self._stager.staged is not None:
            staged = self._stager.staged
            self._local_future = self._pool().submit(
                self._write_local, staged, step, url, self._future
            )
        return self._future

    def _done(self, future: Future, url: str, mine: Future) -> None:  # the upload thread
        exc = future.exception()
        try:
            if exc is None:
                self._committed(url)
            else:
                self._release(url)
        finally:
            if exc is None:
                mine.set_result(future.result())
            else:
                mine.set_exception(exc)

    def _save_failed(self, url: str, exc: BaseException) -> CheckpointSaveError:
        """Forgets the save of `url` that failed to start or run, and says so."""
        self._saving = None
        self._release(url)
        return wrap(CheckpointSaveError, "save of", url, exc)

    def _committed(self, url: str) -> None:
        self._release(url)
        if self._rank == 0 and self.root is not None and self.keep_latest is not None:
            run = self._pool().submit(self.apply_retention)
            with self._lock:
                self._retention_runs.append(run)

    def _write_local(
        self, state_dict: dict[str, Any], step: int, url: str, upload: Future | None
    ) -> None:
        def committed() -> int | None:
            if upload is not None:
                upload.result()  # raises when the GCS save failed: no manifest, copy unused
            location = parse_root(url)
            info = self._object_store().stat(location.bucket, location.object_name(".metadata"))
            return None if info is None else info.generation

        try:
            self._tier.write(state_dict, step, committed)
        except (CheckpointException, Exception) as exc:  # never fails training: GCS has it
            log.warning("local copy of step-%d in %s failed: %s", step, self._tier.base, exc)

    def wait(self) -> None:
        """Waits for the save in flight (and its local copy), if any.

        Raises:
            CheckpointSaveError: it failed; the failed rank's exception is its `__cause__`.
        """
        future, self._future = self._future, None
        local, self._local_future = self._local_future, None
        url, self._saving = self._saving, None
        try:
            if future is not None:
                try:
                    future.result()
                except (CheckpointException, Exception) as exc:
                    _, cause = first_cause(exc)
                    raise wrap(CheckpointSaveError, "save of", url or "", exc) from cause
        finally:
            if local is not None:
                local.result()

    def close(self) -> None:
        """Waits for the save in flight, its local copy and retention, stops the checkpoint
        process it started ("process" mode; the rank's last checkpointer using it) and frees
        the staging buffers; call once at the end.

        Raises:
            CheckpointSaveError: the save in flight failed.
        """
        try:
            self.wait()
        finally:
            if self._retention is not None:
                self._retention.shutdown(wait=True)
                self._retention = None
            process, self._process = self._process, None
            checkpoint_process.release(process)
            if self._stager is not None:
                self._stager.close()
                self._stager = None
            if self._store is not None:
                self._store.close()


__all__ = [
    "CheckpointError",
    "CheckpointLoadError",
    "CheckpointSaveError",
    "GCSCheckpointer",
    "NoCheckpointError",
]
