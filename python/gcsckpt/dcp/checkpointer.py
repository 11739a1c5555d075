"""GCSCheckpointer: the recommended way to checkpoint a training job to gs:// with gcsckpt.

It wires torch's pieces the way that costs the training loop least (docs/measurements.md,
"Cutting the stall"): one `DefaultStager` kept for the whole run, so an async save copies the
state into the same host buffers every time (pinned on CUDA, shared memory for the checkpoint
process) instead of touching fresh pages; one `GCSSavePlanner`, so saves 2..N reuse the first
save's plans and Metadata; a GCSStorageWriter per save whose clients come from
`gcsckpt.dcp.engines` (built once per process: in PROCESS mode, once in torch's checkpoint
process); and the save's threads at background priority. Because the staging buffers are
reused, a save first waits for the previous one to be committed.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from gcsckpt.dcp.save_planner import GCSSavePlanner
from gcsckpt.dcp.writer import GCSStorageWriter

MODES = ("sync", "thread", "process")
BACKGROUND_NICE = 10  # the nice value of an async save's threads (see gcsckpt.dcp.background)


class GCSCheckpointer:
    """Saves a training job's checkpoints to gs://, one call per checkpoint.

    Make one per job, on every rank at the same point (it may create a gloo group), then
    `save(state_dict, "gs://bucket/run/step-N")` every N steps and `close()` at the end.

    Args:
        mode: "thread" (default: `dcp.async_save` with the upload in a thread of the rank),
            "process" (the upload in torch's checkpoint process, off the trainer's GIL), or
            "sync" (`dcp.save`: returns once committed).
        process_group: the group of the save's collectives; None -> a new gloo group made
            here (async saves must not share the training loop's group), or the default group
            for "sync".
        background_nice: nice value (1-19) of an async save's threads; None leaves them alone.
        **writer_options: GCSStorageWriter keyword arguments for every save (endpoint,
            token_provider, thread_count, object_bytes, ...); the token provider must pickle
            for "process" mode.

    Raises:
        ValueError: an unknown mode (or a bad writer option, at the first save).
    """

    def __init__(
        self,
        mode: str = "thread",
        *,
        process_group: dist.ProcessGroup | None = None,
        background_nice: int | None = BACKGROUND_NICE,
        **writer_options: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.planner = GCSSavePlanner()
        self._writer_options = dict(writer_options)
        if mode != "sync":
            self._writer_options.setdefault("background_nice", background_nice)
            if process_group is None and dist.is_available() and dist.is_initialized():
                process_group = dist.new_group(backend="gloo")
        self._group = process_group
        self._stager = None
        if mode != "sync":
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=torch.cuda.is_available(),
                    use_shared_memory=mode == "process",
                    use_async_staging=False,
                    use_non_blocking_copy=False,
                )
            )
        self._future: Future | None = None

    def save(self, state_dict: dict[str, Any], checkpoint_id: str | os.PathLike) -> Future | None:
        """Checkpoints `state_dict` to `checkpoint_id` (`gs://bucket/prefix`).

        First waits for the previous save (its staged buffers are about to be reused). "sync":
        returns None once `.metadata` is committed. "thread"/"process": returns once the state
        is copied into the staging buffers (the tensors may change from then on); the Future's
        result is the Metadata once committed, and it raises what the save raised.

        Raises:
            what the previous save raised (its Future's exception), or this save's errors
            (see GCSStorageWriter) for "sync".
        """
        self.wait()
        writer = GCSStorageWriter(checkpoint_id, **self._writer_options)
        if self.mode == "sync":
            dcp.save(
                state_dict, storage_writer=writer, planner=self.planner, process_group=self._group
            )
            return None
        kind = (
            AsyncCheckpointerType.PROCESS
            if self.mode == "process"
            else AsyncCheckpointerType.THREAD
        )
        self._future = dcp.async_save(
            state_dict,
            storage_writer=writer,
            planner=self.planner,
            process_group=self._group,
            async_checkpointer_type=kind,
            async_stager=self._stager,
        )
        return self._future

    def wait(self) -> None:
        """Waits for the save in flight, if any, and raises what it raised."""
        future, self._future = self._future, None
        if future is not None:
            future.result()

    def close(self) -> None:
        """Waits for the save in flight and frees the staging buffers; call once at the end."""
        try:
            self.wait()
        finally:
            if self._stager is not None:
                self._stager.close()
                self._stager = None
