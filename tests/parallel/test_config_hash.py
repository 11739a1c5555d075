"""case_config_hash: equal for checkpoints that would be byte-identical, else different."""

import pytest

from gcsckpt.models.configs import ModelSpecError
from gcsckpt.parallel.app_state import case_config_hash
from gcsckpt.parallel.strategies import LayoutError
from tests.parallel.fake_ranks import make_case

EP = make_case("olmoe_1b_7b_0924", "ep", 8, dp=8, ep=8)


def test_hash_ignores_what_does_not_change_the_checkpoint():
    digest = case_config_hash(EP, "scaled")
    assert len(digest) == 16 and int(digest, 16) >= 0
    same = make_case("olmoe_1b_7b_0924:scaled", "ep", 8, dp=8, ep=8)
    same.rounds, same.axis, same.bucket_kind = 7, "model", "zonal"
    assert case_config_hash(same) == digest
    assert case_config_hash(same, "scaled") == digest


def test_hash_changes_with_model_scale_layout_and_seed():
    digest = case_config_hash(EP, "scaled")
    others = {
        case_config_hash(EP, "full"),
        case_config_hash(EP, "tiny"),
        case_config_hash(make_case("olmoe_1b_7b_0924", "fsdp", 8, dp=8), "scaled"),
        case_config_hash(make_case("olmoe_1b_7b_0924", "ep", 4, dp=4, ep=4), "scaled"),
        case_config_hash(make_case("llama_3_1_8b", "fsdp", 8, dp=8), "scaled"),
        case_config_hash(EP, "scaled", seed=1),
    }
    assert digest not in others and len(others) == 6
    assert case_config_hash(EP, "scaled", seed=1) == case_config_hash(EP, "scaled", seed=1)


def test_hash_rejects_invalid_cases():
    with pytest.raises(LayoutError, match="expert_parallel_size 4 must equal"):
        case_config_hash(make_case("olmoe_1b_7b_0924", "ep", 8, dp=8, ep=4))
    with pytest.raises(ModelSpecError, match="unknown model scale 'big'"):
        case_config_hash(EP, "big")
