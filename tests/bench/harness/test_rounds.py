"""harness.rounds.interleave (the order of every benchmark's rounds) and harness.job's entry
lookup and error text."""

import dataclasses
from typing import ClassVar

import pytest

from ckptbench.harness.job import entry_of
from ckptbench.harness.rounds import interleave


def test_rounds_go_round_by_round_and_a_short_arm_drops_out():
    calls = []
    interleave({"a": 3, "b": 1, "c": 2}, lambda arm, i: calls.append((arm, i)) or True)
    assert calls == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("c", 1), ("a", 2)]


def test_an_arm_stops_after_a_failed_round_and_the_others_go_on():
    calls = []

    def run(arm, index):
        calls.append((arm, index))
        return not (arm == "b" and index == 1)

    interleave({"a": 3, "b": 3}, run)
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]


def test_no_arms_no_rounds():
    calls = []
    interleave({}, lambda arm, i: calls.append(arm) or True)
    interleave({"a": 0}, lambda arm, i: calls.append(arm) or True)
    assert calls == []


@dataclasses.dataclass(frozen=True)
class _Job:
    entry: ClassVar[str] = "ckptbench.harness.rounds:interleave"
    label = "a test job"


@dataclasses.dataclass(frozen=True)
class _Bad:
    entry: ClassVar[str] = "ckptbench.harness.rounds.interleave"
    label = "a bad job"


def test_a_job_names_its_module_level_entry():
    assert entry_of(_Job()) is interleave
    with pytest.raises(ValueError, match="a bad job: entry 'ckptbench.harness.rounds.interleave'"):
        entry_of(_Bad())
