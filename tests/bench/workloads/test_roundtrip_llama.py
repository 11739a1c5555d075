"""Real gloo DCP round trips for every Llama layout: on 4 CPU ranks where the layout fits 4, on 8
for the two that need a 2 x 2 x 2 mesh (as few processes as each layout needs)."""

import tempfile

import pytest

from ckptbench.harness.local_ranks import run_ranks
from tests.bench.workloads import roundtrip_worker as worker
from tests.bench.workloads.fake_ranks import make_case

LLAMA = "llama_3_1_8b:tiny"
FSDP = make_case(LLAMA, "fsdp", 4, dp=4)
ON_FOUR = [
    make_case(LLAMA, "hsdp", 4, dpr=2, dp=2),
    make_case(LLAMA, "tp", 4, tp=4),
    make_case(LLAMA, "fsdp_tp", 4, dp=2, tp=2),
    make_case(LLAMA, "pp", 4, pp=4),
    make_case(LLAMA, "pp_fsdp", 4, pp=2, dp=2),
]
ON_EIGHT = [
    make_case(LLAMA, "hsdp_tp", 8, dpr=2, dp=2, tp=2),
    make_case(LLAMA, "pp_fsdp_tp", 8, pp=2, dp=2, tp=2),
]


@pytest.fixture(scope="module")
def results():
    """{strategy: per-rank save/load report}, and the per-rank reports of loading FSDP's
    checkpoint into other layouts."""
    with tempfile.TemporaryDirectory() as root:
        across = [ON_FOUR[2], ON_FOUR[3]]  # fsdp_tp, pp
        four = run_ranks(
            worker.save_load_then_across,
            4,
            [FSDP, *ON_FOUR],
            FSDP,
            across,
            root,
            preload=worker.PRELOAD,
        )
        eight = run_ranks(worker.save_then_load, 8, ON_EIGHT, root, preload=worker.PRELOAD)
    saved = {name: [r[0] for r in four] for name in four[0][0]}
    saved.update({name: eight for name in eight[0]})
    return saved, [r[1] for r in four]


@pytest.mark.parametrize("strategy", [c.strategy for c in [FSDP, *ON_FOUR, *ON_EIGHT]])
def test_load_restores_every_saved_value(results, strategy):
    saved, _ = results
    worker.assert_restored(saved[strategy], strategy)


def test_items_and_bytes_follow_the_layout(results):
    saved, _ = results
    # tiny Llama: 75 parameters (8 layers x 9 + embed, norm, lm_head), 15 items each.
    assert {r["fsdp"]["items"] for r in saved["fsdp"]} == {75 * 15}
    assert {r["hsdp"]["items"] for r in saved["hsdp"]} == {75 * 15}
    # pp4: 2 layers (18 params) a stage; stage 0 adds the embedding, stage 3 the norm and lm_head.
    assert [r["pp"]["items"] for r in saved["pp"]] == [19 * 15, 18 * 15, 18 * 15, 20 * 15]
    # HSDP keeps twice FSDP's shard per rank (dp_shard 2 instead of 4); replicas read it too.
    fsdp, hsdp = saved["fsdp"][0]["fsdp"]["bytes"], saved["hsdp"][0]["hsdp"]["bytes"]
    steps = 75 * 4  # one float32 step scalar per parameter, on every rank
    assert hsdp - steps == 2 * (fsdp - steps)


def test_fsdp_checkpoint_loads_into_tp_and_pp_layouts(results):
    _, across = results
    worker.assert_loaded_across(across, ["fsdp_tp", "pp"])
