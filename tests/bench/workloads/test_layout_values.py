"""A rank's seeded shards equal the matching slices of the unsharded state, in every layout."""

import pytest
import torch

from ckptbench.workloads.models.seeded import local_extent
from ckptbench.workloads.models.state import iter_leaves
from ckptbench.workloads.parallel.app_state import build_app_state, build_rank_state
from ckptbench.workloads.parallel.mesh import build_mesh
from tests.bench.workloads.fake_ranks import fake_rank, make_case

OLMOE = "olmoe_1b_7b_0924:tiny"
SEED = 7


@pytest.fixture(scope="module")
def reference():
    whole = build_app_state(OLMOE, make_case(OLMOE, "fsdp", 1).dims, None, seed=SEED, device="cpu")
    return dict(iter_leaves(whole))


@pytest.mark.parametrize(
    ("case", "ranks"),
    [
        (make_case(OLMOE, "fsdp", 8, dp=8), (0, 7)),
        (make_case(OLMOE, "ep", 8, dp=8, ep=8), (3,)),
        (make_case(OLMOE, "tp", 8, tp=8), (6,)),
        (make_case(OLMOE, "fsdp_tp", 8, dp=2, tp=4), (1, 6)),
        (make_case(OLMOE, "hsdp_tp", 8, dpr=2, dp=2, tp=2), (5,)),
    ],
    ids=lambda v: getattr(v, "strategy", ""),
)
def test_shards_match_the_whole_state(reference, case, ranks):
    for rank in ranks:
        with fake_rank(rank, case.world_size):
            state = build_rank_state(
                case.model, case.dims, build_mesh(case.dims, "cpu"), seed=SEED, device="cpu"
            )
            leaves = dict(iter_leaves(state.state_dict))
            assert set(leaves) <= set(reference)
            checked = 0
            for key, value in leaves.items():
                if not isinstance(value, torch.Tensor):
                    assert value == reference[key], key
                    continue
                local, shape, offset = local_extent(value)
                whole = reference[key]
                assert tuple(shape) == tuple(whole.shape), key
                part = whole[
                    tuple(slice(o, o + n) for o, n in zip(offset, local.shape, strict=True))
                ]
                assert torch.equal(local, part), f"{key} on rank {rank}"
                checked += local.numel()
            assert checked > 0
