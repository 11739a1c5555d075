"""Builds transformers causal-LM models on the ``meta`` device in bf16 (no storage allocated)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ckptbench.workloads.models.configs import (
    ModelSpec,
    config_dict,
    parse_model_spec,
    to_hf_config,
)


def build_meta_model(model: ModelSpec | str | dict[str, Any]) -> nn.Module:
    """Returns the model for a spec (or a config dict) with every parameter on ``meta``, bf16.

    The structure is transformers 4.46.3's (``OlmoeForCausalLM``: one ``OlmoeMLP`` module per
    expert under ``model.layers.<L>.mlp.experts.<i>``; ``LlamaForCausalLM``), so parameter FQNs are
    the published checkpoint names. Materialize with ``models.state.materialize``.

    transformers' weight initialisation is skipped (``no_init_weights``): on ``meta`` it stores
    nothing, and ``materialize`` fills every parameter, yet it costs CPU time (torch's
    meta-tensor ``normal_`` path, slowest on its first run in a process), paid again by every
    fresh rank process of the benchmark.

    Raises:
      ModelSpecError: unknown spec or unreadable config.
    """
    from transformers import AutoModelForCausalLM
    from transformers.modeling_utils import no_init_weights

    if isinstance(model, dict):
        config = model
    else:
        config = config_dict(parse_model_spec(model) if isinstance(model, str) else model)
    hf_config = to_hf_config(config)
    with torch.device("meta"), no_init_weights():
        built = AutoModelForCausalLM.from_config(
            hf_config, torch_dtype=torch.bfloat16, attn_implementation="eager"
        )
    return built


def decoder_layers(model: nn.Module) -> nn.ModuleList | nn.ModuleDict:
    """The container of decoder layers (``model.model.layers``) of a causal LM.

    Raises:
      TypeError: the model has no ``model.layers`` container.
    """
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList | nn.ModuleDict):
        raise TypeError(f"{type(model).__name__} has no model.layers container of decoder layers")
    return layers


def count_parameters(model: nn.Module) -> int:
    """Number of parameter elements (global shapes for DTensors; works on ``meta``)."""
    return sum(p.numel() for p in model.parameters())
