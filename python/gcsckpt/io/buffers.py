"""Turning request destinations into writable byte buffers the C++ reader can fill."""

from __future__ import annotations

from typing import Any


def as_writable_buffer(dest: Any, index: int) -> Any:
    """``dest`` itself, or for a torch tensor a uint8 numpy view of its bytes.

    Torch tensors do not export the buffer protocol, so a contiguous CPU tensor of any dtype
    (bf16 included) is viewed as ``tensor.reshape(-1).view(torch.uint8).numpy()``, which shares
    its memory. Other objects pass through; the C++ side checks them (writable, C-contiguous,
    exact length).

    Raises:
        ValueError: a tensor that is not on the CPU or not contiguous (names request ``index``).
    """
    if not type(dest).__module__.startswith("torch"):
        return dest
    import torch

    if not isinstance(dest, torch.Tensor):
        return dest
    if dest.device.type != "cpu":
        raise ValueError(f"request {index}: dest tensor is on {dest.device}, expected the CPU")
    if not dest.is_contiguous():
        raise ValueError(f"request {index}: dest tensor is not contiguous")
    return dest.detach().reshape(-1).view(torch.uint8).numpy()
