"""Rank side of the training benchmark's tests (top level, so rank processes import it): a
deliberately lazy checkpoint that reads the live tensors only when it is waited for."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from ckptbench.train.loop import run_train


class LazySave:
    """A save whose writer reads the state when ``result()`` is called (after training went on),
    not when the call returned; the Future methods the loop uses."""

    def __init__(self, state: dict[str, Any], folder: str, group: Any) -> None:
        self._state, self._folder, self._group = state, folder, group
        self._callbacks: list[Any] = []
        self._done = False

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def result(self) -> None:
        if not self._done:
            dcp.save(
                self._state,
                storage_writer=FileSystemWriter(self._folder),
                process_group=self._group,
            )
            self._done = True
            for callback in self._callbacks:
                callback(self)


def lazy_start(arm, state, url, folder, endpoint, group, msc=None) -> LazySave:
    """``saving.start_save``'s signature; localfs folders only."""
    del arm, url, endpoint, msc
    return LazySave(state, folder, group)


def lazy_round(rank: int, job: Any) -> list[Any]:
    """Runs ``job`` with the lazy save; every rank's RankTrain (on every rank)."""
    del rank
    mine = run_train(job, start=lazy_start)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered
