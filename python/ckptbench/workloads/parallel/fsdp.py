"""FSDP2 / HSDP: ``fully_shard`` per decoder layer, then the root, over the data-parallel mesh."""

from __future__ import annotations

from collections.abc import Collection

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from ckptbench.workloads.models.builder import decoder_layers


def apply_fsdp(
    model: nn.Module, dp_mesh: DeviceMesh, ignored: Collection[nn.Parameter] = ()
) -> nn.Module:
    """Shards ``model`` in place: one FSDP group per decoder layer plus the root group.

    A 1-D ``dp_mesh`` (``dp_shard``) gives ``Shard(0)`` DTensors (FSDP); a 2-D one
    (``dp_replicate``, ``dp_shard``) gives ``(Replicate(), Shard(0))`` (HSDP). Parameters
    already TP-sharded become 2-D+ DTensors (strided shard on dim 0 when TP also shards it).
    ``ignored`` parameters (EP's local experts) stay plain tensors on every rank.
    Works on ``meta`` models; materialize afterwards.
    """
    ignored_set = set(ignored)
    layers = decoder_layers(model)
    for layer in layers.values() if isinstance(layers, nn.ModuleDict) else layers:
        mine = {p for p in layer.parameters() if p in ignored_set}
        fully_shard(layer, mesh=dp_mesh, ignored_params=mine or None)
    fully_shard(model, mesh=dp_mesh, ignored_params=ignored_set or None)
    return model
