"""BYTE_IO items on the load path: runs read as one range, each distinct archive decoded once.

An optimizer-shaped state (AdamW flattened: the same few `param_groups` values per parameter)
plus repeated mutable values, saved by GCSStorageWriter (block checksums) and by torch's own
FileSystemWriter (uploaded object by object), loads with GCSStorageReader + GCSLoadPlanner into
exactly what torch's FileSystemReader + DefaultLoadPlanner give, with fewer ranges than items,
every byte verified, and mutable values never shared between keys.
"""

from __future__ import annotations

import io

import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.testing import LocalGCS

BUCKET = "byte-io"


def _state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(12)])
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3 * (seed + 1), betas=(0.9, 0.95))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optim.step()
    options = StateDictOptions(flatten_optimizer_state_dict=True)
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    extra = {f"tags{i}": ["a", seed, {"k": (1, 2)}] for i in range(6)}
    extra.update({f"flag{i}": seed % 2 == 0 for i in range(6)})
    return {"model": model_sd, "optim": optim_sd, "extra": extra}


def _leaves(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_leaves(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        writer = GCSStorageWriter(f"gs://{BUCKET}/gcs", endpoint=endpoint.endpoint)
        dcp.save(_state(1), storage_writer=writer, no_dist=True)
        local = tmp_path_factory.mktemp("stock")
        dcp.save(_state(1), storage_writer=dcp.FileSystemWriter(str(local)), no_dist=True)
        for path in local.iterdir():
            endpoint.put(BUCKET, f"stock/{path.name}", path.read_bytes())
        endpoint.local = local
        yield endpoint


def _torch_load(path) -> dict:
    state = _state(2)
    reader = dcp.FileSystemReader(str(path))
    dcp.load(state, storage_reader=reader, planner=dcp.DefaultLoadPlanner(), no_dist=True)
    return state


@pytest.mark.parametrize("name", ["gcs", "stock"])
def test_byte_io_loads_equal_torch_filesystem_reader(gcs, name):
    want = _leaves(_torch_load(gcs.local))
    state = _state(2)
    # torch's objects were uploaded after its `.metadata` (directory order): no commit order.
    url, stock = f"gs://{BUCKET}/{name}", name == "stock"
    reader = GCSStorageReader(url, endpoint=gcs.endpoint, check_commit_order=not stock)
    dcp.load(state, storage_reader=reader, planner=GCSLoadPlanner(), no_dist=True)
    got = _leaves(state)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), key
        else:
            assert type(got[key]) is type(value) and got[key] == value, key
    assert got["optim.param_groups.0.weight.lr"] == 2e-3  # seed 1's, not the target's seed 2
    stats = reader.load_stats
    assert stats.bytes_items > 2 * stats.tensor_items  # optimizer-shaped: param_groups values
    # Each object's BYTE_IO archives are back to back: one range per run, not one per item.
    assert stats.ranges <= 3 * stats.tensor_items + stats.objects, (stats.ranges, stats.objects)
    if name == "gcs":
        assert stats.bytes_verified > 0 and stats.bytes_unverified == 0
    else:
        assert stats.bytes_verified == 0 and stats.bytes_unverified > 0


def test_repeated_mutable_values_are_not_shared(gcs):
    state = _state(2)
    reader = GCSStorageReader(f"gs://{BUCKET}/gcs", endpoint=gcs.endpoint)
    dcp.load(state, storage_reader=reader, planner=GCSLoadPlanner(), no_dist=True)
    tags = [state["extra"][f"tags{i}"] for i in range(6)]
    assert all(t == ["a", 1, {"k": (1, 2)}] for t in tags)
    assert len({id(t) for t in tags}) == 6 and len({id(t[2]) for t in tags}) == 6
    tags[0].append("changed")
    assert tags[1] == ["a", 1, {"k": (1, 2)}]


def test_planner_decodes_each_distinct_archive_once(monkeypatch):
    values = [1e-3, (0.9, 0.95), False, None, "adamw", 7, [1, 2], {"a": 1}, frozenset({3})]
    archives = []
    for value in values:
        buf = io.BytesIO()
        torch.save(value, buf)
        archives.append(buf.getvalue())
    planner = GCSLoadPlanner(flatten_state_dict=False)
    planner.set_up_planner({}, None, True)
    decoded = []
    plain = GCSLoadPlanner._plain_value

    def counting(self, value):
        decoded.append(1)
        return plain(self, value)

    monkeypatch.setattr(GCSLoadPlanner, "_plain_value", counting)
    for round_ in range(5):
        for i, data in enumerate(archives):
            item = _byte_item(f"v{round_}.{i}")
            planner.load_bytes(item, io.BytesIO(data))
            want = torch.load(io.BytesIO(data), weights_only=False)
            assert planner.state_dict[f"v{round_}.{i}"] == want
    # Immutable values once each; the list and the dict every time.
    assert len(decoded) == len(values) + 4 * 2
    assert planner.state_dict["v0.6"] is not planner.state_dict["v1.6"]
    planner.set_up_planner({}, None, True)
    assert planner._decoded == {}


def _byte_item(fqn: str):
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

    index = MetadataIndex(fqn)
    zero = torch.Size([0])
    return ReadItem(LoadItemType.BYTE_IO, index, zero, index, zero, zero)
