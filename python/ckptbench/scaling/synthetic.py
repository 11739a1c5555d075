"""A 70B-shaped DCP checkpoint at N simulated ranks, without its bytes: the ``Metadata`` its
``.metadata`` would hold and one rank's state dict to plan a load into.

The model is Llama-3-70B's parameter list (80 decoder layers of q/k/v/o, gate/up/down and two
RMSNorms; embedding, final norm and lm_head: 723 parameters) trained with AdamW under FSDP2:
each parameter and its two moments is a DTensor sharded ``Shard(0)`` over N ranks (2,169 tensors,
one chunk per rank that holds rows), each parameter's ``step`` a 0-dim tensor (723, one chunk),
and the flattened ``param_groups`` one BYTE_IO entry per parameter and key (12 keys: 8,676). The
storage entries are then ``sum(chunks) + 723 + 8,676`` (~2,892 tensors; ~2.2 million entries at
1,024 ranks).

The rank's DTensors live on a fake process group (``torch.testing``'s ``fake`` backend: no
peers, no communication) and their local shards are zero-stride views of one scalar, so a rank's
state costs no memory whatever the model's size. Planning never reads tensor data.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.tensor import DTensor, Shard, init_device_mesh

PARAM_GROUP_KEYS = (
    "lr", "betas", "eps", "weight_decay", "amsgrad", "foreach",
    "maximize", "capturable", "differentiable", "fused", "initial_lr", "params",
)  # fmt: skip
_MOMENTS = ("exp_avg", "exp_avg_sq")
_ARCHIVE_OVERHEAD = 1_100  # bytes of a torch.save archive around its tensor data (about)


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """A Llama-style decoder's dimensions (bf16 parameters, fp32 moments don't matter: sizes
    only). ``LLAMA_70B`` is Llama-3-70B's."""

    layers: int = 80
    hidden: int = 8192
    intermediate: int = 28672
    kv: int = 1024  # key/value heads x head dim
    vocab: int = 128256

    def parameters(self) -> list[tuple[str, tuple[int, ...]]]:
        """(FQN, shape) of every parameter, in the model's order."""
        h, f, kv = self.hidden, self.intermediate, self.kv
        params = [("model.embed_tokens.weight", (self.vocab, h))]
        for i in range(self.layers):
            p = f"model.layers.{i}."
            params += [
                (p + "self_attn.q_proj.weight", (h, h)),
                (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, h)),
                (p + "mlp.gate_proj.weight", (f, h)),
                (p + "mlp.up_proj.weight", (f, h)),
                (p + "mlp.down_proj.weight", (h, f)),
                (p + "input_layernorm.weight", (h,)),
                (p + "post_attention_layernorm.weight", (h,)),
            ]
        return params + [("model.norm.weight", (h,)), ("lm_head.weight", (self.vocab, h))]


LLAMA_70B = ModelShape()


def _row_chunks(rows: int, ranks: int) -> list[tuple[int, int]]:
    """(first row, row count) of each rank's non-empty Shard(0) piece (torch.chunk's split)."""
    size = math.ceil(rows / ranks)
    return [(start, min(size, rows - start)) for start in range(0, rows, size)]


def _tensors(shape: ModelShape) -> list[tuple[str, tuple[int, ...], bool]]:
    """(FQN, global shape, sharded) of every tensor of the model + AdamW state dict."""
    out = []
    for fqn, size in shape.parameters():
        out.append((f"model.{fqn}", size, True))
        out += [(f"optim.state.{fqn}.{m}", size, True) for m in _MOMENTS]
        out.append((f"optim.state.{fqn}.step", (), False))
    return out


def expected_entries(shape: ModelShape, ranks: int) -> int:
    """Storage entries the Metadata of ``synthetic_metadata(shape, ranks)`` holds."""
    total = 0
    for _, size, sharded in _tensors(shape):
        total += len(_row_chunks(size[0], ranks)) if sharded else 1
    return total + len(shape.parameters()) * len(PARAM_GROUP_KEYS)


def synthetic_metadata(shape: ModelShape, ranks: int) -> Metadata:
    """The Metadata a ``ranks``-rank FSDP save of ``shape`` with AdamW would write (TORCH_SAVE
    layout: rank r's chunks in ``__r_0.distcp`` one after another; lengths as bf16 data plus
    an archive's framing).

    Raises:
      ValueError: ``ranks`` < 1.
    """
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    props = TensorProperties(dtype=torch.bfloat16)
    state: dict = {}
    storage: dict = {}
    cursor = [0] * ranks  # next byte offset in each rank's file
    for fqn, size, sharded in _tensors(shape):
        chunks = []
        pieces = _row_chunks(size[0], ranks) if sharded else [(0, 0)]
        for rank, (start, rows) in enumerate(pieces):
            offsets = torch.Size((start,) + (0,) * (len(size) - 1)) if size else torch.Size()
            sizes = torch.Size((rows,) + size[1:]) if size else torch.Size()
            chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=sizes))
            length = 2 * math.prod(sizes) + _ARCHIVE_OVERHEAD
            index = MetadataIndex(fqn, offsets, len(chunks) - 1)
            storage[index] = _StorageInfo(f"__{rank}_0.distcp", cursor[rank], length)
            cursor[rank] += length
        state[fqn] = TensorStorageMetadata(props, torch.Size(size), chunks)
    for fqn, _ in shape.parameters():
        for key in PARAM_GROUP_KEYS:
            name = f"optim.param_groups.{fqn}.{key}"
            state[name] = BytesStorageMetadata()
            storage[MetadataIndex(name)] = _StorageInfo("__0_0.distcp", cursor[0], 700)
            cursor[0] += 700
    return Metadata(state_dict_metadata=state, storage_data=storage)


def join_fake_world(rank: int, ranks: int) -> None:
    """Joins a fake process group of ``ranks`` ranks as ``rank`` (leaves any earlier one)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=ranks)


def rank_state_dict(shape: ModelShape, rank: int, ranks: int) -> dict:
    """Rank ``rank``'s flattened state dict (after ``join_fake_world(rank, ranks)``): DTensors
    over a 1-D mesh of ``ranks`` with zero-stride local shards, 0-dim ``step`` tensors and
    ``param_groups`` values (floats; tuples for betas)."""
    mesh = init_device_mesh("cpu", (ranks,))
    scalar = torch.zeros((), dtype=torch.bfloat16)
    out: dict = {}
    for fqn, size, sharded in _tensors(shape):
        if not sharded:
            out[fqn] = torch.zeros(())
            continue
        pieces = _row_chunks(size[0], ranks)
        rows = pieces[rank][1] if rank < len(pieces) else 0
        local = scalar.expand((rows,) + size[1:])
        stride = torch.empty(size, device="meta").stride()
        out[fqn] = DTensor.from_local(
            local, mesh, [Shard(0)], run_check=False, shape=torch.Size(size), stride=stride
        )
    for fqn, _ in shape.parameters():
        for key in PARAM_GROUP_KEYS:
            out[f"optim.param_groups.{fqn}.{key}"] = (0.9, 0.95) if key == "betas" else 1e-4
    return out
