"""progress: phase lines without a terminal, live per-rank bars with one, queue draining."""

import io
import multiprocessing
import queue
import time

import pytest
from rich.console import Console

from ckptbench.harness.rank_progress import RankProgress, rank_reporter
from ckptbench.record.progress_display import ProgressDisplay


def _console(terminal: bool) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=120, color_system=None)


def test_plain_log_prints_phase_start_and_outcome():
    console = _console(terminal=False)
    with ProgressDisplay(console) as display:
        with display.phase("setup", total=3) as phase:
            phase.advance(3)
        with pytest.raises(RuntimeError):
            with display.phase("load round 1"):
                raise RuntimeError("endpoint died")
    lines = console.file.getvalue().splitlines()
    assert lines[0] == "[phase] setup: started"
    assert lines[1].startswith("[phase] setup: done in ")
    assert lines[2] == "[phase] load round 1: started"
    assert lines[3].startswith("[phase] load round 1: failed in ")
    assert len(lines) == 4  # no live rendering off a terminal


def _child(q, rank):
    report = rank_reporter(q, rank)
    report("load", 5, 10)
    report("load", 10, 10)


def test_rank_messages_from_processes_reach_the_live_view():
    console = _console(terminal=True)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(q, rank)) for rank in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    with ProgressDisplay(console) as display:
        applied = 0
        deadline = time.monotonic() + 30
        while applied < 4 and time.monotonic() < deadline:
            applied += display.drain(q)  # a queue's feed may land just after the sender exits
            time.sleep(0.01)
    assert applied == 4
    assert display.rank_state == {
        0: RankProgress(0, "load", 10, 10),
        1: RankProgress(1, "load", 10, 10),
    }
    text = console.file.getvalue()
    assert "rank   0 load" in text and "rank   1 load" in text
    assert "10/10" in text


def test_drain_rejects_foreign_messages_and_reporter_without_queue_is_silent():
    plain = queue.Queue()
    plain.put(RankProgress(3, "setup", 1, None))
    plain.put("not progress")
    display = ProgressDisplay(_console(terminal=False))
    with pytest.raises(TypeError, match="str"):
        display.drain(plain)
    assert display.rank_state[3].phase == "setup"
    rank_reporter(None, 0)("load", 1, 2)  # no queue: nothing to do, no error


def test_reporter_drops_messages_when_the_queue_is_full():
    full = queue.Queue(maxsize=1)
    report = rank_reporter(full, 2)
    report("load", 1, 4)
    report("load", 2, 4)  # dropped, never blocks
    assert full.qsize() == 1 and full.get_nowait() == RankProgress(2, "load", 1, 4)
