"""Real gloo DCP round trips on 4 CPU ranks: OLMoE (tiny) under fsdp and ep, and across them (4
ranks hold 4 of the 16 experts each under ep: as few processes as show EP reading less)."""

import tempfile

import pytest

from ckptbench.harness.local_ranks import run_ranks
from tests.bench.workloads import roundtrip_worker as worker
from tests.bench.workloads.fake_ranks import make_case

OLMOE = "olmoe_1b_7b_0924:tiny"
RANKS = 4
FSDP = make_case(OLMOE, "fsdp", RANKS, dp=RANKS)
EP = make_case(OLMOE, "ep", RANKS, dp=RANKS, ep=RANKS)
TP = make_case(OLMOE, "tp", RANKS, tp=RANKS)


@pytest.fixture(scope="module")
def results():
    with tempfile.TemporaryDirectory() as root:
        per_rank = run_ranks(
            worker.save_load_then_across,
            RANKS,
            [FSDP, EP],
            FSDP,
            [EP, TP],
            root,
            preload=worker.PRELOAD,
        )
    return [r[0] for r in per_rank], [r[1] for r in per_rank]


@pytest.mark.parametrize("strategy", ["fsdp", "ep"])
def test_load_restores_every_saved_value(results, strategy):
    saved, _ = results
    worker.assert_restored(saved, strategy)


def test_ep_reads_fewer_items_per_rank_than_fsdp(results):
    saved, _ = results
    # tiny OLMoE: 117 parameters; per parameter 4 tensors (+ step, exp_avg, exp_avg_sq) and
    # 11 AdamW param-group entries (BYTE_IO). EP: 21 dense + 4 experts x 3 x 2 layers = 45 params.
    fsdp = [r["fsdp"] for r in saved]
    ep = [r["ep"] for r in saved]
    assert [r["items"] for r in fsdp] == [117 * 15] * RANKS
    assert [r["byte_io_items"] for r in fsdp] == [117 * 11] * RANKS
    assert [r["items"] for r in ep] == [45 * 15] * RANKS
    assert max(r["items"] for r in ep) < min(r["items"] for r in fsdp)


def test_fsdp_checkpoint_loads_into_other_layouts(results):
    _, across = results
    worker.assert_loaded_across(across, ["ep", "tp"])
