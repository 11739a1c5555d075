"""Each byte read once per job: an HSDP state on 4 gloo ranks (2 replicas x 2 shards) loaded
with read_once (each range fetched by one rank, sent to the others), without it (every replica
fetches its ranges), with one owner's item ranges failing, and without a process group."""

from __future__ import annotations

import pytest
import replica_ranks

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.testing import LocalGCS

BUCKET = "replicas"
LEAVES = 41  # leaves compared in the fsdp/hsdp state (tensors and BYTE_IO values)
REPLICA = {0: 2, 1: 3, 2: 0, 3: 1}  # mesh (dp_replicate=2, dp_shard=2): rank -> its replica


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


# One save, then every load of the tests in the same ranks (one rank start for the module).
# No gap read-through (coalesce_gap_bytes=0), so bytes fetched are exactly bytes needed.
LOADS = dict(
    once=dict(read_once=True, gap=0),
    planned=dict(read_once=True, gap=0, planner="gcs"),
    every=dict(read_once=False, gap=0),
    failed=dict(read_once=True, fail_rank=0),
    after=dict(read_once=True),
    alone=dict(read_once=True, no_dist=True),
)


@pytest.fixture(scope="module")
def loads(gcs):
    spec = dict(ckpt=f"gs://{BUCKET}/hsdp", endpoint=gcs.endpoint)
    results = run_ranks(replica_ranks.save_and_load, 4, spec, list(LOADS.values()))
    return dict(zip(LOADS, zip(*results, strict=True), strict=True))


def _correct(results):
    for result in results:
        assert result["error"] is None
        assert result["mismatches"] == []
        assert result["compared"] == LEAVES
    for rank, result in enumerate(results):  # replicas hold identical local tensors
        assert result["digest"] == results[REPLICA[rank]]["digest"]


def test_each_byte_read_once(loads):
    once, planned, every = loads["once"], loads["planned"], loads["every"]
    for results in (once, planned, every):
        _correct(results)
    needed = [sum(n for *_, n in r["ranges"]) for r in every]  # each rank's own ranges
    distinct = sum(n for *_, n in set().union(*(map(tuple, r["ranges"]) for r in every)))
    assert sum(needed) > distinct  # replicas (and every rank, for replicated items) overlap
    # Off (today): every rank fetches all its ranges; a replica's ranks fetch the same.
    fetched = [r["stats"]["bytes_fetched"] for r in every]
    assert fetched == needed == [needed[REPLICA[rank]] for rank in range(4)]
    assert all(r["stats"]["peer_bytes_in"] == 0 for r in every)
    for results in (once, planned):  # compact plans (GCSLoadPlanner) share ranges alike
        stats = [r["stats"] for r in results]
        # Each stored byte fetched by one rank: the job's storage bytes = distinct bytes.
        assert sum(s["bytes_fetched"] for s in stats) == distinct
        assert sum(s["bytes_needed"] for s in stats) == distinct
        # Every rank gets the bytes it needs and did not fetch; what is sent is received.
        received = [s["peer_bytes_in"] for s in stats]
        assert sum(received) == sum(s["peer_bytes_out"] for s in stats) > 0
        # No more GETs than one replica's ranks sent without sharing.
        assert sum(s["requests"] for s in stats) <= sum(r["stats"]["requests"] for r in every[:2])
        assert sum(s["retries"] for s in stats) == 0


def test_owner_failure_fails_every_rank(loads):
    failed, after = loads["failed"], loads["after"]
    for rank, result in enumerate(failed):
        error = result["error"]
        assert error.startswith("CheckpointReadError: rank "), error
        assert f"gs://{BUCKET}/hsdp/__" in error  # the object at fault
        if rank == 0:
            assert error.startswith("CheckpointReadError: rank 0: checkpoint load failed: ")
        else:
            assert f"rank {rank}: checkpoint load failed (rank 0, which reads" in error
        # The status exchange failed the load before any range was sent or received.
        assert result["stats"]["peer_bytes_in"] == result["stats"]["peer_bytes_out"] == 0
    _correct(after)  # the next load on the same ranks is whole


def test_no_dist_load_is_unchanged(loads):
    alone = loads["alone"]
    _correct(alone)
    for result in alone:  # every rank plans and fetches alone: nothing is shared
        assert result["stats"]["peer_bytes_in"] == result["stats"]["peer_bytes_out"] == 0
        assert result["stats"]["list_requests"] == 1
