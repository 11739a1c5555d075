"""Rank results (worker.case_jobs): a save's separate verification joined rank by rank."""

from __future__ import annotations

import dataclasses

from ckptbench.harness.job import RankFailure
from ckptbench.record.rank_rounds import RankSave
from ckptbench.worker.case_jobs import RankRound, RankSaveResult, with_verification


def _save_measures(rank: int, start: float) -> RankSave:
    return RankSave(100, 300, 400, 9, 0.01, start + 0.5, start + 1.5, 0.2 if rank == 0 else None)


def test_a_separate_verification_joins_the_timed_save_rank_by_rank():
    timed = RankRound(10.0, 12.5, {}, 0, 0, mismatch_count=-1)
    checked = RankRound(0.0, 0.0, {}, 100, 100)
    saved = [RankSaveResult(0, (timed,)), RankSaveResult(1, (timed,))]
    verified = [
        RankSaveResult(0, (checked,), written_bytes=(4321,)),
        RankSaveResult(1, (checked,)),
    ]
    joined = with_verification(saved, verified)
    assert [j.rounds[0].verified for j in joined] == [True, True]
    assert [(j.rounds[0].start_unix_s, j.rounds[0].end_unix_s) for j in joined] == [
        (10.0, 12.5),
        (10.0, 12.5),
    ]
    assert joined[0].written_bytes == (4321,)
    failed = with_verification(saved, [verified[0], RankFailure(1, "rank 1: OSError: gone")])
    assert failed[1] == RankSaveResult(1, (), error="rank 1: OSError: gone")
    mismatch = dataclasses.replace(checked, mismatch_count=2, mismatched=("a", "b"))
    joined = with_verification(saved[:1], [RankSaveResult(0, (mismatch,))])
    assert not joined[0].rounds[0].verified


def test_a_separate_verification_keeps_the_timed_rounds_measures():
    measures = _save_measures(0, 10.0)
    timed = RankRound(10.0, 12.5, {}, 0, 0, mismatch_count=-1, save=measures)
    checked = RankRound(0.0, 0.0, {}, 100, 100)
    (joined,) = with_verification([RankSaveResult(0, (timed,))], [RankSaveResult(0, (checked,))])
    assert joined.rounds[0].save == measures and joined.rounds[0].verified
