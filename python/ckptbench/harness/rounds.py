"""The one order of a benchmark's timed rounds: arms interleaved per round.

Round 1 of every arm, then round 2, ...: load from other processes, a warming page cache or a
slowing endpoint then touches every arm alike. The load and save benchmark, the training
benchmark and the cold restarts all walk their rounds through ``interleave``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

Arm = TypeVar("Arm", bound=Hashable)


def interleave(rounds: Mapping[Arm, int], run_round: Callable[[Arm, int], bool]) -> None:
    """Calls ``run_round(arm, index)`` for index 0, 1, ... and, within each index, every arm in
    ``rounds``' order. An arm drops out after its last round (``rounds[arm]`` of them) or once
    ``run_round`` returned False for it (a failed round: its later rounds would only repeat the
    error).

    Args:
      rounds: arm -> its number of rounds (0: none).
      run_round: runs one round; True to go on with that arm, False to stop it.
    """
    stopped: set[Arm] = set()
    for index in range(max(rounds.values(), default=0)):
        for arm, count in rounds.items():
            if index < count and arm not in stopped and not run_round(arm, index):
                stopped.add(arm)
