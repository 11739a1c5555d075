"""The save phase's own measures end to end, on tiny OLMoE ep (2 gloo ranks, local GCS): each
rank's RSS and writer phases around its timed dcp.save, and the localfs reference writer (torch's
stock FileSystemWriter into local tmpfs), verified like every writer, never a peer, its folder
removed; the rows, results files and tables carry the new columns.
"""

from __future__ import annotations

import csv
import io
import json
import os

import pytest

from ckptbench.harness.launch import SpawnLauncher
from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.storage import BenchStorage
from ckptbench.worker import arms
from ckptbench.worker.case_jobs import SaveJob
from gcsckpt.testing import LocalGCS
from tests.bench.runner_fixtures import EP, EP_BASE, index_bytes, tiny_run_config

BUCKET = "runner-saves"
SAVE = "save-" + EP[len("load-") :]
WRITERS = ("gcsckpt", "localfs")


def _tmpfs_entries() -> set[str]:
    """This benchmark's folders on /dev/shm (none when there is no /dev/shm)."""
    if not os.path.isdir(arms.LOCAL_TMPFS):
        return set()
    return {n for n in os.listdir(arms.LOCAL_TMPFS) if n.startswith("gcsckpt-bench-")}


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _config(gcs, output_dir, **changes):
    fields = {
        "cases": ("load-olmoe_1b_7b_0924-ep-*",),
        "readers": ("gcsckpt",),
        "writers": WRITERS,
        "rounds": 1,
        "save_rounds": 1,
        "reference_rounds": 2,
        "upload_ceiling_rounds": 1,
        **changes,
    }
    return tiny_run_config(gcs.endpoint, f"gs://{BUCKET}/saves", output_dir, **fields)


@pytest.fixture(scope="module")
def saves_run(gcs, tmp_path_factory):
    before = _tmpfs_entries()
    out = io.StringIO()
    output_dir = tmp_path_factory.mktemp("saves")
    outcome = run_benchmark(_config(gcs, output_dir), out=out, live_progress=False)
    return outcome, out.getvalue(), before


def test_every_save_is_verified_and_the_reference_runs_its_own_rounds(gcs, saves_run):
    outcome, text, _ = saves_run
    assert outcome.failures == []
    saves = {r.writer: r for r in outcome.results if r.scenario == "checkpoint_write"}
    assert list(saves) == list(WRITERS)
    assert [len(saves[w].rounds) for w in WRITERS] == [1, 2]
    assert all(r.checksums_verified for r in saves.values())
    ours, local = saves["gcsckpt"].checkpoint_physical_size_bytes, saves["localfs"]
    # The same tensors in both; object framing differs by a little, and only gcsckpt's
    # `.metadata` carries the columnar index after the pickle.
    index = index_bytes(gcs, BUCKET, "saves/")
    assert 0 < index < 0.2 * ours
    assert abs(local.checkpoint_physical_size_bytes - (ours - index)) < 0.01 * ours
    assert "Timed saves per writer: gcsckpt 1, localfs 2 on 1 case(s)" in text
    # Both localfs rounds are jobs of "where the time went".
    for index in (1, 2):
        assert f"| save {EP} with localfs, round {index} |" in text


def test_each_rank_measured_its_memory_and_phases(saves_run):
    outcome, _, _ = saves_run
    for result in (r for r in outcome.results if r.scenario == "checkpoint_write"):
        for record in result.rounds:
            assert record.rank_saves is not None and len(record.rank_saves) == 2
            for rank, save in enumerate(record.rank_saves):
                where = f"{result.writer} rank {rank}"
                assert 0 < save.rss_start_bytes <= save.rss_peak_bytes, where
                assert save.rss_sample_count >= 2, where
                assert save.state_bytes > 0, where
                start, end = record.rank_start_unix_s[rank], record.rank_end_unix_s[rank]
                assert start <= save.data_start_unix_s <= save.data_end_unix_s <= end, where
                assert save.plan_s >= 0, where
                assert (save.finish_s is not None) == (rank == 0), where  # the coordinator
            assert 0 < record.data_phase_s <= record.duration_s


def test_state_bytes_are_the_ranks_expected_bytes(gcs, saves_run):
    """A save job run directly: each rank's RankSave.state_bytes is the expected_bytes the
    verifying load computed on the state it built (the same layout, another seed)."""
    config = _config(gcs, "unused")
    case = config.selected_cases()[0]
    spec = BenchStorage(config.bucket, config.endpoint).for_case(EP_BASE)
    gathered = SpawnLauncher(timeout_s=300).run(SaveJob(case, spec, "localfs", 1))
    assert [g.error for g in gathered] == [None, None]
    rounds = [g.rounds[0] for g in gathered]
    assert all(r.verified for r in rounds)
    assert [r.save.state_bytes for r in rounds] == [r.expected_bytes for r in rounds]
    assert gathered[0].written_bytes[0] > sum(r.expected_bytes for r in rounds)  # + .metadata


def test_rows_carry_memory_phases_and_the_reference_ratio(saves_run):
    outcome, _, _ = saves_run
    rows = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in outcome.report.rows}
    ours, local = rows[(SAVE, "gcsckpt")], rows[(SAVE, "localfs")]
    speed = "checkpoint_write_throughput_mean_bytes_per_second"
    for row in (ours, local):
        assert row["save_rss_peak_bytes_per_rank_max"] >= row["save_rss_start_bytes_per_rank_max"]
        assert row["save_rss_bound_bytes_at_peak_rank"] > 256 << 20
        assert isinstance(row["save_rss_peak_within_bound"], bool)
        assert 0 < row["save_data_phase_mean_seconds"] <= row["round_duration_mean_seconds"]
        assert row["save_data_phase_throughput_mean_bytes_per_second"] >= row[speed]
        assert len(json.loads(row["rank_saves_json"])) == 2
        assert row["checkpoint_read_throughput_mean_bytes_per_second"] is None
        assert row["reader_options_json"] is None
    # The reference is never the best peer; gcsckpt's ratio to it is its own column.
    assert ours["best_peer_implementation"] is None
    assert ours["reference_implementation"] == "localfs"
    assert ours["checkpoint_write_throughput_ratio_to_reference"] == pytest.approx(
        ours[speed] / local[speed]
    )
    settings = json.loads(local["writer_options_json"])
    assert settings["class"] == "torch.distributed.checkpoint.FileSystemWriter"
    if arms.local_save_root(ours["checkpoint_physical_size_bytes"]) == arms.LOCAL_TMPFS:
        assert settings["folder"] == "/dev/shm (tmpfs)"
    else:
        assert settings["folder"].startswith("job scratch dir below ")
    with open(outcome.report.files.csv_path, newline="") as f:
        table = {
            r["workload_implementation"]: r
            for r in csv.DictReader(f)
            if r["benchmark_case_id"] == SAVE
        }
    assert (
        int(table["localfs"]["save_rss_peak_bytes_per_rank_max"])
        == local["save_rss_peak_bytes_per_rank_max"]
    )
    assert table["gcsckpt"]["reference_implementation"] == "localfs"


def test_the_save_table_labels_whole_save_and_data_phase(saves_run):
    _, text, _ = saves_run
    assert "## Saves: whole dcp.save vs data phase, memory per rank" in text
    header = next(t for t in text.splitlines() if t.startswith("| case | writer | status |"))
    assert (
        "| whole dcp.save MB/s | whole / ceiling | client CPU s/GB | endpoint CPU s/GB "
        "| data phase s | data phase MB/s |"
    ) in header
    assert header.endswith("| every rank within bound | peak - start MiB (max rank) |")
    local = next(t for t in text.splitlines() if t.startswith(f"| {SAVE} | localfs | ok |"))
    cells = [c.strip() for c in local.strip("|").split(" | ")]
    assert cells[12].endswith("x")  # gcsckpt / this writer
    assert cells[15] in ("yes", "no")
    assert float(cells[6]) > 0  # the ranks' CPU per GB written
    # The summary names no best peer: localfs is a reference.
    summary = next(t for t in text.splitlines() if t.startswith("| case | gcsckpt MB/s |"))
    assert "best peer" not in summary and "localfs MB/s" in summary


def test_the_reference_leaves_no_folder_behind(saves_run):
    _, _, before = saves_run
    assert _tmpfs_entries() - before == set()
