"""Model specs, shipped configs, scaled/tiny variants and meta-device builds."""

import functools
import json

import pytest
import torch

from ckptbench.workloads.models.builder import build_meta_model, count_parameters, decoder_layers
from ckptbench.workloads.models.configs import (
    ModelSpecError,
    config_dict,
    is_moe,
    parse_model_spec,
    with_scale,
)

# A full model on meta takes seconds to build; the tests only read it.
_full_model = functools.cache(build_meta_model)


@pytest.mark.parametrize(
    ("spec", "target"),
    [("olmoe_1b_7b_0924", 6.9e9), ("llama_3_1_8b", 8.0e9)],
)
def test_full_configs_have_published_parameter_counts(spec, target):
    model = _full_model(spec)
    count = count_parameters(model)
    assert abs(count - target) / target < 0.01, count
    params = list(model.parameters())
    assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in params)


def test_full_olmoe_keeps_one_module_per_expert():
    model = _full_model("olmoe_1b_7b_0924")
    layers = decoder_layers(model)
    assert len(layers) == 16
    experts = layers[0].mlp.experts
    assert isinstance(experts, torch.nn.ModuleList) and len(experts) == 64
    names = dict(model.named_parameters())
    assert tuple(names["model.layers.15.mlp.experts.63.gate_proj.weight"].shape) == (1024, 2048)
    assert tuple(names["model.embed_tokens.weight"].shape) == (50304, 2048)


def test_scaled_olmoe_matches_the_design_bar():
    config = config_dict("olmoe_1b_7b_0924:scaled")
    expected = {
        "hidden_size": 512,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "vocab_size": 50304,
    }
    assert {k: config[k] for k in expected} == expected
    # embed + lm_head 2*50304*512, per layer 4*512^2 attention + 2*512 qk-norm + 64*512 router
    # + 64*3*512*256 experts + 2*512 norms, final norm 512.
    per_layer = 4 * 512 * 512 + 2 * 512 + 64 * 512 + 64 * 3 * 512 * 256 + 2 * 512
    assert count_parameters(build_meta_model("olmoe_1b_7b_0924:scaled")) == (
        2 * 50304 * 512 + 4 * per_layer + 512
    )


def test_scaled_llama_keeps_gqa_and_splits_into_eight_stages():
    full, scaled = config_dict("llama_3_1_8b"), config_dict("llama_3_1_8b:scaled")
    ratio = full["num_attention_heads"] // full["num_key_value_heads"]
    assert scaled["num_attention_heads"] // scaled["num_key_value_heads"] == ratio == 4
    assert scaled["num_hidden_layers"] % 8 == 0
    assert scaled["vocab_size"] == full["vocab_size"] == 128256
    assert not is_moe(scaled) and is_moe(config_dict("olmoe_1b_7b_0924:scaled"))


def test_spec_parsing_and_errors(tmp_path):
    assert parse_model_spec("olmoe_1b_7b_0924").scale == "full"
    spec = parse_model_spec("llama_3_1_8b:tiny")
    assert (spec.key, spec.scale, spec.text) == ("llama_3_1_8b", "tiny", "llama_3_1_8b:tiny")
    with pytest.raises(ModelSpecError, match="not shipped"):
        parse_model_spec("gpt2")
    with pytest.raises(ModelSpecError, match="unknown scale 'huge'"):
        parse_model_spec("llama_3_1_8b:huge")
    assert with_scale("olmoe_1b_7b_0924", "scaled") == "olmoe_1b_7b_0924:scaled"
    assert with_scale("olmoe_1b_7b_0924:tiny", "full") == "olmoe_1b_7b_0924"
    with pytest.raises(ModelSpecError, match="no 'tiny' variant"):
        with_scale(str(tmp_path / "m" / "config.json"), "tiny")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ModelSpecError, match="no 'model_type'"):
        config_dict(str(bad))
    with pytest.raises(ModelSpecError, match="cannot read config"):
        config_dict(str(tmp_path / "missing.json"))


def test_custom_config_from_a_json_file(tmp_path):
    folder = tmp_path / "My-OLMoE"
    folder.mkdir()
    config = dict(config_dict("olmoe_1b_7b_0924:tiny"), num_hidden_layers=3)
    (folder / "config.json").write_text(json.dumps(config))
    spec = parse_model_spec(str(folder / "config.json"))
    assert (spec.key, spec.scale) == ("my_olmoe", "custom")
    model = build_meta_model(spec)
    assert len(decoder_layers(model)) == 3


def test_custom_config_from_gcs(monkeypatch):
    from gcsckpt.testing import LocalGCS

    with LocalGCS() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
        client = gcs.storage_client(project="local")
        bucket = client.create_bucket("configs")
        config = dict(config_dict("llama_3_1_8b:tiny"), num_hidden_layers=2)
        bucket.blob("llama_small/config.json").upload_from_string(json.dumps(config))
        spec = parse_model_spec("gs://configs/llama_small/config.json")
        assert spec.key == "llama_small"
        assert config_dict(spec)["num_hidden_layers"] == 2
        assert len(decoder_layers(build_meta_model(spec))) == 2
        with pytest.raises(ModelSpecError, match="gs://configs/absent.json"):
            config_dict("gs://configs/absent.json")
