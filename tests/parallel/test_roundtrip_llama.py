"""Real gloo DCP round trips on 8 CPU ranks for every Llama layout that fits 8 ranks."""

import tempfile

import pytest

from gcsckpt.testing.local_ranks import run_ranks
from tests.parallel import roundtrip_worker as worker
from tests.parallel.fake_ranks import make_case

LLAMA = "llama_3_1_8b:tiny"
CASES = [
    make_case(LLAMA, "hsdp", 8, dpr=2, dp=4),
    make_case(LLAMA, "tp", 8, tp=8),
    make_case(LLAMA, "fsdp_tp", 8, dp=2, tp=4),
    make_case(LLAMA, "hsdp_tp", 8, dpr=2, dp=2, tp=2),
    make_case(LLAMA, "pp", 8, pp=8),
    make_case(LLAMA, "pp_fsdp", 8, pp=2, dp=4),
    make_case(LLAMA, "pp_fsdp_tp", 8, pp=2, dp=2, tp=2),
]
FSDP = make_case(LLAMA, "fsdp", 8, dp=8)


@pytest.fixture(scope="module")
def results():
    with tempfile.TemporaryDirectory() as root:
        across = [make_case(LLAMA, "fsdp_tp", 8, dp=2, tp=4), make_case(LLAMA, "pp", 8, pp=8)]
        per_rank = run_ranks(
            worker.save_load_then_across,
            8,
            [FSDP, *CASES],
            FSDP,
            across,
            root,
            preload=worker.PRELOAD,
        )
    return [r[0] for r in per_rank], [r[1] for r in per_rank]


@pytest.mark.parametrize("strategy", ["fsdp"] + [c.strategy for c in CASES])
def test_load_restores_every_saved_value(results, strategy):
    saved, _ = results
    worker.assert_restored(saved, strategy)


def test_items_and_bytes_follow_the_layout(results):
    saved, _ = results
    # tiny Llama: 75 parameters (8 layers x 9 + embed, norm, lm_head), 15 items each.
    assert {r["fsdp"]["items"] for r in saved} == {75 * 15}
    assert {r["hsdp"]["items"] for r in saved} == {75 * 15}
    # pp8: stage 0 adds the embedding, stage 7 the norm and lm_head to its 9 layer params.
    assert [r["pp"]["items"] for r in saved] == [150] + [135] * 6 + [165]
    # HSDP keeps twice FSDP's shard per rank (dp_shard 4 instead of 8); replicas read it too.
    fsdp, hsdp = saved[0]["fsdp"]["bytes"], saved[0]["hsdp"]["bytes"]
    steps = 75 * 4  # one float32 step scalar per parameter, on every rank
    assert hsdp - steps == 2 * (fsdp - steps)


def test_fsdp_checkpoint_loads_into_tp_and_pp_layouts(results):
    _, across = results
    worker.assert_loaded_across(across, ["fsdp_tp", "pp"])
