"""Peer arms end to end: the msc and dataflux readers and a save phase with the gcsckpt, msc and
dataflux writers and the localfs reference (never a peer), on tiny OLMoE ep (2 gloo ranks, local
GCS); every load and save is checksum-verified (saves by loading them back with the stock
reader). The dataflux arm's ranks
run on its own venv (google-cloud-storage 2.19.0). Its writer sends every object as an XML
multipart upload: where the endpoint has none (501), that save is reported failed with that
error, and with one it must be verified. Then peer arms that fail (readers pointed at a
checkpoint that is not there; a writer whose job cannot start) are reported as failed, with
their errors, beside the arms that worked.
"""

from __future__ import annotations

import dataclasses
import io
import json
import urllib.error
import urllib.request

import pytest

from ckptbench.cases.selection import override_world_size
from ckptbench.harness.launch import JobError, SpawnLauncher
from ckptbench.harness.local_ranks import LocalRanks
from ckptbench.record.case_result import CaseInfo
from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.case_run import CaseRun, save_case_info
from ckptbench.runner.case_verdict import load_result
from ckptbench.runner.storage import BenchStorage
from ckptbench.worker.arms import DATAFLUX_PART_BYTES, DATAFLUX_PYTHON, MSC_UPLOAD_OPTIONS
from ckptbench.worker.case_jobs import LoadJob
from gcsckpt.testing import LocalGCS
from tests.bench.runner_fixtures import (
    EP,
    EP_BASE,
    NoDisplay,
    index_bytes,
    interpreter_facts,
    tiny_run_config,
)

BUCKET = "runner-peers"
SAVE = "save-" + EP[len("load-") :]
READERS = ("gcsckpt", "msc", "dataflux")
WRITERS = ("gcsckpt", "msc", "dataflux", "localfs")  # localfs: the reference, not a peer


def _has_xml_multipart(endpoint: str) -> bool:
    """Whether the endpoint answers an XML multipart-upload initiation (not 501)."""
    request = urllib.request.Request(f"{endpoint}/{BUCKET}/probe?uploads", method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except urllib.error.HTTPError as err:
        return err.code != 501


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _config(gcs, output_dir, **changes):
    fields = {
        "cases": ("load-olmoe_1b_7b_0924-ep-*",),
        "readers": READERS,
        "writers": WRITERS,
        "rounds": 1,
        "upload_ceiling_rounds": 1,
        **changes,
    }
    return tiny_run_config(gcs.endpoint, f"gs://{BUCKET}/peers", output_dir, **fields)


@pytest.fixture(scope="module")
def peers_run(gcs, tmp_path_factory):
    out = io.StringIO()
    output_dir = tmp_path_factory.mktemp("peers")
    outcome = run_benchmark(_config(gcs, output_dir), out=out, live_progress=False)
    return outcome, out.getvalue()


def test_every_arm_loads_and_saves_verified(gcs, peers_run):
    outcome, text = peers_run
    assert [(r.case.name, r.implementation, r.scenario) for r in outcome.results] == [
        *((EP, r, "checkpoint_read") for r in READERS),
        *((SAVE, w, "checkpoint_write") for w in WRITERS),
    ]
    dataflux_save = next(r for r in outcome.results[3:] if r.writer == "dataflux")
    if _has_xml_multipart(gcs.endpoint):
        assert outcome.failures == []
    else:  # reported failed with the endpoint's answer, never dropped or reconfigured
        assert outcome.failures == [dataflux_save]
        assert "501" in dataflux_save.error_message
        assert dataflux_save.error_message.startswith("rank ")
        assert f"{SAVE} with dataflux FAILED: rank " in text
        outcome = dataclasses.replace(
            outcome, results=[r for r in outcome.results if r is not dataflux_save]
        )
    assert all(r.checksums_verified and len(r.rounds) == 1 for r in outcome.results)
    loads, saves = outcome.results[:3], outcome.results[3:]
    size = loads[0].checkpoint_physical_size_bytes
    assert size > 4_000_000 and {r.checkpoint_physical_size_bytes for r in loads} == {size}
    # Every writer stored the same tensors; object framing differs by a few hundred bytes, and
    # only gcsckpt's `.metadata` carries the columnar index after the pickle.
    index = index_bytes(gcs, BUCKET, "peers/")
    assert 0 < index < 0.2 * size
    for result in saves:
        stored = size if result.writer == "gcsckpt" else size - index
        assert abs(result.checkpoint_physical_size_bytes - stored) < 0.01 * size, result.writer


def test_saves_leave_nothing_behind(gcs, peers_run):
    names = [b.name for b in gcs.storage_client().list_blobs(BUCKET, prefix="peers/")]
    assert names and not [n for n in names if "/checkpoint-saves/" in n]
    assert not [n for n in names if "/upload-ceiling/" in n]  # the ceiling's objects too


def test_the_upload_ceiling_is_measured_in_the_run_and_beside_the_saves(peers_run):
    _, text = peers_run
    (line,) = [t for t in text.splitlines() if t.startswith("Upload ceiling of the endpoint: ")]
    assert "MB/s per round; 16 x 64 MiB, parallel JSON media uploads" in line
    median = float(line.split(": ", 1)[1].split(" MB/s", 1)[0])
    header = next(t for t in text.splitlines() if t.startswith("| case | gcsckpt MB/s |"))
    assert header.endswith("| ceiling MB/s | gcsckpt/ceiling |")
    # The summary's save row (the first; the details table follows) has the same figure.
    save_row = next(t for t in text.splitlines() if t.startswith(f"| {SAVE} |"))
    assert f"| {median:.1f} |" in save_row


def test_rows_carry_each_arms_settings_and_both_ratios(peers_run):
    outcome, text = peers_run
    rows = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in outcome.report.rows}
    msc_reader = json.loads(rows[(EP, "msc")]["reader_options_json"])
    assert msc_reader["thread_count"] == 8 and msc_reader["node_local_cache"] is True
    assert msc_reader["skip_signature"] is True and msc_reader["msc_version"] == "1.3.1"
    msc_writer = json.loads(rows[(SAVE, "msc")]["writer_options_json"])
    assert msc_writer["multipart_threshold_bytes"] == MSC_UPLOAD_OPTIONS["multipart_threshold"]
    assert msc_writer["max_concurrency"] == 8 and msc_writer["thread_count"] == 4
    dataflux_reader = json.loads(rows[(EP, "dataflux")]["reader_options_json"])
    assert dataflux_reader["class"].endswith("GCSDistributedReader")
    assert dataflux_reader["google_cloud_storage_version"] == "2.19.0"
    dataflux_writer = json.loads(rows[(SAVE, "dataflux")]["writer_options_json"])
    assert dataflux_writer["class"].endswith("GCSDistributedWriter")
    assert dataflux_writer["part_bytes"] == DATAFLUX_PART_BYTES == 32 << 20
    assert rows[(SAVE, "gcsckpt")]["workload_scenario"] == "checkpoint_write"
    assert rows[(SAVE, "gcsckpt")]["checkpoint_read_count"] is None
    for case, rate in ((EP, "checkpoint_read_throughput"), (SAVE, "checkpoint_write_throughput")):
        speed = f"{rate}_mean_bytes_per_second"
        ours = rows[(case, "gcsckpt")]
        peers = [rows[(case, p)] for p in ("msc", "dataflux") if rows[(case, p)]["status"] == "ok"]
        best = max(peers, key=lambda row: row[speed])
        assert ours["best_peer_implementation"] == best["workload_implementation"]
        assert ours[f"{rate}_ratio_to_best_peer"] == pytest.approx(ours[speed] / best[speed])
        assert ours[f"{rate}_ratio_to_baseline"] is None  # no stock arm
        assert rows[(case, "msc")][f"{rate}_ratio_to_best_peer"] is None
    # The localfs reference ran beside the peers and is never the best peer, whatever its speed.
    assert rows[(SAVE, "localfs")]["status"] == "ok"
    assert rows[(SAVE, "gcsckpt")]["reference_implementation"] == "localfs"
    assert rows[(SAVE, "gcsckpt")]["checkpoint_write_throughput_ratio_to_reference"] == (
        pytest.approx(rows[(SAVE, "gcsckpt")][speed] / rows[(SAVE, "localfs")][speed])
    )
    header = (
        "| case | gcsckpt MB/s | msc MB/s | dataflux MB/s | localfs MB/s | gcsckpt/fsspec "
        "| gcsckpt/best peer |"
    )
    assert header in text
    assert "x (msc) |" in text or "x (dataflux) |" in text


@pytest.mark.parametrize("reader", ["msc", "dataflux"])
def test_a_peer_reader_pointed_at_a_missing_checkpoint_fails_with_its_error(gcs, peers_run, reader):
    # One rank shows it: every rank reads `.metadata` first, and rank 0's error is the row's.
    case = override_world_size(_config(gcs, "unused").selected_cases()[0], 1)
    spec = BenchStorage(f"gs://{BUCKET}/peers", gcs.endpoint).for_case(EP_BASE)
    missing = dataclasses.replace(spec, checkpoint_prefix=f"{spec.checkpoint_prefix}-absent")
    gathered = SpawnLauncher(timeout_s=120).run(LoadJob(case, missing, reader, 1))
    info = CaseInfo.from_case(case, "tiny")
    result = load_result(info, reader, gathered, 1, manifest=None, reader_options={})
    assert result.status == "failed" and not result.checksums_verified
    assert result.error_message.startswith("rank 0: ")
    assert ".metadata" in result.error_message


class _FailingSaves:
    """A launcher whose save jobs of one writer cannot start (like a dead rank process)."""

    is_leader = True

    def __init__(self, real, writer: str) -> None:
        self.real, self.writer = real, writer

    def agree(self, value):
        return value

    def run(self, job, on_progress=None):
        if getattr(job, "writer", None) == self.writer:
            raise JobError(f"{job.label}: rank 1 failed: OSError: disk gone")
        return self.real.run(job, on_progress)


def test_a_failed_writer_is_reported_and_the_others_still_run(gcs, tmp_path):
    config = _config(gcs, tmp_path, readers=("gcsckpt",), writers=("msc", "gcsckpt"))
    case = config.selected_cases()[0]
    out = io.StringIO()
    with BenchStorage(config.bucket, config.endpoint) as storage:
        launcher = _FailingSaves(SpawnLauncher(timeout_s=120), "msc")
        run = CaseRun(config, storage, launcher, NoDisplay(), out)
        spec = storage.for_case(case.base_name)
        info = CaseInfo.from_case(case, "tiny")
        failed, ok = run.saves(case, info, spec)
    assert (failed.writer, failed.status, failed.case.name) == ("msc", "failed", SAVE)
    assert failed.error_message == f"save {case.name} with msc: rank 1 failed: OSError: disk gone"
    assert failed.writer_options["class"].endswith("MultiStorageFileSystemWriter")
    assert (ok.writer, ok.status, ok.checksums_verified) == ("gcsckpt", "ok", True)
    assert f"{SAVE} with msc FAILED: save {case.name} with msc" in out.getvalue()
    assert save_case_info(info).name == SAVE


def test_the_dataflux_arms_ranks_run_on_its_own_venv(gcs):
    # One rank shows it (every rank starts the same way); peers_run ran the arm on two.
    ranks = LocalRanks(executable=DATAFLUX_PYTHON, timeout_s=60)
    facts = ranks.run(interpreter_facts, 1)
    assert [f[:3] for f in facts] == [(r, DATAFLUX_PYTHON, "2.19.0") for r in range(1)]
    assert all(f[3].endswith("_gcsio.so") for f in facts)  # the repository's extension
    case = _config(gcs, "unused").selected_cases()[0]
    assert LoadJob(case, None, "dataflux", 1).python == DATAFLUX_PYTHON
    assert LoadJob(case, None, "msc", 1).python is None
