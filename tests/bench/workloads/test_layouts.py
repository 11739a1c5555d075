"""Placements and FQN partitions of every layout, checked per rank on a fake process group."""

import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

from ckptbench.workloads.models.builder import build_meta_model
from ckptbench.workloads.parallel.layout import apply_layout
from ckptbench.workloads.parallel.mesh import build_mesh
from ckptbench.workloads.parallel.strategies import LayoutError
from tests.bench.workloads.fake_ranks import fake_rank, make_case

OLMOE, LLAMA = "olmoe_1b_7b_0924:tiny", "llama_3_1_8b:tiny"


def _sharded(case, rank):
    """(FQN -> parameter, layout) of ``rank`` on ``meta`` (no storage)."""
    with fake_rank(rank, case.world_size):
        model = build_meta_model(case.model)
        layout = apply_layout(model, case.dims, build_mesh(case.dims, "cpu"))
        return dict(model.named_parameters()), layout


def test_mesh_dims_are_ordered_and_unit_dims_dropped():
    case = make_case(LLAMA, "pp_hsdp_tp", 16, pp=2, dpr=2, dp=2, tp=2)
    with fake_rank(5, 16):
        mesh = build_mesh(case.dims, "cpu")
        assert mesh.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "tp")
        assert tuple(mesh.shape) == (2, 2, 2, 2)
        assert build_mesh(
            make_case(LLAMA, "fsdp_tp", 16, dp=8, tp=2).dims, "cpu"
        ).mesh_dim_names == (
            "dp_shard",
            "tp",
        )
        with pytest.raises(RuntimeError, match="16 ranks but the case needs world_size 8"):
            build_mesh(make_case(LLAMA, "fsdp", 8, dp=8).dims, "cpu")
    assert build_mesh(make_case(LLAMA, "fsdp", 1).dims, "cpu") is None


def test_fsdp_and_hsdp_placements():
    params, _ = _sharded(make_case(OLMOE, "fsdp", 8, dp=8), 3)
    assert all(p.placements == (Shard(0),) for p in params.values())
    assert params["lm_head.weight"].to_local().shape == (64, 64)
    params, _ = _sharded(make_case(LLAMA, "hsdp", 8, dpr=2, dp=4), 6)
    assert all(p.placements == (Replicate(), Shard(0)) for p in params.values())
    assert params["model.layers.0.mlp.gate_proj.weight"].to_local().shape == (56, 64)


def test_tp_and_fsdp_tp_placements():
    params, _ = _sharded(make_case(LLAMA, "tp", 8, tp=8), 1)
    assert params["model.layers.0.self_attn.q_proj.weight"].placements == (Shard(0),)
    assert params["model.layers.0.mlp.down_proj.weight"].placements == (Shard(1),)
    assert params["model.embed_tokens.weight"].placements == (Shard(0),)
    assert params["lm_head.weight"].placements == (Shard(0),)
    assert not isinstance(params["model.norm.weight"], DTensor)
    params, _ = _sharded(make_case(LLAMA, "fsdp_tp", 8, dp=2, tp=4), 5)
    q = params["model.layers.3.self_attn.q_proj.weight"]
    assert q.placements == (_StridedShard(0, split_factor=4), Shard(0))
    assert q.to_local().shape == (8, 64)
    assert params["model.layers.3.self_attn.o_proj.weight"].placements == (Shard(0), Shard(1))
    assert params["model.norm.weight"].placements == (Shard(0),)
    params, _ = _sharded(make_case(LLAMA, "hsdp_tp", 8, dpr=2, dp=2, tp=2), 7)
    up = params["model.layers.0.mlp.up_proj.weight"]
    assert up.placements == (Replicate(), _StridedShard(0, split_factor=2), Shard(0))


@pytest.mark.parametrize(
    "case",
    [
        make_case(LLAMA, "pp", 8, pp=8),
        make_case(LLAMA, "pp_fsdp", 8, pp=2, dp=4),
        make_case(LLAMA, "pp_fsdp_tp", 8, pp=2, dp=2, tp=2),
        make_case(LLAMA, "pp_hsdp_tp", 16, pp=2, dpr=2, dp=2, tp=2),
    ],
    ids=lambda c: c.strategy,
)
def test_pipeline_stages_partition_the_canonical_fqns(case):
    full = {n for n, _ in build_meta_model(LLAMA).named_parameters()}
    by_stage: dict[int, set[str]] = {}
    for rank in range(case.world_size):
        params, layout = _sharded(case, rank)
        names = set(params)
        assert by_stage.setdefault(layout.pp_stage, names) == names  # same within a stage
        assert all(f"model.layers.{i}." in " ".join(names) for i in layout.layers)
    stages = [by_stage[s] for s in range(case.dims.pp)]
    assert set().union(*stages) == full
    assert sum(len(s) for s in stages) == len(full)  # disjoint
    assert "model.embed_tokens.weight" in stages[0]
    assert {"model.norm.weight", "lm_head.weight"} <= stages[-1]


def test_ep_ranks_keep_whole_disjoint_experts_and_fsdp_slices_them():
    case = make_case(OLMOE, "ep", 8, dp=8, ep=8)
    owners: dict[str, int] = {}
    for rank in range(8):
        params, layout = _sharded(case, rank)
        assert layout.experts == range(2 * rank, 2 * rank + 2)
        experts = {n: p for n, p in params.items() if ".mlp.experts." in n}
        assert {int(n.split(".")[5]) for n in experts} == {2 * rank, 2 * rank + 1}
        assert all(type(p) is torch.nn.Parameter for p in experts.values())
        assert all(p.shape in ((32, 64), (64, 32)) for p in experts.values())  # whole experts
        dense = [p for n, p in params.items() if n not in experts]
        assert dense and all(p.placements == (Shard(0),) for p in dense)
        for name in experts:
            assert owners.setdefault(name, rank) == rank
    full = {n for n, _ in build_meta_model(OLMOE).named_parameters() if ".mlp.experts." in n}
    assert set(owners) == full  # every expert of every layer, each on exactly one rank
    params, _ = _sharded(make_case(OLMOE, "fsdp", 8, dp=8), 2)
    experts = [p for n, p in params.items() if ".mlp.experts." in n]
    assert len(experts) == len(full)
    assert all(
        p.placements == (Shard(0),) and p.to_local().shape[0] * 8 == p.shape[0] for p in experts
    )


def test_uneven_or_impossible_layouts_are_rejected():
    with pytest.raises(ValueError, match="8 decoder layers do not split evenly into 3"):
        _sharded(make_case(LLAMA, "pp", 3, pp=3), 0)
    with pytest.raises(ValueError, match="16 experts do not split evenly over 3 EP ranks"):
        _sharded(make_case(OLMOE, "ep", 3, dp=3, ep=3), 1)
    with pytest.raises(ValueError, match="ep needs an MoE model"):
        _sharded(make_case(LLAMA, "ep", 8, dp=8, ep=8), 0)
    with pytest.raises(LayoutError, match="expert_parallel_size 4 must equal data_parallel_size 8"):
        _sharded(make_case(OLMOE, "ep", 8, dp=8, ep=4), 0)
    with pytest.raises(LayoutError, match="tensor_parallel_size must be 1 for strategy 'fsdp'"):
        build_mesh(make_case(OLMOE, "fsdp", 16, dp=8, tp=2).dims, "cpu")


def test_tied_embeddings_cannot_be_split_across_stages():
    from ckptbench.workloads.parallel.pp import split_pipeline_stage

    model = build_meta_model(LLAMA)
    model.config.tie_word_embeddings = True
    with pytest.raises(ValueError, match="tied input/output embeddings"):
        split_pipeline_stage(model, 0, 2)
    model = build_meta_model(LLAMA)
    model.lm_head.weight = model.model.embed_tokens.weight
    with pytest.raises(ValueError, match="tied input/output embeddings"):
        split_pipeline_stage(model, 1, 2)
