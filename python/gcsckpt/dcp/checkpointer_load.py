"""The load side of `GCSCheckpointer` (`gcsckpt.dcp.checkpointer`): `load` picks the newest
complete step (rank 0 lists, every rank hears), tries every rank's local copy first when all
have one (`gcsckpt.dcp.local_tier`), else reads it from GCS (`GCSStorageReader`), and falls
back to the previous complete step when one fails to load.

`RunLoads` is a base class of GCSCheckpointer, kept apart because it is one job; it uses the
checkpointer's `mode`, `_rank`, `_group`, `_control`, `_shared`, `_tier`, `last_load`, and
`wait`, `step_infos`, `_need_root`, `_hold` and `_release`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from gcsckpt.dcp.checkpoint_errors import (
    CheckpointLoadError,
    NoCheckpointError,
    first_cause,
    wrap,
)
from gcsckpt.dcp.reader import GCSStorageReader
from gcsckpt.dcp.steps import StepInfo, step_url

log = logging.getLogger("gcsckpt.dcp.checkpointer")  # the checkpointer's one logger


def _metadata_generation(info: StepInfo) -> int | None:
    """The generation of a step's `.metadata` in its listing (None: not reported)."""
    for obj in info.objects:
        if obj.name.endswith("/.metadata") or obj.name == ".metadata":
            return obj.generation
    return None


class RunLoads:
    """The load half of `GCSCheckpointer` (see module doc)."""

    def _broadcast(self, value: Any) -> Any:
        if self._control is None:
            return value
        box = [value]
        dist.broadcast_object_list(
            box, src=dist.get_global_rank(self._control, 0), group=self._control
        )
        return box[0]

    def _all(self, ok: bool) -> bool:
        if self._control is None:
            return ok
        flag = torch.tensor([1 if ok else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._control)
        return bool(flag.item())

    def load(self, state_dict: dict[str, Any], step: int | None = None) -> int | None:
        """Loads the newest complete step (or `step`) into `state_dict`; returns its number, or
        None when root holds no complete step (a first run; `state_dict` is left as it was).

        Call on every rank. Rank 0 lists the steps; every rank loads the same one. With
        `local_dir`, every rank first checks its local copy (the newest complete GCS step,
        every file's size and CRC-32C) and, when all ranks have one, loads it from the node;
        otherwise from GCS (`GCSStorageReader`, with the writer's endpoint, token provider and
        retry). When the newest step fails (a missing, truncated or corrupt object: torch's
        CheckpointException carrying CheckpointReadError), a warning says so and the previous
        complete step is loaded instead. `last_load` records the source and skipped steps.

        Raises:
            ValueError: no root. NoCheckpointError: `step` is not a complete step.
            CheckpointLoadError: `step`, or every complete step, failed to load (the last
            failure's rank exception is `__cause__`); CheckpointSaveError: the save in flight
            failed.
        """
        root = self._need_root("load")
        self.wait()
        listed: Any = None
        if self._rank == 0:
            try:
                listed = [
                    (i.step, _metadata_generation(i)) for i in self.step_infos() if i.complete
                ]
            except Exception as exc:  # every rank must hear of it
                listed = exc
        listed = self._broadcast(listed)
        if isinstance(listed, BaseException):
            raise CheckpointLoadError(f"listing {root} failed: {listed}", url=root) from listed
        generations = dict(listed)
        listed = [s for s, _ in listed]
        if step is not None:
            if step not in listed:
                raise NoCheckpointError(
                    f"{step_url(root, step)} is not a complete checkpoint (complete steps under"
                    f" {root}: {listed[:10] or 'none'})",
                    url=step_url(root, step),
                )
            listed = [step]
        skipped: list[tuple[int, str]] = []
        self.last_load = {"step": None, "source": None, "skipped": skipped}
        if not listed:
            return None
        failure: BaseException | None = None
        for i, candidate in enumerate(listed):
            url = step_url(root, candidate)
            self._hold(url)
            try:
                if i == 0 and self._load_local(state_dict, candidate, generations[candidate]):
                    self.last_load.update(step=candidate, source="local")
                    return candidate
                try:
                    dcp.load(
                        state_dict,
                        storage_reader=GCSStorageReader(url, **self._shared),
                        process_group=self._group if self.mode == "sync" else None,
                    )
                except (CheckpointException, Exception) as exc:
                    failure = exc
                    error = wrap(CheckpointLoadError, "load of", url, exc)
                    if step is not None:
                        raise error from first_cause(exc)[1]
                    skipped.append((candidate, str(error)))
                    following = listed[i + 1] if i + 1 < len(listed) else None
                    log.warning(
                        "%s; %s",
                        error,
                        f"falling back to step-{following}"
                        if following is not None
                        else "no older complete step to fall back to",
                    )
                    continue
                self.last_load.update(step=candidate, source="gcs")
                return candidate
            finally:
                self._release(url)
        error = CheckpointLoadError(
            f"no complete step under {root} could be loaded; tried "
            + "; ".join(f"step-{s}: {why}" for s, why in skipped),
            url=root,
        )
        raise error from first_cause(failure)[1] if failure is not None else None

    def _load_local(self, state_dict: dict[str, Any], step: int, generation: int | None) -> bool:
        """Loads step `step` from every rank's local copy when all ranks have a whole one."""
        if self._tier is None:
            return False
        problem = "no local copy"
        if self._tier.newest() == step:
            problem = self._tier.verify(step, generation)
        elif self._tier.newest() is not None:
            problem = f"local copy is step-{self._tier.newest()}, loading step-{step}"
        if problem and self._tier.newest() is not None:
            log.warning("rank %d: not using the local tier: %s", self._rank, problem)
        if not self._all(not problem):
            self.last_load["local_problem"] = problem
            return False
        try:
            self._tier.load(state_dict, step)
            ok = True
        except (CheckpointException, Exception) as exc:
            log.warning("rank %d: local copy of step-%d failed to load: %s", self._rank, step, exc)
            self.last_load["local_problem"] = str(exc)
            ok = False
        return self._all(ok)
