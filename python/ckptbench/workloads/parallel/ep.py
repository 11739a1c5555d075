"""Expert parallelism on OLMoE: each rank keeps a contiguous slice of whole experts."""

from __future__ import annotations

from torch import nn

from ckptbench.workloads.models.builder import decoder_layers


def expert_slice(num_experts: int, ep_rank: int, ep_size: int) -> range:
    """Experts ``[r*E/R, (r+1)*E/R)`` of EP rank r.

    Raises:
      ValueError: rank out of range, or ``num_experts`` not divisible by ``ep_size``.
    """
    if ep_size < 1 or not 0 <= ep_rank < ep_size:
        raise ValueError(f"expert-parallel rank {ep_rank} is outside [0, {ep_size})")
    if num_experts % ep_size:
        raise ValueError(f"{num_experts} experts do not split evenly over {ep_size} EP ranks")
    per = num_experts // ep_size
    return range(ep_rank * per, (ep_rank + 1) * per)


def keep_local_experts(model: nn.Module, ep_rank: int, ep_size: int) -> list[nn.Parameter]:
    """Drops all but this rank's experts in every layer; returns the kept experts' parameters.

    Each layer's ``mlp.experts`` (a ``ModuleList``, transformers 4.46.3) becomes a ``ModuleDict``
    keyed by original expert index, so FQNs stay ``model.layers.<L>.mlp.experts.<i>...``. Pass
    the returned parameters as FSDP ``ignored_params`` so they stay whole, plain tensors.

    Raises:
      ValueError: the model has no routed experts (not an MoE model) or the split is uneven.
    """
    kept: list[nn.Parameter] = []
    layers = decoder_layers(model)
    for index, layer in layers.items() if isinstance(layers, nn.ModuleDict) else enumerate(layers):
        experts = getattr(getattr(layer, "mlp", None), "experts", None)
        if not isinstance(experts, nn.ModuleList):
            raise ValueError(
                f"layer {index} of {type(model).__name__} has no mlp.experts list; "
                "ep needs an MoE model such as OLMoE"
            )
        local = expert_slice(len(experts), ep_rank, ep_size)
        layer.mlp.experts = nn.ModuleDict({str(i): experts[i] for i in local})
        kept.extend(layer.mlp.experts.parameters())
    return kept
