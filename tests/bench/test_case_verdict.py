"""The ranks' answers -> one CaseResult or SaveResult (runner.case_verdict): ok rounds, checksum
and byte mismatches, rank errors, save sizes and measures."""

from __future__ import annotations

import dataclasses

import pytest

from ckptbench.harness.job import RankFailure
from ckptbench.record.case_result import CaseInfo, SaveResult
from ckptbench.record.rank_rounds import RankSave
from ckptbench.runner.case_run import save_case_info
from ckptbench.runner.case_verdict import load_result, save_result
from ckptbench.runner.manifest import SetupManifest
from ckptbench.worker.case_jobs import RankLoadResult, RankRound, RankSaveResult
from ckptbench.workloads.parallel.dims import ParallelDims


def _round(start: float, mismatches: int = 0, committed: int = 100) -> RankRound:
    counters = {"read_items": 10, "requests": 3, "bytes_needed": 120, "bytes_fetched": 120}
    keys = tuple(f"model.w{i}" for i in range(mismatches))
    return RankRound(start, start + 2.0, counters, committed, 100, keys, mismatches)


_INFO = CaseInfo(name="load-x-fsdp-ws2", model_id="x", dims=ParallelDims("fsdp", 2, dp_shard=2))

_MANIFEST = SetupManifest(
    "load-x-fsdp-ws2", "0" * 16, 2, {".metadata": 10, "__0_0.distcp": 90}, "t"
)


def _result(gathered, rounds_wanted=2):
    return load_result(
        _INFO, "gcsckpt", gathered, rounds_wanted, manifest=_MANIFEST, reader_options={}
    )


def test_save_result_takes_rank_0_bytes_and_names_the_save_case():
    info = save_case_info(_INFO)
    assert info.name == "save-x-fsdp-ws2"
    rounds = (_round(1.0),)
    gathered = [
        RankSaveResult(0, rounds, written_bytes=(1234,)),
        RankSaveResult(1, rounds),
    ]
    result = save_result(info, "msc", gathered, 1, writer_options={"thread_count": 4})
    assert (result.status, result.scenario, result.checkpoint_physical_size_bytes) == (
        "ok",
        "checkpoint_write",
        1234,
    )
    assert isinstance(result, SaveResult) and result.checksums_verified
    assert (result.writer, result.implementation) == ("msc", "msc")
    assert result.writer_options == {"thread_count": 4}
    assert result.rounds[0].rank_counters is None  # writers report no reader counters
    two = [RankSaveResult(0, rounds * 2, written_bytes=(1234, 999)), RankSaveResult(1, rounds * 2)]
    uneven = save_result(info, "msc", two, 2, writer_options={})
    assert uneven.status == "failed"
    assert uneven.error_message == "saves of msc wrote different sizes: [999, 1234] bytes"


def test_load_result_ok_round_spans_first_start_to_last_end():
    gathered = [
        RankLoadResult(0, (_round(10.0), _round(20.0))),
        RankLoadResult(1, (_round(10.5), _round(19.0))),
    ]
    result = _result(gathered)
    assert result.status == "ok" and result.checksums_verified
    assert [r.duration_s for r in result.rounds] == [2.5, 3.0]
    assert result.checkpoint_physical_size_bytes == 100
    assert result.rounds[0].rank_counters[1].requests == 3


def test_load_result_fails_on_checksum_mismatch_with_rank_and_keys():
    gathered = [
        RankLoadResult(0, (_round(10.0), _round(20.0))),
        RankLoadResult(1, (_round(10.0), _round(20.0, mismatches=2))),
    ]
    result = _result(gathered)
    assert result.status == "failed" and not result.checksums_verified
    assert "checksum mismatch in round 2 rank 1: 2 entries differ (model.w0, model.w1)" in (
        result.error_message
    )


def test_load_result_fails_when_bytes_committed_differ():
    gathered = [
        RankLoadResult(0, (_round(1.0, committed=99),)),
        RankLoadResult(1, (_round(1.0),)),
    ]
    result = _result(gathered, rounds_wanted=1)
    assert result.status == "failed"
    assert "round 1 rank 0: 99 tensor bytes loaded, 100 expected" in result.error_message


def test_load_result_reports_rank_errors_and_missing_rounds():
    error = "rank 0: CheckpointReadError: gs://b/o bytes=0-9: reset"
    gathered = [RankLoadResult(0, (_round(1.0),), error), RankLoadResult(1, (_round(1.0),), error)]
    result = _result(gathered, rounds_wanted=3)
    assert result.status == "failed" and result.error_message == error
    assert len(result.rounds) == 1

    failure = _result([RankFailure(1, "rank 1: OSError: disk"), RankLoadResult(0, ())])
    assert failure.status == "failed" and "rank 1: OSError: disk" in failure.error_message


def _save_measures(rank: int, start: float) -> RankSave:
    return RankSave(100, 300, 400, 9, 0.01, start + 0.5, start + 1.5, 0.2 if rank == 0 else None)


def test_save_rounds_carry_each_ranks_measures_into_the_result():
    info = save_case_info(_INFO)
    rounds = [(dataclasses.replace(_round(1.0), save=_save_measures(r, 1.0)),) for r in range(2)]
    gathered = [
        RankSaveResult(0, rounds[0], written_bytes=(1234,)),
        RankSaveResult(1, rounds[1]),
    ]
    result = save_result(info, "localfs", gathered, 1, writer_options={})
    assert result.status == "ok"
    (record,) = result.rounds
    assert [m.finish_s for m in record.rank_saves] == [0.2, None]
    assert record.data_phase_s == pytest.approx(1.0)
    # A rank without measures (e.g. a writer that never reached write_data): none at all.
    gathered[1] = RankSaveResult(1, (_round(1.0),))
    assert save_result(info, "localfs", gathered, 1, writer_options={}).rounds[0].rank_saves is None
