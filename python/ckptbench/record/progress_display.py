"""Progress display for long benchmark steps: one line per phase and one bar per rank (rich).

Rank processes cannot draw on the runner's terminal, so they send ``RankProgress`` messages
through a multiprocessing queue (``harness.rank_progress.rank_reporter``) and the runner applies
them with ``ProgressDisplay.drain``. On a terminal the display is a live rich progress view;
elsewhere (CI logs, Bazel test output) it prints one plain line when a phase starts and when it
ends.
"""

from __future__ import annotations

import contextlib
import queue as queue_module
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from ckptbench.harness.rank_progress import RankProgress


class PhaseHandle:
    """Advances one phase's task (see ``ProgressDisplay.phase``)."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: float = 1) -> None:
        """Adds ``amount`` units done."""
        self._progress.advance(self._task, amount)

    def update(self, completed: float, total: float | None = None) -> None:
        """Sets units done (and the total, when given)."""
        self._progress.update(self._task, completed=completed, total=total)


class ProgressDisplay:
    """Live phase and per-rank progress; use as a context manager.

    Args:
      console: where to draw; defaults to a stderr console.
      live: draw the live view; defaults to whether ``console`` is a terminal. When False,
        phase start/end lines are printed instead.
    """

    def __init__(self, console: Console | None = None, live: bool | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
        )
        self._rank_tasks: dict[int, TaskID] = {}
        self.rank_state: dict[int, RankProgress] = {}

    def __enter__(self) -> ProgressDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    @contextlib.contextmanager
    def phase(self, name: str, total: float | None = None) -> Iterator[PhaseHandle]:
        """A phase task from entry to exit; on exit it is marked done (or failed, on error)."""
        task = self._progress.add_task(name, total=total)
        started = time.monotonic()
        if not self.live:
            self.console.print(f"[phase] {name}: started", markup=False, highlight=False)
        try:
            yield PhaseHandle(self._progress, task)
        except BaseException:
            self._finish_phase(task, name, started, "failed")
            raise
        self._finish_phase(task, name, started, "done")

    def _finish_phase(self, task: TaskID, name: str, started: float, outcome: str) -> None:
        elapsed = time.monotonic() - started
        state = self._progress.tasks[self._progress.task_ids.index(task)]
        if outcome == "done" and state.total is not None:
            self._progress.update(task, completed=state.total)
        self._progress.update(task, description=f"{name} ({outcome})")
        self._progress.stop_task(task)
        if not self.live:
            self.console.print(
                f"[phase] {name}: {outcome} in {elapsed:.1f} s", markup=False, highlight=False
            )

    def update_rank(self, update: RankProgress) -> None:
        """Shows ``update`` on its rank's bar (created on first use)."""
        description = f"rank {update.rank:>3} {update.phase}"
        task = self._rank_tasks.get(update.rank)
        if task is None:
            task = self._progress.add_task(description, total=update.total)
            self._rank_tasks[update.rank] = task
        self._progress.update(
            task, description=description, completed=update.completed, total=update.total
        )
        self.rank_state[update.rank] = update

    def drain(self, queue: Any, limit: int = 10_000) -> int:
        """Applies queued RankProgress messages without blocking; returns how many were applied.

        Raises:
          TypeError: something other than a RankProgress was queued.
        """
        applied = 0
        while applied < limit:
            try:
                message = queue.get_nowait()
            except queue_module.Empty:
                break
            if not isinstance(message, RankProgress):
                raise TypeError(
                    f"progress queue carried {type(message).__name__}, not RankProgress"
                )
            self.update_rank(message)
            applied += 1
        return applied
