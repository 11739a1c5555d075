"""The model a training-benchmark rank trains: OLMoE at a scale, in the ep or fsdp layout.

Built like every benchmark case's state (``workloads.parallel.app_state.build_rank_state``: meta
model, layout, seeded parameters and AdamW state), then trained for real. Under ep each rank
keeps a slice of whole experts (``workloads.parallel.ep``) and its MoE blocks route the rank's own
tokens to its own experts only (tokens routed elsewhere are dropped: there is no all-to-all
dispatch, which changes the compute, not what a checkpoint holds). Batches are a function of
(step, rank), so every arm trains the same values.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ckptbench.workloads.models.builder import decoder_layers
from ckptbench.workloads.models.configs import config_dict
from ckptbench.workloads.parallel.app_state import RankState, build_rank_state
from ckptbench.workloads.parallel.dims import ParallelDims

MODEL = "olmoe_1b_7b_0924"
# "small" (the default, sized for 2 cores): the scaled OLMoE's widths (hidden 512, 16 heads,
# experts of 256) with 2 layers of 16 experts (top-2) and an 8k vocabulary: ~69 MB of state
# (bf16 parameters and AdamW moments) per rank on 2 ranks. "scaled" is the main job's model.
SCALES: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": ("tiny", {}),
    "small": (
        "scaled",
        {"num_hidden_layers": 2, "num_experts": 16, "num_experts_per_tok": 2, "vocab_size": 8192},
    ),
    "scaled": ("scaled", {}),
}
LEARNING_RATE = 1e-4  # the seeded AdamW's own lr is up to 0.1 (a synthetic value)
LAYOUTS = ("ep", "fsdp")
BATCH = 2  # sequences per rank and step
SEQUENCE = 64  # tokens per sequence


def model_config(scale: str) -> dict[str, Any]:
    """The OLMoE config dict of a training scale (``SCALES``).

    Raises:
      ValueError: an unknown scale.
    """
    if scale not in SCALES:
        raise ValueError(f"training scale {scale!r} is unknown; known: {', '.join(SCALES)}")
    base, overrides = SCALES[scale]
    config = config_dict(f"{MODEL}:{base}")
    config.update(overrides)
    return config


def layout_dims(layout: str, world_size: int) -> ParallelDims:
    """The ParallelDims of ``layout`` (``ep``: dp_shard = ep = world; ``fsdp``: dp_shard = world).

    Raises:
      ValueError: an unknown layout. LayoutError: sizes that do not fit.
    """
    if layout == "ep":
        return ParallelDims("ep", world_size, dp_shard=world_size, ep=world_size)
    if layout == "fsdp":
        return ParallelDims("fsdp", world_size, dp_shard=world_size)
    raise ValueError(f"layout {layout!r} is unknown; known: {', '.join(LAYOUTS)}")


def _local_experts_forward(self: nn.Module, hidden_states: torch.Tensor):
    """OlmoeSparseMoeBlock.forward over the experts this rank kept (a ModuleDict by index)."""
    batch, sequence, hidden = hidden_states.shape
    tokens = hidden_states.view(-1, hidden)
    router_logits = self.gate(tokens)
    weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(weights, self.top_k, dim=-1)
    if self.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(tokens.dtype)
    out = torch.zeros_like(tokens)
    for key, expert in self.experts.items():
        token, slot = torch.where(chosen == int(key))
        if token.numel():
            out.index_add_(0, token, expert(tokens[token]) * weights[token, slot, None])
    return out.view(batch, sequence, hidden), router_logits


def build_trainer(config: dict[str, Any], dims: ParallelDims, mesh: Any, seed: int) -> RankState:
    """This rank's model, AdamW and state dict on CPU (seeded values, the layout applied); under
    ep its MoE blocks run over the local experts only."""
    state = build_rank_state(config, dims, mesh, seed=seed, device="cpu")
    for group in state.optimizer.param_groups:
        group["lr"] = LEARNING_RATE
    if dims.strategy == "ep":
        for layer in decoder_layers(state.model):
            if isinstance(layer.mlp.experts, nn.ModuleDict):
                layer.mlp.forward = types.MethodType(_local_experts_forward, layer.mlp)
    return state


def train_step(state: RankState, step: int, rank: int, vocab_size: int) -> float:
    """One optimizer step on the batch of (step, rank); parameters and AdamW moments change in
    place. Returns this rank's loss."""
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    tokens = torch.randint(vocab_size, (BATCH, SEQUENCE), generator=generator)
    loss = state.model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())
