"""Layout-independent seeded values, synthetic AdamW state, checksums and byte counts."""

import hashlib

import pytest
import torch

from ckptbench.workloads.models.builder import build_meta_model
from ckptbench.workloads.models.seeded import fill_normal_, fill_normal_block_
from ckptbench.workloads.models.state import (
    PARAM_STD,
    app_state_dict,
    attach_adamw_state,
    expected_bytes,
    local_checksums,
    materialize,
    synthetic_step,
)


def _filled(shape, seed=1, name="w", std=1.0, dtype=torch.float32):
    return fill_normal_(torch.empty(shape, dtype=dtype), seed, name, std)


def test_values_depend_on_global_index_only():
    full = _filled((37, 11, 5))
    # Any block of the tensor gets the same values as the matching slice of the whole.
    for offset, shape in [
        ((0, 0, 0), (37, 11, 5)),
        ((5, 3, 1), (9, 4, 3)),
        ((36, 10, 4), (1, 1, 1)),
    ]:
        block = torch.empty(shape)
        fill_normal_block_(block, (37, 11, 5), offset, 1, "w", 1.0)
        slices = tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))
        assert torch.equal(block, full[slices])


def test_rows_split_across_chunks_match(monkeypatch):
    import ckptbench.workloads.models.seeded as seeded

    whole = _filled((64, 48))
    monkeypatch.setattr(seeded, "_CHUNK_ELEMENTS", 100)  # forces 2-row chunks
    assert torch.equal(_filled((64, 48)), whole)


def test_seed_and_name_change_values_and_statistics_hold():
    base = _filled((512, 256), std=PARAM_STD, dtype=torch.bfloat16)
    assert torch.equal(base, _filled((512, 256), std=PARAM_STD, dtype=torch.bfloat16))
    assert not torch.equal(base, _filled((512, 256), seed=2, std=PARAM_STD, dtype=torch.bfloat16))
    assert not torch.equal(base, _filled((512, 256), name="v", std=PARAM_STD, dtype=torch.bfloat16))
    values = base.float()
    assert abs(values.mean().item()) < 2e-4
    assert abs(values.std().item() - PARAM_STD) < 4e-4
    assert values.unique().numel() > 1000


def test_block_outside_the_tensor_is_rejected():
    with pytest.raises(ValueError, match="w: block \\(4, 4\\) at \\(2, 0\\) is outside \\(5, 4\\)"):
        fill_normal_block_(torch.empty(4, 4), (5, 4), (2, 0), 1, "w", 1.0)


def test_scalars_and_empty_tensors():
    scalar = _filled(())
    assert scalar.dim() == 0 and torch.isfinite(scalar)
    assert _filled((0, 3)).numel() == 0


def _tiny_state(seed):
    model = materialize(build_meta_model("olmoe_1b_7b_0924:tiny"), "cpu", seed)
    optimizer = attach_adamw_state(model, seed)
    return model, optimizer, app_state_dict(model, optimizer)


def test_training_state_layout_and_values():
    model, optimizer, state = _tiny_state(seed=5)
    params = dict(model.named_parameters())
    assert all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in params.values())
    fqn = "model.layers.1.mlp.experts.15.down_proj.weight"
    assert torch.equal(state["model"][fqn], params[fqn])
    optim = state["optim"]
    assert optim[f"state.{fqn}.step"].item() == synthetic_step(5)
    assert optim[f"state.{fqn}.exp_avg"].dtype == torch.bfloat16
    assert (optim[f"state.{fqn}.exp_avg_sq"] >= 0).all()
    assert optim[f"param_groups.{fqn}.betas"] == (0.9, 0.95)
    # 3 tensors (step, exp_avg, exp_avg_sq) and 11 AdamW param-group entries per parameter.
    assert len(optim) == 14 * len(params)
    assert not any(torch.isnan(p.float()).any() for p in params.values())
    rotary = model.model.rotary_emb.inv_freq
    assert rotary.device.type == "cpu" and torch.isfinite(rotary).all() and rotary[0] == 1.0


def test_checksums_and_expected_bytes():
    _, _, state = _tiny_state(seed=5)
    sums = local_checksums(state)
    leaves = len(state["model"]) + len(state["optim"])
    assert len(sums) == leaves
    weight = state["model"]["lm_head.weight"]
    raw = weight.contiguous().view(torch.uint8).numpy().tobytes()
    assert sums["model.lm_head.weight"] == hashlib.sha256(raw).hexdigest()
    lr_key = "optim.param_groups.lm_head.weight.lr"
    lr = state["optim"]["param_groups.lm_head.weight.lr"]
    assert sums[lr_key] == hashlib.sha256(repr(lr).encode()).hexdigest()
    params = sum(p.numel() for p in state["model"].values())
    # bf16 params + bf16 exp_avg + bf16 exp_avg_sq, plus one float32 step per parameter tensor.
    assert expected_bytes(state) == 3 * 2 * params + 4 * len(state["model"])
    _, _, same = _tiny_state(seed=5)
    _, _, other = _tiny_state(seed=6)
    assert local_checksums(same) == sums
    other_sums = local_checksums(other)
    assert all(other_sums[k] != sums[k] for k in sums if not k.endswith(_SEED_FREE))


# Param-group entries that do not depend on the seed (only lr and step do).
_SEED_FREE = (
    "betas",
    "eps",
    "weight_decay",
    "amsgrad",
    "maximize",
    "foreach",
    "capturable",
    "differentiable",
    "fused",
    "decoupled_weight_decay",
)
