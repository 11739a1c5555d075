"""Progress from rank processes to the launcher: ``RankProgress`` messages on a queue.

Rank processes cannot draw on the launcher's terminal, so ``rank_reporter`` gives each a
``report(phase, completed, total)`` that puts messages on a multiprocessing queue; the runner's
display (``record.progress_display.ProgressDisplay``) applies them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue as queue_module
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class RankProgress:
    """A rank's progress in a phase (picklable, sent from rank processes).

    Attributes:
      rank: global rank.
      phase: phase name, e.g. ``setup`` or ``load round 2``.
      completed: units done (items, bytes ...), >= 0.
      total: units in the phase, None when unknown.
    """

    rank: int
    phase: str
    completed: float
    total: float | None = None


def rank_reporter(queue: Any, rank: int) -> Callable[[str, float, float | None], None]:
    """A ``report(phase, completed, total)`` for rank processes; a no-op when ``queue`` is None.

    Messages are dropped rather than block the rank when the queue is full: progress must never
    slow down the measurement.
    """

    def report(phase: str, completed: float, total: float | None = None) -> None:
        if queue is None:
            return
        with contextlib.suppress(queue_module.Full):
            queue.put_nowait(RankProgress(rank, phase, completed, total))

    return report
