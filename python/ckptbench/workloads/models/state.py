"""Seeded model and synthetic AdamW state on a rank's shards; the DCP state dict; checksums.

A training checkpoint holds the bf16 parameters plus AdamW's ``exp_avg`` and ``exp_avg_sq``
(here bf16 too) and a ``step`` per parameter: about 3x the parameter bytes. Values come from
``ckptbench.workloads.models.seeded`` so they depend on (seed, FQN, global index) only, never
on the layout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.tensor import DTensor

from ckptbench.workloads.models.seeded import fill_normal_, local_extent, name_key

PARAM_STD = 0.02  # transformers' initializer_range for both models
EXP_AVG_STD = 1e-3  # first moments; second moments are squares of N(0, EXP_AVG_STD^2)


def _reset_rotary_buffers(model: nn.Module, device: torch.device) -> None:
    """Recomputes rotary ``inv_freq`` buffers, which ``to_empty`` leaves uninitialized.

    They are non-persistent (not in the state dict), but a usable model needs them.
    """
    for module in model.modules():
        init = getattr(module, "rope_init_fn", None)
        if init is not None and hasattr(module, "inv_freq"):
            inv_freq, _ = init(module.config, device, **module.rope_kwargs)
            module.register_buffer("inv_freq", inv_freq, persistent=False)
            module.original_inv_freq = module.inv_freq


def materialize(
    model: nn.Module, device: torch.device | str, seed: int | None, generator=None
) -> nn.Module:
    """Allocates a ``meta`` model's (already sharded) parameters on ``device`` and fills them.

    Only this rank's shards are allocated (``to_empty``), each parameter filled with
    N(0, 0.02^2) keyed by (seed, FQN), so values are identical under any layout. ``seed=None``:
    each local shard filled by ``torch.Tensor.normal_`` from ``generator`` instead, as a
    training job initializes a model its checkpoint then replaces (about a quarter of the CPU
    time; values depend on the layout).

    Returns: ``model``, in place.
    """
    device = torch.device(device)
    model.to_empty(device=device)
    for fqn, param in model.named_parameters():
        if seed is None:
            with torch.no_grad():
                _local_tensor(param).normal_(0.0, PARAM_STD, generator=generator)
        else:
            fill_normal_(param, seed, fqn, PARAM_STD)
    _reset_rotary_buffers(model, device)
    return model


def synthetic_step(seed: int) -> float:
    """The AdamW ``step`` for a seed: an integer in [1, 100000] as float (same for all params)."""
    return float(1 + int.from_bytes(hashlib.sha256(f"step:{seed}".encode()).digest()[:4]) % 100000)


def synthetic_lr(seed: int) -> float:
    """A seed-dependent learning rate, so BYTE_IO ``param_groups`` entries vary with the seed."""
    return 1e-4 * (1 + name_key(seed, "lr")[0] % 1000)


@torch.no_grad()
def attach_adamw_state(model: nn.Module, seed: int) -> torch.optim.AdamW:
    """An AdamW over ``model``'s parameters whose state is filled as if it had trained.

    Per parameter: ``step`` (float32 scalar, :func:`synthetic_step`), ``exp_avg`` (param's dtype
    and layout, N(0, 1e-3^2) keyed by FQN + ".exp_avg") and ``exp_avg_sq`` (squares of values
    keyed by FQN + ".exp_avg_sq"). Parameters must already be materialized.
    """
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [p for _, p in named], lr=synthetic_lr(seed), betas=(0.9, 0.95), weight_decay=0.1
    )
    step = synthetic_step(seed)
    for fqn, param in named:
        exp_avg = fill_normal_(torch.empty_like(param), seed, f"{fqn}.exp_avg", EXP_AVG_STD)
        exp_avg_sq = fill_normal_(torch.empty_like(param), seed, f"{fqn}.exp_avg_sq", EXP_AVG_STD)
        local_extent(exp_avg_sq)[0].square_()
        optimizer.state[param] = {
            "step": torch.tensor(step, dtype=torch.float32),
            "exp_avg": exp_avg,
            "exp_avg_sq": exp_avg_sq,
        }
    return optimizer


def app_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}`` for ``dcp.save`` / ``dcp.load``.

    The optimizer part is flattened (``StateDictOptions(flatten_optimizer_state_dict=True)``):
    keys ``state.<FQN>.<exp_avg|exp_avg_sq|step>`` and ``param_groups.<FQN>.<lr|betas|...>``; the
    latter are non-tensors, which DCP saves as BYTE_IO items.
    """
    options = StateDictOptions(flatten_optimizer_state_dict=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    return {"model": model_sd, "optim": optim_sd}


def iter_leaves(state_dict: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yields (key path joined with ".", value) for every non-Mapping leaf, in insertion order."""
    for key, value in state_dict.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from iter_leaves(value, f"{path}.")
        else:
            yield path, value


def _local_tensor(value: torch.Tensor) -> torch.Tensor:
    return value.to_local() if isinstance(value, DTensor) else value


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw bytes of a (local) tensor in C order, copied to CPU; dtype-agnostic (bf16 included)."""
    flat = tensor.detach().contiguous().reshape(-1).cpu()
    return flat.view(torch.uint8).numpy().tobytes()


def local_checksums(state_dict: Mapping[str, Any]) -> dict[str, str]:
    """Key path -> sha256 hex of this rank's local data.

    Tensors: the bytes of the local shard (``DTensor.to_local()``); other values: ``repr``.
    Compare the result taken after ``dcp.load`` with the one taken at save time (same seed,
    same layout) or with a fresh state built with the save seed (any layout).
    """
    sums = {}
    for path, value in iter_leaves(state_dict):
        if isinstance(value, torch.Tensor):
            data = tensor_bytes(_local_tensor(value))
        else:
            data = repr(value).encode()
        sums[path] = hashlib.sha256(data).hexdigest()
    return sums


def expected_bytes(state_dict: Mapping[str, Any]) -> int:
    """Bytes of tensor data this rank loads: sum of local shard ``numel * element_size``.

    Replicated tensors (e.g. ``step``, HSDP replicas) count on every rank that holds them;
    non-tensor (BYTE_IO) values are not counted.
    """
    total = 0
    for _, value in iter_leaves(state_dict):
        if isinstance(value, torch.Tensor):
            local = _local_tensor(value)
            total += local.numel() * local.element_size()
    return total
