"""state_config_hash: equal for checkpoints that would be byte-identical, else different."""

import pytest

from ckptbench.workloads.models.configs import ModelSpecError
from ckptbench.workloads.parallel.app_state import state_config_hash
from ckptbench.workloads.parallel.strategies import LayoutError
from tests.bench.workloads.fake_ranks import make_case

EP = make_case("olmoe_1b_7b_0924", "ep", 8, dp=8, ep=8)


def _digest(case, *args, **kwargs):
    return state_config_hash(case.model, case.dims, *args, **kwargs)


def test_hash_ignores_what_does_not_change_the_checkpoint():
    digest = _digest(EP, "scaled")
    assert len(digest) == 16 and int(digest, 16) >= 0
    same = make_case("olmoe_1b_7b_0924:scaled", "ep", 8, dp=8, ep=8)
    same.rounds, same.axis, same.bucket_kind = 7, "model", "zonal"
    assert _digest(same) == digest
    assert _digest(same, "scaled") == digest


def test_hash_changes_with_model_scale_layout_and_seed():
    digest = _digest(EP, "scaled")
    others = {
        _digest(EP, "full"),
        _digest(EP, "tiny"),
        _digest(make_case("olmoe_1b_7b_0924", "fsdp", 8, dp=8), "scaled"),
        _digest(make_case("olmoe_1b_7b_0924", "ep", 4, dp=4, ep=4), "scaled"),
        _digest(make_case("llama_3_1_8b", "fsdp", 8, dp=8), "scaled"),
        _digest(EP, "scaled", seed=1),
    }
    assert digest not in others and len(others) == 6
    assert _digest(EP, "scaled", seed=1) == _digest(EP, "scaled", seed=1)


def test_hash_rejects_invalid_cases():
    with pytest.raises(LayoutError, match="expert_parallel_size 4 must equal"):
        _digest(make_case("olmoe_1b_7b_0924", "ep", 8, dp=8, ep=4))
    with pytest.raises(ModelSpecError, match="unknown model scale 'big'"):
        _digest(EP, "big")
