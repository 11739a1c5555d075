"""Run by test_wheel.py with the installed wheel's interpreter, from a folder outside the repo.

Saves a small FSDP2 model + AdamW state on 2 gloo ranks (torch.multiprocessing.spawn: nothing of
the repository is imported) with GCSStorageWriter, loads it into a differently initialized copy
with GCSStorageReader, and prints one JSON line: gcsckpt's version, where gcsckpt and
gcsckpt._gcsio were imported from, sys.path, and per rank the leaves compared and any mismatches.

Usage: python wheel_job.py --endpoint http://127.0.0.1:PORT --ckpt gs://bucket/prefix
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path


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


def _rank(rank: int, world_size: int, init: str, ckpt: str, endpoint: str, out: str) -> None:
    """One spawned rank: joins the gloo group, runs save_and_load, writes its result file."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    try:
        result = save_and_load(rank, ckpt, endpoint)
    finally:
        dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result))


def run_ranks(world_size: int, ckpt: str, endpoint: str) -> list[dict]:
    """save_and_load's results on `world_size` spawned gloo ranks, in rank order."""
    import torch.multiprocessing as mp

    os.environ.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    with tempfile.TemporaryDirectory(prefix="wheel-job-") as out:
        mp.spawn(_rank, args=(world_size, init, ckpt, endpoint, out), nprocs=world_size)
        return [json.loads(Path(out, f"rank-{r}.json").read_text()) for r in range(world_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--ckpt", required=True)
    args = parser.parse_args()

    import gcsckpt
    from gcsckpt import _gcsio

    report = {
        "prefix": sys.prefix,
        "version": gcsckpt.__version__,
        "gcsckpt": gcsckpt.__file__,
        "gcsio": _gcsio.__file__,
        "sys_path": sys.path,
        "ranks": run_ranks(2, args.ckpt, args.endpoint),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
