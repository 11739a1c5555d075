"""Compatibility with stock torch DCP over gcsfs (FsspecWriter/FsspecReader), both ways, on 2
gloo ranks through a local GCS endpoint: every loaded value equals what was saved."""

from __future__ import annotations

import pytest
import scenarios

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.testing import LocalGCS

BUCKET = "compat"
LEAVES = 41


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _spec(gcs, tmp_path, name, writer):
    return dict(
        state="fsdp",
        writer=writer,
        ckpt=f"gs://{BUCKET}/{name}",
        endpoint=gcs.endpoint,
        expected=str(tmp_path / f"{name}.pt"),
    )


def _all_equal(results):
    for result in results:
        assert result["mismatches"] == [] and result["compared"] == LEAVES


def test_stock_fsspec_checkpoint_loads_with_gcs_reader(gcs, tmp_path):
    spec = _spec(gcs, tmp_path, "from-stock", "fsspec")
    loads = [
        dict(spec, reader="gcs", mode="fsdp"),
        dict(spec, reader="gcs", mode="full"),
        dict(spec, reader="fsspec", mode="fsdp"),
        dict(spec, reader="fsspec", mode="fsdp", planner="gcs"),  # our planner, stock reader
    ]
    results = run_ranks(scenarios.save_and_load, 2, spec, loads)
    for rank_results in results:
        _all_equal(rank_results)
        # No index in a stock `.metadata`: the tail GET, then the whole object in a GET whose
        # hash google-cloud-storage checks.
        assert rank_results[0]["stats"]["metadata_requests"] == 2


def test_gcs_writer_checkpoint_loads_with_stock_reader(gcs, tmp_path):
    spec = _spec(gcs, tmp_path, "from-gcs", "gcs")
    loads = [dict(spec, reader="fsspec", mode="fsdp"), dict(spec, reader="fsspec", mode="full")]
    for rank_results in run_ranks(scenarios.save_and_load, 2, spec, loads):
        _all_equal(rank_results)
