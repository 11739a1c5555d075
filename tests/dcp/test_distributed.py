"""Multi-rank (gloo, CPU processes) round trips through a local GCS endpoint: FSDP2 DTensor
Shard(0) model + AdamW state + extras, both serialization formats, and loads at a different
world size and into full (unsharded) state dicts."""

from __future__ import annotations

import pytest
import scenarios
from torch.distributed.checkpoint.filesystem import SerializationFormat

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.testing import LocalGCS

BUCKET = "dist"
LEAVES = 41  # leaves compared in the fsdp state (tensors and BYTE_IO values)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _spec(gcs, tmp_path, name, **kw):
    return dict(
        state="fsdp",
        writer="gcs",
        reader="gcs",
        ckpt=f"gs://{BUCKET}/{name}",
        endpoint=gcs.endpoint,
        expected=str(tmp_path / f"{name}.pt"),
        **kw,
    )


def _check(results, world_size):
    assert len(results) == world_size
    for rank_result in results:
        assert rank_result["mismatches"] == []
        assert rank_result["compared"] == LEAVES


@pytest.mark.parametrize("fmt", list(SerializationFormat), ids=lambda f: f.value)
def test_two_ranks_fsdp_and_full(gcs, tmp_path, fmt):
    spec = _spec(gcs, tmp_path, f"two-{fmt.value}", format=fmt.value)
    loads = [
        dict(spec, mode="fsdp"),
        dict(spec, mode="full"),
        dict(spec, mode="fsdp", planner="gcs"),
    ]
    sharded, full, planned = zip(*run_ranks(scenarios.save_and_load, 2, spec, loads), strict=True)
    _check(sharded, 2)
    _check(full, 2)
    _check(planned, 2)  # GCSLoadPlanner: compact plans + fast BYTE_IO, same values
    # One LIST per load, on the coordinator; its pins reach every rank inside the plan.
    assert [r["stats"]["list_requests"] for r in sharded] == [1, 0]
    assert all(r["stats"]["pinned_objects"] >= 1 for r in sharded + planned)
    for result in sharded:
        stats = result["stats"]
        assert stats["metadata_requests"] == 1
        assert stats["requests"] <= 2 * 2 * 2  # 2 ranks x 2 objects, at most 2 GETs each
        if fmt == SerializationFormat.SAFETENSORS:
            # Shard(0) rows are contiguous: the bytes land straight in the local shards.
            assert stats["direct_items"] >= 10


def test_four_ranks_then_reshard_to_two_and_one(gcs, tmp_path):
    spec = _spec(gcs, tmp_path, "four", threads=1)
    (same,) = zip(
        *run_ranks(scenarios.save_and_load, 4, spec, [dict(spec, mode="fsdp")]), strict=True
    )
    _check(same, 4)
    for result in same:  # DCP spreads replicated items over all ranks' objects: one GET each
        assert result["stats"]["requests"] == result["stats"]["objects"] <= 4
    two = run_ranks(scenarios.load, 2, dict(spec, mode="fsdp", planner="gcs"))
    _check(two, 2)
    for result in two:  # a rank of 2 owns the rows of 2 saved shards
        assert result["stats"]["objects"] >= 2
    one = run_ranks(scenarios.load, 1, dict(spec, mode="full"))
    _check(one, 1)
