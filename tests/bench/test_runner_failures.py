"""Failure paths of the runner: a load whose endpoint drops every connection, a corrupted object.

In both, the failing (case, reader) row says why, the other rows still run, and the run
publishes every row. Tiny OLMoE on 2 gloo ranks, local GCS; both checkpoints are saved once for
the module (setup jobs only), and the corruption test works on a copy of the fsdp one.
"""

from __future__ import annotations

import dataclasses
import io

import pytest

from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.config import RunConfig
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.testing import Fault, FaultProxy, LocalGCS
from tests.bench.runner_fixtures import EP, FSDP, FSDP_BASE, save_checkpoints, tiny_run_config

BUCKET = "runner-failures"


def _config(endpoint: str, prefix: str, output_dir, **changes) -> RunConfig:
    changes = {"rounds": 1, **changes}
    return tiny_run_config(endpoint, f"gs://{BUCKET}/{prefix}", output_dir, **changes)


def _run(config: RunConfig):
    out = io.StringIO()
    outcome = run_benchmark(config, out=out, live_progress=False)
    return outcome, out.getvalue()


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _objects(gcs: LocalGCS, prefix: str) -> list[str]:
    return [b.name for b in gcs.storage_client().list_blobs(BUCKET, prefix=prefix)]


@pytest.fixture(scope="module")
def saved(gcs, tmp_path_factory):
    """Both checkpoints saved under ``dies/`` through the healthy endpoint (no timed round)."""
    manifests = save_checkpoints(_config(gcs.endpoint, "dies", tmp_path_factory.mktemp("setup")))
    assert sorted(manifests) == sorted([FSDP, EP])
    return manifests


def test_endpoint_dying_mid_load_fails_that_case_and_the_run_goes_on(gcs, saved, tmp_path):
    data = [n for n in _objects(gcs, f"dies/{FSDP_BASE}/checkpoint/") if n.endswith(".distcp")]
    assert data
    # Every read of the fsdp checkpoint's data objects is cut off halfway (TCP reset).
    faults = [Fault("reset_mid_body", count=None, object_name=name) for name in data]
    with FaultProxy(upstream=gcs.endpoint, faults=faults) as proxy:
        config = _config(proxy.endpoint, "dies", tmp_path / "dies", baseline_cases=("*fsdp*",))
        outcome, text = _run(config)
        assert proxy.counts["reset_mid_body"] > 0
    by_pair = {(r.case.name, r.reader): r for r in outcome.results}
    assert list(by_pair) == [(FSDP, "gcsckpt"), (FSDP, "fsspec"), (EP, "gcsckpt")]
    ours = by_pair[(FSDP, "gcsckpt")]
    assert ours.status == "failed" and not ours.checksums_verified
    assert "CheckpointReadError" in ours.error_message
    assert f"gs://{BUCKET}/dies/{FSDP_BASE}/checkpoint/__" in ours.error_message
    assert by_pair[(FSDP, "fsspec")].status == "failed"
    assert by_pair[(FSDP, "fsspec")].error_message.startswith("rank ")
    assert by_pair[(EP, "gcsckpt")].status == "ok" and by_pair[(EP, "gcsckpt")].checksums_verified
    assert f"{FSDP} with gcsckpt FAILED: rank " in text
    rows = {(r["benchmark_case_id"], r["workload_implementation"]): r for r in outcome.report.rows}
    assert rows[(FSDP, "gcsckpt")]["status"] == "failed"
    assert rows[(FSDP, "gcsckpt")]["round_duration_mean_seconds"] is None
    assert rows[(EP, "gcsckpt")]["status"] == "ok"


def _flip_middle_of_largest_item(gcs: LocalGCS, checkpoint: str) -> str:
    """XORs 16 bytes in the middle of the checkpoint's largest item; returns the object name."""
    metadata = load_metadata(gcs.get(BUCKET, f"{checkpoint}/.metadata"), source="test")
    info = max(metadata.storage_data.values(), key=lambda i: i.length)
    name = f"{checkpoint}/{info.relative_path}"
    data = bytearray(gcs.get(BUCKET, name))
    middle = info.offset + info.length // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    gcs.put(BUCKET, name, bytes(data))
    # Committed again after the flip, as if written corrupt: a data object newer than
    # `.metadata` would fail the load as "object changed during load" before any checksum.
    meta = f"{checkpoint}/.metadata"
    gcs.put(BUCKET, meta, gcs.get(BUCKET, meta))
    return name


def _copy_case(gcs: LocalGCS, source: str, target: str) -> None:
    """Copies every object of a stored case (checkpoint and setup) from prefix ``source`` to
    ``target``, each ``.metadata`` last (committed after its data objects, as a save does)."""
    names = sorted(_objects(gcs, f"{source}/"), key=lambda n: n.endswith("/.metadata"))
    for name in names:
        gcs.put(BUCKET, target + name[len(source) :], gcs.get(BUCKET, name))


def test_corrupted_object_is_reported_as_a_checksum_failure(gcs, saved, tmp_path):
    config = _config(
        gcs.endpoint, "corrupt", tmp_path / "setup", cases=("load-olmoe_1b_7b_0924-fsdp-ws8",)
    )
    _copy_case(gcs, f"dies/{FSDP_BASE}", f"corrupt/{FSDP_BASE}")
    _flip_middle_of_largest_item(gcs, f"corrupt/{FSDP_BASE}/checkpoint")

    outcome, text = _run(dataclasses.replace(config, output_dir=str(tmp_path / "run")))
    assert f"{FSDP}: reusing the checkpoint" in text  # same sizes: the corruption is not seen
    ours, stock = outcome.results
    # gcsckpt's own block checksums refuse the flipped bytes before the load completes.
    assert ours.status == "failed" and not ours.checksums_verified
    assert "CheckpointReadError: rank 0: checkpoint load failed" in ours.error_message
    # torch.load does not check the archive's CRCs either: the stock reader loads the flipped
    # bytes, and only the checksums catch it.
    assert stock.status == "failed" and not stock.checksums_verified
    assert "checksum mismatch in round 1 rank" in stock.error_message
    row = outcome.report.rows[0]
    assert row["checksums_verified"] is False and row["error_message"]
