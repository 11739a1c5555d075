"""torchtitan's checkpoint manager on gcsckpt, selected from torchtitan's config (torchtitan 0.3).

Swap the trainer config's checkpoint section for this manager's Config; everything else
(interval, keep_latest_k, async_mode, load_step, last_save_model_only, ...) keeps its meaning::

    from gcsckpt.integrations.torchtitan import GCSCheckpointManager

    config.checkpoint = GCSCheckpointManager.Config(
        enable=True, folder="gs://bucket/run", interval=500, keep_latest_k=3, async_mode="async"
    )

torchtitan builds the manager from its Config (`config.checkpoint.build(...)`, as the Trainer
does). With a gs:// folder, saves and loads go through `GCSCheckpointer` (gcsckpt.dcp): steps
are `folder/step-N`, written by `GCSStorageWriter` ("disabled" -> GCSCheckpointer "sync",
"async" -> "thread", "async_with_pinned_mem" -> "process"); resume takes the newest *complete*
step (`.metadata` committed and every object it names present at its size, `gcsckpt.dcp.steps`)
and falls back to the previous one when it fails to load; `keep_latest_k` deletes old steps
from rank 0 after each committed save (`.metadata` first), through gcsckpt's own listing, never
gcsfs (whose listing cache does not see objects written outside gcsfs, so stock torchtitan
deletes nothing on such a folder). Any other folder, HF safetensors exports and loads, and an
`initial_load_path` on local disk keep torchtitan's own code.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torchtitan.components.checkpointer import MODEL, AsyncMode, CheckpointManager
from torchtitan.tools import filesystem
from torchtitan.tools.utils import GarbageCollection

from gcsckpt.dcp.checkpoint_errors import CheckpointLoadError, first_cause, wrap
from gcsckpt.dcp.checkpointer import GCSCheckpointer
from gcsckpt.dcp.paths import is_gcs_checkpoint_id
from gcsckpt.dcp.reader import GCSStorageReader
from gcsckpt.dcp.steps import complete_steps, step_url
from gcsckpt.io.objects import ObjectStore

log = logging.getLogger(__name__)

# torchtitan's async_mode -> GCSCheckpointer's mode.
MODES = {
    AsyncMode.DISABLED: "sync",
    AsyncMode.ASYNC: "thread",
    AsyncMode.ASYNC_WITH_PINNED_MEM: "process",
}
_STEP = re.compile(r"/step-(\d+)$")


class _StagerInGCSCheckpointer:
    """Stands in for the DefaultStager torchtitan's `_save` would make for
    "async_with_pinned_mem": GCSCheckpointer stages with its own (kept for the run), so
    torchtitan's is never used; only `close` is called on it."""

    def close(self) -> None:
        pass


def _done_future() -> Future:
    future: Future = Future()
    future.set_result(None)
    return future


class GCSCheckpointManager(CheckpointManager):
    """torchtitan's `CheckpointManager` saving, listing, pruning and loading gs:// folders with
    gcsckpt. Built by torchtitan from `GCSCheckpointManager.Config` (same arguments as the stock
    manager: config, dataloader, model_parts, optimizers, lr_schedulers, states, sd_adapter,
    base_folder).

    Attributes:
        checkpointer: the `GCSCheckpointer` of a gs:// folder (None for any other folder).

    Raises (from the manager's save / load / wait, gs:// folders):
        CheckpointSaveError: a save failed (the failed rank's exception is `__cause__`).
        CheckpointLoadError: no complete step could be loaded; NoCheckpointError (also a
            FileNotFoundError): `load_step` is not a complete step under the folder.
        ObjectStoreError: listing the folder failed.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        """torchtitan's checkpoint config plus gcsckpt's options (gs:// folders only)."""

        endpoint: str | None = None
        """GCS endpoint URL; None: $STORAGE_EMULATOR_HOST, else storage.googleapis.com."""

        keep_every: int = 0
        """Complete steps with N % keep_every == 0 survive keep_latest_k (0: none)."""

        def __post_init__(self) -> None:
            CheckpointManager.Config.__post_init__(self)
            if self.keep_every < 0:
                raise ValueError(f"keep_every must be >= 0, got {self.keep_every}")

    def __init__(self, config: Config, **kwargs: Any) -> None:
        self.checkpointer: GCSCheckpointer | None = None
        self._options = {"endpoint": config.endpoint} if config.endpoint else {}
        folder = filesystem.join(kwargs.get("base_folder", ""), config.folder)
        gcs = config.enable and is_gcs_checkpoint_id(folder)
        # On gs:// the retention is GCSCheckpointer's: torchtitan's purge thread (gcsfs) stays off.
        super().__init__(dataclasses.replace(config, keep_latest_k=0) if gcs else config, **kwargs)
        if not gcs:
            return
        self.keep_latest_k = config.keep_latest_k
        self.stager = _StagerInGCSCheckpointer()
        self.checkpointer = GCSCheckpointer(
            MODES[self.async_mode],
            root=self.folder,
            keep_latest=config.keep_latest_k or None,
            keep_every=config.keep_every or None,
            process_group=self.pg,
            **self._options,
        )

    # -- saves ---------------------------------------------------------------------------------
    def _step_of(self, checkpoint_id: str) -> int | None:
        """N when `checkpoint_id` is `folder/step-N`, else None."""
        match = _STEP.search(checkpoint_id.rstrip("/"))
        if match is None:
            return None
        step = int(match.group(1))
        return step if step_url(self.checkpointer.root, step) == checkpoint_id else None

    @torch.no_grad()
    def dcp_save(
        self,
        state_dict: dict[str, Any],
        checkpoint_id: str,
        async_mode: AsyncMode,
        enable_garbage_collection: bool = False,
        to_hf: bool = False,
    ) -> Future | AsyncSaveResponse | None:
        """Saves through `GCSCheckpointer` for a gs:// `checkpoint_id` (torchtitan's own
        `dcp_save` otherwise, and for HF exports). Returns what torchtitan expects of
        `async_mode`: None once committed (DISABLED, also when the manager is async: the last
        step), the upload's Future (ASYNC), or an AsyncSaveResponse (ASYNC_WITH_PINNED_MEM;
        staging is done when this returns).

        Raises:
            CheckpointSaveError: the previous save or (DISABLED) this one failed.
        """
        if self.checkpointer is None or to_hf or not is_gcs_checkpoint_id(checkpoint_id):
            return super().dcp_save(
                state_dict, checkpoint_id, async_mode, enable_garbage_collection, to_hf
            )
        step = self._step_of(checkpoint_id)
        if step is not None:
            future = self.checkpointer.save(state_dict, step=step)
        else:
            future = self.checkpointer.save(state_dict, checkpoint_id)
        result: Future | AsyncSaveResponse | None = future
        if async_mode == AsyncMode.DISABLED:
            self.checkpointer.wait()
            result = None
        elif async_mode == AsyncMode.ASYNC_WITH_PINNED_MEM:
            result = AsyncSaveResponse(staging_completion=_done_future(), upload_completion=future)
        if enable_garbage_collection:
            GarbageCollection.collect("GC collection invoked by checkpointer.")
        return result

    def _wait_for_saving(self) -> None:
        if self.checkpointer is None:
            return super()._wait_for_saving()
        self.save_future = None
        self.checkpointer.wait()  # CheckpointSaveError, not torch's CheckpointException

    def _purge_stale_checkpoints(self) -> None:
        if self.checkpointer is None:
            super()._purge_stale_checkpoints()
        # gs://: GCSCheckpointer prunes on rank 0 once each save is committed.

    # -- loads ---------------------------------------------------------------------------------
    def _find_load_step(self, folder: str = "") -> int:
        """The newest complete step under `folder` (default: the manager's), or -1. A gs://
        folder is listed by gcsckpt (one LIST, one `.metadata` GET per committed step) on the
        calling rank; any other folder by torchtitan."""
        folder = folder or self.folder
        if not is_gcs_checkpoint_id(folder):
            return super()._find_load_step(folder)
        if self.checkpointer is not None and folder == self.folder:
            steps = self.checkpointer.steps()
        else:
            with ObjectStore(self._options.get("endpoint")) as store:
                steps = complete_steps(store, folder)
        return steps[0] if steps else -1

    def _agreed_load_step(self) -> int:
        """Rank 0's `_find_load_step`, broadcast to every rank."""
        if not (dist.is_available() and dist.is_initialized()):
            return self._find_load_step()
        box: list[Any] = [self._find_load_step() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self.pg)
        return box[0]

    @torch.no_grad()
    def _load(self, step: int = -1) -> bool:
        """Loads `step` (-1: the newest complete step, falling back to older complete ones when
        it fails) from a gs:// folder; returns False on a fresh start. With no complete step
        and an `initial_load_path` or HF assets to start from, torchtitan's own `_load` runs
        (it asks fsspec whether the folder exists, so that case needs gcsfs).

        Raises:
            NoCheckpointError: `step` is not a complete step. CheckpointLoadError: no complete
            step could be loaded.
        """
        if self.checkpointer is None:
            return super()._load(step)
        self.checkpointer.wait()  # a save in flight uses the group the listing is broadcast on
        newest = self._agreed_load_step() if step == -1 else step
        if newest == -1:
            if self.initial_load_path or self.initial_load_in_hf:
                return super()._load(step)
            log.info("no complete checkpoint under %s: a fresh start", self.folder)
            return False
        model_only = newest == 0  # torchtitan's seed checkpoint holds the model only
        states = self._states_to_load(model_only)
        loaded = self.checkpointer.load(states, step=newest if model_only or step != -1 else None)
        if loaded is None:  # every step deleted since the listing
            return False
        if MODEL in self.states:
            self.states[MODEL].load_state_dict(states)
        log.info("loaded %s", step_url(self.checkpointer.root, loaded))
        GarbageCollection.collect("GC collection for checkpoint loading.")
        return True

    def dcp_load(
        self,
        state_dict: dict[str, Any],
        checkpoint_id: str,
        from_hf: bool,
        from_quantized: bool,
    ) -> None:
        """Loads a gs:// `checkpoint_id` with `GCSStorageReader` (e.g. an `initial_load_path`
        on GCS); torchtitan's own `dcp_load` otherwise and for HF safetensors.

        Raises:
            CheckpointLoadError: the load failed (the failed rank's exception is `__cause__`).
        """
        if from_hf or not is_gcs_checkpoint_id(checkpoint_id):
            return super().dcp_load(state_dict, checkpoint_id, from_hf, from_quantized)
        reader = GCSStorageReader(checkpoint_id, **self._options)
        try:
            dcp.load(state_dict, storage_reader=reader)
        except (CheckpointException, Exception) as exc:
            raise wrap(CheckpointLoadError, "load of", checkpoint_id, exc) from first_cause(exc)[1]
        if MODEL in self.states:
            self.states[MODEL].load_state_dict(state_dict)

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            checkpointer, self.checkpointer = self.checkpointer, None
            if checkpointer is not None:
                checkpointer.close()


__all__ = ["GCSCheckpointManager", "MODES"]
