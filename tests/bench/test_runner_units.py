"""Runner pieces without rank processes: case selection, config, result verdicts, counters."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from types import SimpleNamespace

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException

from ckptbench import roles
from ckptbench.cases.catalogue import CaseError, load_catalogue
from ckptbench.cases.selection import override_world_size, select_run_cases
from ckptbench.record.case_result import CaseInfo, RankSave
from ckptbench.runner.benchmark import phase_table, rounds_note, save_case_info
from ckptbench.runner.bucket_type import classify_bucket, run_bucket_type
from ckptbench.runner.case_verdict import load_result, save_result
from ckptbench.runner.config import RunConfig
from ckptbench.runner.manifest import SetupManifest
from ckptbench.worker import arms, baseline
from ckptbench.worker.arms import (
    MSC_UPLOAD_OPTIONS,
    MSCProfile,
    local_save_root,
    make_writer,
    reader_settings,
    writer_settings,
)
from ckptbench.worker.jobs import RankLoadResult, RankRound, SaveJob, with_verification
from ckptbench.worker.load_job import describe_error
from ckptbench.worker.rank import RankFailure
from ckptbench.worker.save_probe import SaveProbe, WriterPhases, release_free_memory
from gcsckpt.parallel.dims import ParallelDims

FSDP = "load-olmoe_1b_7b_0924-fsdp-ws8"
EP = "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"


def _case(name: str):
    return load_catalogue(model_scale="tiny").get(name)


def test_override_world_size_moves_dp_shard_and_ep_together():
    ep = override_world_size(_case(EP), 4)
    assert (ep.name, ep.data_parallel_size, ep.expert_parallel_size) == (
        "load-olmoe_1b_7b_0924-ep-dp4ep4-ws4",
        4,
        4,
    )
    hsdp = override_world_size(_case("load-llama_3_1_8b-hsdp-dpr2dp4-ws8"), 4)
    assert (hsdp.data_parallel_replicate_size, hsdp.data_parallel_size) == (2, 2)
    tp = override_world_size(_case("load-llama_3_1_8b-tp-tp8-ws8"), 2)
    assert tp.name == "load-llama_3_1_8b-tp-tp2-ws2"
    single = override_world_size(_case(EP), 1)
    assert (single.name, single.data_parallel_size, single.expert_parallel_size) == (
        "load-olmoe_1b_7b_0924-ep-ws1",
        1,
        1,
    )


def test_override_world_size_names_the_case_it_cannot_resize():
    with pytest.raises(CaseError, match="hsdp-dpr4dp2-ws8"):
        override_world_size(_case("load-llama_3_1_8b-hsdp-dpr4dp2-ws8"), 4)


def test_select_run_cases_by_glob_and_axes():
    cases = select_run_cases(
        None,
        patterns=["load-olmoe*"],
        axes=["model", "strategy"],
        model_scale="tiny",
        world_size_override=2,
    )
    assert [c.name for c in cases] == [
        "load-olmoe_1b_7b_0924-fsdp-ws2",
        "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2",
    ]
    assert all(c.model == "olmoe_1b_7b_0924:tiny" for c in cases)
    with pytest.raises(CaseError, match="matches no case"):
        select_run_cases(None, patterns=["load-nothing*"], model_scale="tiny")


def test_selection_names_cases_for_the_bucket_type_and_takes_any_name_form():
    full = "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8-zon"
    for pattern in (full, "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8", "*-fsdp-tp-dp*-zon"):
        cases = select_run_cases(None, patterns=[pattern], model_scale="tiny", bucket_type="zon")
        assert [c.name for c in cases] == [full]
    with pytest.warns(FutureWarning, match="'load-llama_3_1_8b-fsdp_tp-dp2tp4-ws8' uses the old"):
        old = select_run_cases(
            None, patterns=["load-llama_3_1_8b-fsdp_tp-dp2tp4-ws8"], bucket_type="hns"
        )
    assert [c.name for c in old] == ["load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8-hns"]
    with pytest.raises(CaseError, match="bucket type 'nearline' is unknown"):
        select_run_cases(None, bucket_type="nearline")


def test_bucket_type_comes_from_the_bucket_metadata():
    def bucket(hns=None, location_type="region", storage_class="STANDARD"):
        return SimpleNamespace(
            hierarchical_namespace_enabled=hns,
            location_type=location_type,
            storage_class=storage_class,
        )

    assert classify_bucket(bucket()) == "reg"
    assert classify_bucket(bucket(location_type="multi-region")) == "reg"
    assert classify_bucket(bucket(hns=True)) == "hns"
    assert classify_bucket(bucket(location_type="zone")) == "zon"
    assert classify_bucket(bucket(location_type=None, storage_class="RAPID")) == "zon"
    assert run_bucket_type(None, None) == "local"  # the embedded endpoint: nothing to ask


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"readers": ("gcsckpt", "s3")}, "--readers"),
        ({"readers": ()}, "--readers"),
        ({"rounds": 0}, "--rounds"),
        ({"model_scale": "huge"}, "--model_scale"),
        ({"device": "tpu"}, "--device"),
        ({"latency_ms": -1.0}, "--latency_ms"),
        ({"stream_mbps": 0.0}, "--stream_mbps"),
        ({"writers": ("gcsckpt", "lightning")}, "--writers"),
        ({"writers": ("msc", "msc")}, "--writers"),
        ({"save_rounds": 0}, "--save_rounds"),
        ({"reference_rounds": 0}, "--reference_rounds"),
    ],
)
def test_run_config_rejects_bad_values_naming_the_flag(changes, flag):
    with pytest.raises(ValueError, match=flag):
        RunConfig(**changes)


def test_baseline_rounds_apply_to_fsspec_only():
    config = RunConfig(rounds=3, baseline_rounds=1)
    assert config.rounds_for("gcsckpt", 5) == 3
    assert config.rounds_for("fsspec", 5) == 1
    assert RunConfig().rounds_for("fsspec", 5) == 5


def test_save_phase_rounds_and_cases():
    config = RunConfig(rounds=3, writers=("gcsckpt", "msc"), save_cases=("load-*-ep-*",))
    assert config.save_rounds_for(5) == 3
    assert RunConfig(rounds=3, save_rounds=1).save_rounds_for(5) == 1
    assert RunConfig().save_rounds_for(5) == 5
    assert config.saves_case("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-local")
    assert not config.saves_case("load-olmoe_1b_7b_0924-fsdp-ws8-local")
    assert not RunConfig().saves_case("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-local")  # no writers
    assert RunConfig(writers=("fsspec",)).saves_case("anything")


def test_msc_profile_configures_the_endpoint_with_the_documented_upload_settings(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("MSC_CONFIG", raising=False)
    profile = MSCProfile(str(tmp_path / "r1"), "bench-r1", "bkt", "http://127.0.0.1:9", True)
    config = json.loads((tmp_path / "r1" / "msc_config.json").read_text())
    assert os.environ["MSC_CONFIG"] == profile.config_path
    assert config["profiles"]["bench-r1"] == {
        "storage_provider": {
            "type": "gcs",
            "options": {
                "base_path": "bkt",
                "multipart_threshold": 64 << 20,
                "multipart_chunksize": 32 << 20,
                "max_concurrency": 8,
                "endpoint_url": "http://127.0.0.1:9",
                "skip_signature": True,
            },
        },
        "caching_enabled": True,
    }
    assert config["cache"]["location"] == str(tmp_path / "r1" / "cache")
    assert profile.url("run/ckpt") == "msc://bench-r1/run/ckpt"
    profile.close()
    assert not (tmp_path / "r1").exists()
    real = MSCProfile(str(tmp_path / "r2"), "bench-r2", "bkt", None, False)
    config = json.loads(open(real.config_path).read())
    assert config == {
        "profiles": {
            "bench-r2": {
                "storage_provider": {
                    "type": "gcs",
                    "options": {"base_path": "bkt", **MSC_UPLOAD_OPTIONS},
                }
            }
        }
    }  # real GCS: Application Default Credentials, the same upload settings


def test_arm_settings_name_the_class_and_tuning():
    assert reader_settings("msc", emulator=False)["thread_count"] == 8
    for emulator in (True, False):  # the same upload settings against any endpoint
        msc = writer_settings("msc", emulator=emulator)
        assert msc["multipart_threshold_bytes"] == 64 << 20
        assert (msc["multipart_chunksize_bytes"], msc["max_concurrency"]) == (32 << 20, 8)
    assert writer_settings("fsspec", emulator=True)["class"].endswith("FsspecWriter")
    dataflux = writer_settings("dataflux", emulator=True)
    assert dataflux["class"].endswith("GCSDistributedWriter") and dataflux["thread_count"] == 1
    assert (dataflux["part_bytes"], dataflux["part_workers"]) == (32 << 20, 8)
    assert reader_settings("dataflux", emulator=False)["anonymous_credentials"] is False
    with pytest.raises(ValueError, match="writer 'lightning' is unknown"):
        writer_settings("lightning", emulator=True)
    with pytest.raises(ValueError, match="writer 'x' is unknown"):
        SaveJob(None, None, "x", 1)


def test_save_result_takes_rank_0_bytes_and_names_the_save_case():
    info = save_case_info(_INFO)
    assert info.name == "save-x-fsdp-ws2"
    rounds = (_round(1.0),)
    gathered = [
        RankLoadResult(0, rounds, written_bytes=(1234,)),
        RankLoadResult(1, rounds),
    ]
    result = save_result(info, "msc", gathered, 1, writer_options={"thread_count": 4})
    assert (result.status, result.scenario, result.checkpoint_physical_size_bytes) == (
        "ok",
        "checkpoint_write",
        1234,
    )
    assert result.checkpoint_object_count is None and result.checksums_verified
    two = [RankLoadResult(0, rounds * 2, written_bytes=(1234, 999)), RankLoadResult(1, rounds * 2)]
    uneven = save_result(info, "msc", two, 2, writer_options={})
    assert uneven.status == "failed"
    assert uneven.error_message == "saves of msc wrote different sizes: [999, 1234] bytes"


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


def test_describe_error_keeps_one_line_per_rank():
    try:
        raise OSError("gs://b/ckpt/__0_0.distcp bytes=0-99: connection reset")
    except OSError as err:
        wrapped = (err, None)
    exc = CheckpointException("load failed", {1: wrapped, 0: (ValueError("bad"), None)})
    text = describe_error(exc)
    assert text == (
        "rank 0: ValueError: bad; "
        "rank 1: OSError: gs://b/ckpt/__0_0.distcp bytes=0-99: connection reset"
    )


def test_baseline_counter_separates_metadata_bytes():
    baseline.take_request_counts()
    counter = baseline._COUNTER
    counter.add("http://h/download/storage/v1/b/b/o/p%2Fckpt%2F.metadata?alt=media", b"x" * 7)
    counter.add("http://h/download/storage/v1/b/b/o/p%2Fckpt%2F__0_0.distcp?alt=media", b"y" * 5)
    counts = baseline.take_request_counts()
    assert (counts.requests, counts.metadata_bytes, counts.data_bytes) == (2, 7, 5)
    assert baseline.take_request_counts().requests == 0


@pytest.mark.parametrize(
    "reader, planner_class",
    [("fsspec", "CountingLoadPlanner"), ("gcsckpt", "CountingGCSLoadPlanner")],
)
def test_counting_planner_counts_committed_bytes(reader, planner_class):
    from ckptbench.worker.planner import counting_planner_for

    seen = []
    planner = counting_planner_for(reader, progress=lambda done, total: seen.append((done, total)))
    assert type(planner).__name__ == planner_class
    planner.read_items = 2
    planner.commit_tensor(None, torch.zeros(3, 4, dtype=torch.bfloat16))
    planner.state_dict, planner.flatten_state_dict = {}, False
    read_item = type("Item", (), {"dest_index": type("I", (), {"fqn": "lr"})()})()
    buffer = io.BytesIO()
    torch.save(0.5, buffer)
    buffer.seek(0)
    planner.load_bytes(read_item, buffer)
    assert (planner.committed_items, planner.committed_tensor_bytes) == (2, 24)
    assert planner.state_dict["lr"] == 0.5
    assert seen[-1] == (2, 2)


def test_baseline_cases_and_peer_rounds_shape_each_readers_rounds():
    config = RunConfig(
        readers=("gcsckpt", "msc", "dataflux", "fsspec"),
        rounds=3,
        peer_rounds=2,
        baseline_rounds=1,
        baseline_cases=("load-*-ep-*",),
    )
    assert [config.rounds_for(r, 5) for r in config.readers] == [3, 2, 2, 1]
    assert config.readers_for(EP) == ("gcsckpt", "msc", "dataflux", "fsspec")
    assert config.readers_for(FSDP) == ("gcsckpt", "msc", "dataflux")
    assert RunConfig().readers_for(FSDP) == ("gcsckpt", "fsspec")  # default: every case
    cases = [_case(FSDP), _case(EP)]
    assert rounds_note(config, cases).startswith(
        "Timed rounds per case: gcsckpt 3, msc 2, dataflux 2, fsspec 1 on 1 of 2 cases."
    )
    with pytest.raises(ValueError, match="--peer_rounds must be >= 1"):
        RunConfig(peer_rounds=0)


def test_upload_ceiling_rounds_default_to_three_and_zero_turns_it_off():
    assert RunConfig().upload_ceiling_rounds == 3
    assert RunConfig(upload_ceiling_rounds=0).upload_ceiling_rounds == 0
    with pytest.raises(ValueError, match="--upload_ceiling_rounds must be >= 0, got -1"):
        RunConfig(upload_ceiling_rounds=-1)


def test_a_separate_verification_joins_the_timed_save_rank_by_rank():
    timed = RankRound(10.0, 12.5, {}, 0, 0, mismatch_count=-1)
    checked = RankRound(0.0, 0.0, {}, 100, 100)
    saved = [RankLoadResult(0, (timed,)), RankLoadResult(1, (timed,))]
    verified = [
        RankLoadResult(0, (checked,), written_bytes=(4321,)),
        RankLoadResult(1, (checked,)),
    ]
    joined = with_verification(saved, verified)
    assert [j.rounds[0].verified for j in joined] == [True, True]
    assert [(j.rounds[0].start_unix_s, j.rounds[0].end_unix_s) for j in joined] == [
        (10.0, 12.5),
        (10.0, 12.5),
    ]
    assert joined[0].written_bytes == (4321,)
    failed = with_verification(saved, [verified[0], RankFailure(1, "rank 1: OSError: gone")])
    assert failed[1] == RankLoadResult(1, (), error="rank 1: OSError: gone")
    mismatch = dataclasses.replace(checked, mismatch_count=2, mismatched=("a", "b"))
    joined = with_verification(saved[:1], [RankLoadResult(0, (mismatch,))])
    assert not joined[0].rounds[0].verified


def test_phase_table_lists_every_job_and_the_totals():
    table = phase_table([("setup x", 12.0), ("load x with gcsckpt, round 1", 3.25)], 20.0)
    assert table.splitlines() == [
        "| job | wall s |",
        "|---|---|",
        "| setup x | 12.0 |",
        "| load x with gcsckpt, round 1 | 3.2 |",
        "| all jobs | 15.2 |",
        "| whole run (endpoint, setup checks, publishing included) | 20.0 |",
    ]


def test_the_localfs_reference_has_rounds_of_its_own():
    config = RunConfig(rounds=3, save_rounds=1, reference_rounds=2, writers=("gcsckpt", "localfs"))
    assert config.save_rounds_for(5, "gcsckpt") == 1
    assert config.save_rounds_for(5, "localfs") == 2
    assert config.save_rounds_for(5) == 1
    assert RunConfig(save_rounds=1).save_rounds_for(5, "localfs") == 1  # default: save_rounds
    note = rounds_note(config, [_case(EP)])
    assert "Timed saves per writer: gcsckpt 1, localfs 2 on 1 case(s)" in note


def _save_measures(rank: int, start: float) -> RankSave:
    return RankSave(100, 300, 400, 9, 0.01, start + 0.5, start + 1.5, 0.2 if rank == 0 else None)


def test_save_rounds_carry_each_ranks_measures_into_the_result():
    info = save_case_info(_INFO)
    rounds = [(dataclasses.replace(_round(1.0), save=_save_measures(r, 1.0)),) for r in range(2)]
    gathered = [
        RankLoadResult(0, rounds[0], written_bytes=(1234,)),
        RankLoadResult(1, rounds[1]),
    ]
    result = save_result(info, "localfs", gathered, 1, writer_options={})
    assert result.status == "ok"
    (record,) = result.rounds
    assert [m.finish_s for m in record.rank_saves] == [0.2, None]
    assert record.data_phase_s == pytest.approx(1.0)
    # A rank without measures (e.g. a writer that never reached write_data): none at all.
    gathered[1] = RankLoadResult(1, (_round(1.0),))
    assert save_result(info, "localfs", gathered, 1, writer_options={}).rounds[0].rank_saves is None


def test_a_separate_verification_keeps_the_timed_rounds_measures():
    measures = _save_measures(0, 10.0)
    timed = RankRound(10.0, 12.5, {}, 0, 0, mismatch_count=-1, save=measures)
    checked = RankRound(0.0, 0.0, {}, 100, 100)
    (joined,) = with_verification([RankLoadResult(0, (timed,))], [RankLoadResult(0, (checked,))])
    assert joined.rounds[0].save == measures and joined.rounds[0].verified


def test_local_save_root_is_tmpfs_only_with_room(tmp_path, monkeypatch):
    monkeypatch.setattr(arms, "LOCAL_TMPFS", str(tmp_path))
    size = 10 << 20

    def room(free: int, available: int) -> None:
        usage = SimpleNamespace(free=free, total=free, used=0)
        monkeypatch.setattr(arms.shutil, "disk_usage", lambda path: usage)
        monkeypatch.setattr("psutil.virtual_memory", lambda: SimpleNamespace(available=available))

    room(2 * size, 3 * size)
    assert local_save_root(size) == str(tmp_path)
    room(2 * size - 1, 3 * size)
    assert local_save_root(size) is None
    room(2 * size, 3 * size - 1)
    assert local_save_root(size) is None
    assert local_save_root(None) is None  # unknown size: the scratch dir
    monkeypatch.setattr(arms, "LOCAL_TMPFS", str(tmp_path / "absent"))
    room(2 * size, 3 * size)
    assert local_save_root(size) is None


def test_localfs_settings_say_where_it_saved_and_that_it_is_a_reference(tmp_path):
    tmpfs = writer_settings("localfs", emulator=True, local_root="/dev/shm")
    assert tmpfs["class"] == "torch.distributed.checkpoint.FileSystemWriter"
    assert tmpfs["folder"] == "/dev/shm (tmpfs)"
    assert tmpfs["role"].startswith("reference") and "not a peer" in tmpfs["role"]
    assert (tmpfs["single_file_per_rank"], tmpfs["sync_files"], tmpfs["thread_count"]) == (
        True,
        True,
        1,
    )
    scratch = writer_settings("localfs", emulator=False)
    assert scratch["folder"].startswith("job scratch dir below ")
    assert "localfs" in roles.WRITERS and "localfs" not in roles.READERS
    assert "localfs" in roles.REFERENCES and "localfs" not in roles.PEERS
    with pytest.raises(ValueError, match="needs its round's local folder"):
        make_writer("localfs", "bkt", "p", None)
    writer = make_writer("localfs", "bkt", "p", None, folder=str(tmp_path))
    assert type(writer).__name__ == "FileSystemWriter"


class _LateWriter:
    """A writer whose data future completes on another thread, ``delay_s`` after write_data."""

    def __init__(self, delay_s: float, error: Exception | None = None) -> None:
        self.delay_s, self.error, self.completed_at = delay_s, error, None

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        import threading
        import time

        from torch.futures import Future

        future = Future()

        def complete():
            time.sleep(self.delay_s)
            self.completed_at = time.time()
            if self.error is not None:
                future.set_exception(self.error)
            else:
                future.set_result(["written"])

        threading.Thread(target=complete, daemon=True).start()
        return future

    def finish(self, metadata, results):
        return None


def test_writer_phases_time_the_data_phase_until_the_future_is_ready():
    writer = _LateWriter(0.2)
    phases = WriterPhases(writer)
    assert writer.prepare_local_plan("plan") == "plan"
    assert writer.prepare_global_plan(["a", "b"]) == ["a", "b"]
    assert phases.plan_s > 0 and phases.finish_s is None
    future = writer.write_data("plan", None)
    assert future.wait() == ["written"]  # what DCP waits on: the chained future
    assert phases.data_end_unix_s >= writer.completed_at > phases.data_start_unix_s
    writer.finish(None, [])
    assert phases.finish_s is not None and phases.finish_s >= 0
    assert type(writer).write_data is _LateWriter.write_data  # the class is left as it was
    failing = _LateWriter(0.0, OSError("disk gone"))
    WriterPhases(failing)
    with pytest.raises(Exception, match="disk gone"):
        failing.write_data("plan", None).wait()


def test_save_probe_measures_a_real_save_round_trip(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from gcsckpt.models.state import expected_bytes

    state = {"w": torch.arange(1 << 20, dtype=torch.float32), "step": torch.tensor(7)}
    writer = make_writer("localfs", "bkt", "p", None, folder=str(tmp_path / "save"))
    probe = SaveProbe(writer, expected_bytes(state))
    with pytest.raises(RuntimeError, match="before the probed save ran"):
        probe.result()
    with probe:
        before = time.time()
        dcp.save(state, storage_writer=writer)  # no process group: one rank, the coordinator
        after = time.time()
    measures = probe.result()
    assert measures.state_bytes == (4 << 20) + 8
    assert 0 < measures.rss_start_bytes <= measures.rss_peak_bytes
    assert before <= measures.data_start_unix_s <= measures.data_end_unix_s <= after
    assert measures.data_s <= after - before
    assert measures.finish_s is not None and measures.plan_s >= 0
    loaded = {"w": torch.zeros(1 << 20), "step": torch.tensor(0)}
    dcp.load(loaded, storage_reader=FileSystemReader(str(tmp_path / "save")))
    assert torch.equal(loaded["w"], state["w"]) and int(loaded["step"]) == 7


def test_release_free_memory_returns_freed_heap_pages_before_a_save():
    import psutil

    process = psutil.Process()
    chunks = [bytearray(b"x" * (64 << 10)) for _ in range(2048)]  # 128 MiB of heap chunks
    kept = chunks[::64]  # one chunk in 64 stays, so the heap cannot just shrink at its top
    del chunks
    before = process.memory_info().rss
    assert release_free_memory() is True  # glibc: malloc_trim(0)
    assert before - process.memory_info().rss >= 100 << 20
    assert len(kept) == 32
