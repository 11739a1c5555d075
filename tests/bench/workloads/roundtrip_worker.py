"""Rank-side code of the gloo DCP round-trip tests (imported by spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from ckptbench.workloads.models.state import expected_bytes, local_checksums
from ckptbench.workloads.parallel.app_state import build_app_state
from ckptbench.workloads.parallel.mesh import build_mesh

SAVE_SEED, FRESH_SEED = 11, 22

# What the rank forkserver imports once (transformers' model classes load lazily otherwise).
PRELOAD = (
    "torch",
    "torch.distributed.checkpoint",
    "transformers.models.llama.modeling_llama",
    "transformers.models.olmoe.modeling_olmoe",
    "ckptbench.workloads.parallel.app_state",
)


class CountingReader(FileSystemReader):
    """The stock reader, counting the ReadItems and tensor bytes this rank's plan reads."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.items = 0
        self.byte_io_items = 0

    def read_data(self, plan, planner):
        self.items += len(plan.items)
        self.byte_io_items += sum(1 for item in plan.items if item.type.name == "BYTE_IO")
        return super().read_data(plan, planner)


def save_then_load(rank: int, cases: list, root: str) -> dict[str, Any]:
    """For each case: save a SAVE_SEED state, load it into a FRESH_SEED state, report sums."""
    out = {}
    for case in cases:
        mesh = build_mesh(case.dims, "cpu")
        saved = build_app_state(case.model, case.dims, mesh, seed=SAVE_SEED, device="cpu")
        saved_sums = local_checksums(saved)
        path = f"{root}/{case.name}"
        dcp.save(saved, storage_writer=FileSystemWriter(path))
        fresh = build_app_state(case.model, case.dims, mesh, seed=FRESH_SEED, device="cpu")
        before = local_checksums(fresh)
        reader = CountingReader(path)
        dcp.load(fresh, storage_reader=reader)
        out[case.name] = {
            "saved": saved_sums,
            "before": before,
            "after": local_checksums(fresh),
            "items": reader.items,
            "byte_io_items": reader.byte_io_items,
            "bytes": expected_bytes(fresh),
        }
    return out


def load_across(rank: int, saved_case, cases: list, root: str) -> dict[str, Any]:
    """Loads ``saved_case``'s checkpoint into each case's layout; sums vs a SAVE_SEED state."""
    out = {}
    path = f"{root}/{saved_case.name}"
    for case in cases:
        mesh = build_mesh(case.dims, "cpu")
        expected = local_checksums(
            build_app_state(case.model, case.dims, mesh, seed=SAVE_SEED, device="cpu")
        )
        fresh = build_app_state(case.model, case.dims, mesh, seed=FRESH_SEED, device="cpu")
        dcp.load(fresh, storage_reader=FileSystemReader(path))
        out[case.name] = {"expected": expected, "after": local_checksums(fresh)}
    return out


def save_load_then_across(
    rank: int, cases: list, saved_case, across: list, root: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`save_then_load` over ``cases``, then :func:`load_across` (one process launch)."""
    return save_then_load(rank, cases, root), load_across(rank, saved_case, across, root)


def assert_restored(saved: list[dict], strategy: str) -> None:
    """Every rank's loaded values equal the saved ones under `strategy`, and the fresh state
    differed before the load (so equality proves the load wrote every tensor)."""
    for rank, by_case in enumerate(saved):
        r = by_case[strategy]
        assert r["after"] == r["saved"], f"rank {rank}"
        tensors = [k for k in r["saved"] if not k.startswith("optim.param_groups.")]
        assert tensors and all(r["before"][k] != r["saved"][k] for k in tensors)


def assert_loaded_across(across: list[dict], strategies: list[str]) -> None:
    """Every rank's values, loaded from another layout's checkpoint into each of `strategies`,
    equal a SAVE_SEED state built directly in that layout (:func:`load_across`)."""
    for rank, by_case in enumerate(across):
        for strategy in strategies:
            r = by_case[strategy]
            assert r["after"] == r["expected"], f"{strategy} rank {rank}"
