"""Run by test_wheel.py with the installed wheel's interpreter, from a folder outside the repo.

Saves a small FSDP2 model + AdamW state on 2 gloo ranks with GCSStorageWriter, loads it into a
differently initialized copy with GCSStorageReader, and prints one JSON line: where gcsckpt and
_gcsio were imported from, sys.path, and per rank the leaves compared and any mismatches.

Usage: python wheel_job.py --endpoint http://127.0.0.1:PORT --ckpt gs://bucket/prefix
"""

from __future__ import annotations

import argparse
import json
import sys


def _model(seed: int):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def _trained(seed: int, mesh):
    """FSDP2 (Shard(0) DTensor params) model and AdamW after one step on fixed data."""
    import torch
    from torch.distributed.fsdp import fully_shard

    model = _model(seed)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1234 + seed)
    x = torch.randn(4, 16, generator=gen)
    model(x).square().mean().backward()
    optim.step()
    return model, optim


def _leaves(value, path=""):
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _leaves(value[key], f"{path}/{key}")
    else:
        yield path, value


def save_and_load(rank: int, ckpt: str, endpoint: str) -> dict:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter

    mesh = init_device_mesh("cpu", (2,))
    model, optim = _trained(0, mesh)
    model_sd, optim_sd = get_state_dict(model, optim)
    dcp.save(
        {"model": model_sd, "optim": optim_sd},
        storage_writer=GCSStorageWriter(ckpt, endpoint=endpoint),
    )

    other, other_optim = _trained(1, mesh)  # other values, same structure
    other_sd, other_optim_sd = get_state_dict(other, other_optim)
    state = {"model": other_sd, "optim": other_optim_sd}
    reader = GCSStorageReader(ckpt, endpoint=endpoint)
    dcp.load(state, storage_reader=reader)
    set_state_dict(
        other, other_optim, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )

    loaded = dict(
        _leaves(dict(zip(("model", "optim"), get_state_dict(other, other_optim), strict=True)))
    )
    saved = dict(_leaves({"model": model_sd, "optim": optim_sd}))
    mismatches, compared = [], 0
    for path, want in saved.items():
        got = loaded.get(path)
        if isinstance(want, DTensor):
            want, got = want.to_local(), got.to_local() if isinstance(got, DTensor) else got
        same = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
        compared += 1
        if not same:
            mismatches.append(path)
    return {"rank": rank, "compared": compared, "mismatches": mismatches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--ckpt", required=True)
    args = parser.parse_args()

    import _gcsio

    import gcsckpt
    from ckptbench.harness.local_ranks import run_ranks

    ranks = run_ranks(
        save_and_load,
        2,
        args.ckpt,
        args.endpoint,
        preload=("torch", "torch.distributed.checkpoint", "gcsckpt.dcp"),
    )
    report = {
        "prefix": sys.prefix,
        "gcsckpt": gcsckpt.__file__,
        "gcsio": _gcsio.__file__,
        "sys_path": sys.path,
        "ranks": ranks,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
