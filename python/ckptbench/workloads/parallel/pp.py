"""Pipeline parallelism as a state-dict layout: a stage keeps only its layers, FQNs unchanged."""

from __future__ import annotations

from torch import nn

from ckptbench.workloads.models.builder import decoder_layers


def stage_layers(num_layers: int, stage: int, num_stages: int) -> range:
    """The decoder-layer indices of ``stage``: an even, contiguous split.

    Raises:
      ValueError: stage out of range, or ``num_layers`` not divisible by ``num_stages``.
    """
    if num_stages < 1 or not 0 <= stage < num_stages:
        raise ValueError(f"pipeline stage {stage} is outside [0, {num_stages})")
    if num_layers % num_stages:
        raise ValueError(
            f"{num_layers} decoder layers do not split evenly into {num_stages} pipeline stages"
        )
    per = num_layers // num_stages
    return range(stage * per, (stage + 1) * per)


def split_pipeline_stage(model: nn.Module, stage: int, num_stages: int) -> range:
    """Keeps ``stage``'s part of a causal LM in place; returns its layer indices.

    ``model.layers`` becomes a ``ModuleDict`` keyed by original index, so FQNs stay
    ``model.layers.<L>...``. Only stage 0 keeps ``model.embed_tokens``; only the last stage
    keeps ``model.norm`` and ``lm_head``.

    Raises:
      ValueError: uneven split or bad stage (see :func:`stage_layers`); tied input and output
        embeddings (they would live on two stages).
    """
    config = getattr(model, "config", None)
    head, embed = getattr(model, "lm_head", None), getattr(model.model, "embed_tokens", None)
    tied = getattr(config, "tie_word_embeddings", False) or (
        head is not None and embed is not None and head.weight is embed.weight
    )
    if tied:
        raise ValueError("tied input/output embeddings cannot be split across pipeline stages")
    layers = decoder_layers(model)
    keep = stage_layers(len(layers), stage, num_stages)
    model.model.layers = nn.ModuleDict({str(i): layers[i] for i in keep})
    if stage != 0:
        model.model.embed_tokens = None
    if stage != num_stages - 1:
        model.model.norm = None
        model.lm_head = None
    return keep
