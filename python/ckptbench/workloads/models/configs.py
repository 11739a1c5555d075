"""Model specs and their configs: shipped full configs, scaled and tiny variants, custom files.

A model spec is text: ``<key>[:<scale>]`` for a shipped model (``olmoe_1b_7b_0924:scaled``), or a
``config.json`` path or ``gs://bucket/object`` URI for any other OLMoE/Llama-family config. The
shipped full configs are the published ``config.json`` files of allenai/OLMoE-1B-7B-0924 and
meta-llama/Llama-3.1-8B (Hugging Face hub), kept in ``configs/`` so nothing is downloaded.
This module imports no torch; ``to_hf_config`` imports transformers lazily.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIPPED_MODELS = ("olmoe_1b_7b_0924", "llama_3_1_8b")
SCALES = ("full", "scaled", "tiny")
_CONFIG_DIR = Path(__file__).parent / "configs"  # runfiles keep data next to the module

# Field overrides on top of the full config. "scaled" keeps each model's structure and fits this
# machine: OLMoE as in docs/design.md "The bar" (hidden 512, 64 experts, top-8, 16 heads);
# Llama keeps GQA 32:8 and the 3.5x MLP ratio, with 8 layers so pp8 splits evenly. "tiny" is
# for tests (8 gloo ranks in seconds) and keeps every dimension divisible by 8 so all catalogue
# layouts apply.
_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("olmoe_1b_7b_0924", "scaled"): {
        "hidden_size": 512,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
    },
    ("olmoe_1b_7b_0924", "tiny"): {
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "vocab_size": 512,
        "max_position_embeddings": 256,
    },
    ("llama_3_1_8b", "scaled"): {
        "hidden_size": 512,
        "intermediate_size": 1792,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    ("llama_3_1_8b", "tiny"): {
        "hidden_size": 64,
        "intermediate_size": 224,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "vocab_size": 512,
    },
}


class ModelSpecError(ValueError):
    """A model spec names no shipped model, an unknown scale, or an unreadable config."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec.

    Attributes:
      key: shipped model key (``olmoe_1b_7b_0924``) or, for a custom config, a slug derived
        from the config's folder name; used in case names.
      scale: ``full``, ``scaled`` or ``tiny`` for shipped models; ``custom`` for a config file.
      source: the ``config.json`` path or ``gs://`` URI of a custom config, else ``None``.
    """

    key: str
    scale: str
    source: str | None = None

    @property
    def text(self) -> str:
        """The spec as text: ``key:scale`` (``key`` alone for full) or the custom source."""
        if self.source is not None:
            return self.source
        return self.key if self.scale == "full" else f"{self.key}:{self.scale}"


def _is_custom(text: str) -> bool:
    return text.startswith("gs://") or text.endswith(".json")


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return slug or "custom"


def parse_model_spec(text: str) -> ModelSpec:
    """Parses ``<key>[:<scale>]``, a ``config.json`` path or a ``gs://`` URI.

    Raises:
      ModelSpecError: unknown model key or scale (the message lists the known ones).
    """
    if not isinstance(text, str) or not text:
        raise ModelSpecError(f"model spec must be a non-empty string, got {text!r}")
    if _is_custom(text):
        parts = text.rstrip("/").split("/")
        in_folder = parts[-1] == "config.json" and len(parts) >= 2
        named = parts[-2] if in_folder else Path(parts[-1]).stem
        return ModelSpec(key=_slug(named), scale="custom", source=text)
    key, _, scale = text.partition(":")
    scale = scale or "full"
    if key not in SHIPPED_MODELS:
        raise ModelSpecError(f"model {key!r} is not shipped; known: {', '.join(SHIPPED_MODELS)}")
    if scale not in SCALES:
        raise ModelSpecError(f"model {text!r}: unknown scale {scale!r}; known: {', '.join(SCALES)}")
    return ModelSpec(key=key, scale=scale)


def with_scale(text: str, scale: str) -> str:
    """Returns the spec text with its scale replaced (``olmoe_1b_7b_0924`` -> ``...:scaled``).

    Raises:
      ModelSpecError: unknown scale, or a custom config asked for a scale other than ``full``.
    """
    spec = parse_model_spec(text)
    if scale not in SCALES:
        raise ModelSpecError(f"unknown model scale {scale!r}; known: {', '.join(SCALES)}")
    if spec.source is not None:
        if scale != "full":
            raise ModelSpecError(f"model {text!r} is a custom config; it has no {scale!r} variant")
        return text
    return ModelSpec(spec.key, scale).text


def _read_gcs_json(uri: str) -> dict[str, Any]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket or not name:
        raise ModelSpecError(f"config URI {uri!r} must look like gs://bucket/object")
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        client = storage.Client(project="local", credentials=AnonymousCredentials())
    else:
        client = storage.Client()
    try:
        data = client.bucket(bucket).blob(name).download_as_bytes()
    except Exception as err:  # any client failure is reported with the object's name
        raise ModelSpecError(f"cannot read config gs://{bucket}/{name}: {err}") from err
    return json.loads(data)


def config_dict(spec: ModelSpec | str) -> dict[str, Any]:
    """The model's config as a plain JSON-like dict (the full config plus the scale's overrides).

    Raises:
      ModelSpecError: a custom config cannot be read, is not JSON, or has no ``model_type``.
    """
    spec = parse_model_spec(spec) if isinstance(spec, str) else spec
    if spec.source is None:
        config = json.loads((_CONFIG_DIR / f"{spec.key}.json").read_text())
        config.update(copy.deepcopy(_OVERRIDES.get((spec.key, spec.scale), {})))
        return config
    try:
        if spec.source.startswith("gs://"):
            config = _read_gcs_json(spec.source)
        else:
            config = json.loads(Path(spec.source).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelSpecError(f"cannot read config {spec.source!r}: {err}") from err
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelSpecError(f"config {spec.source!r} has no 'model_type'")
    return config


def is_moe(config: dict[str, Any]) -> bool:
    """True for configs with routed experts (``num_experts`` > 1), e.g. OLMoE."""
    return int(config.get("num_experts") or 0) > 1


def to_hf_config(config: dict[str, Any]):
    """Builds the transformers ``PretrainedConfig`` for a config dict (bf16, eager attention).

    Raises:
      ModelSpecError: the ``model_type`` is unknown to transformers.
    """
    from transformers import AutoConfig

    fields = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    try:
        hf = AutoConfig.for_model(config["model_type"], **fields)
    except (KeyError, ValueError) as err:
        raise ModelSpecError(f"unsupported model_type {config.get('model_type')!r}: {err}") from err
    hf.torch_dtype = "bfloat16"
    hf._attn_implementation = "eager"
    return hf
