"""ParallelDims: mesh dims and shape of each layout, and the errors of invalid sizes."""

import pytest

from ckptbench.workloads.parallel.dims import ParallelDims
from ckptbench.workloads.parallel.strategies import LayoutError


def test_mesh_dims_are_the_non_unit_sizes_outermost_first():
    dims = ParallelDims("pp_hsdp_tp", 16, pp=2, dp_replicate=2, dp_shard=2, tp=2)
    assert dims.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "tp")
    assert dims.mesh_shape == (2, 2, 2, 2)
    ep = ParallelDims("ep", 8, dp_shard=8, ep=8)
    assert (ep.mesh_dim_names, ep.mesh_shape, ep.ep) == (("dp_shard",), (8,), 8)
    one = ParallelDims("tp", 1)  # one rank holds the whole model, whatever the strategy
    assert (one.mesh_dim_names, one.mesh_shape) == ((), ())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "zero3", "world_size": 8}, "strategy 'zero3' is unknown"),
        ({"strategy": "fsdp", "world_size": 0}, "world_size must be a positive integer, got 0"),
        ({"strategy": "tp", "world_size": 8, "tp": True}, "tensor_parallel_size must be a pos"),
        ({"strategy": "hsdp", "world_size": 8, "dp_shard": 8}, "data_parallel_replicate_size must"),
        ({"strategy": "fsdp", "world_size": 8, "dp_shard": 4}, "world_size 8 != data_parallel_s"),
        ({"strategy": "fsdp", "world_size": 8, "dp_shard": 8, "pp": 2}, "pipeline_parallel_size"),
        ({"strategy": "fsdp", "world_size": 8, "dp_shard": 8, "ep": 8}, "expert_parallel_size m"),
        ({"strategy": "ep", "world_size": 8, "dp_shard": 8, "ep": 2}, "expert_parallel_size 2"),
    ],
)
def test_invalid_sizes_raise_naming_the_size(kwargs, message):
    with pytest.raises(LayoutError, match=message):
        ParallelDims(**kwargs)


def test_dims_are_frozen_values():
    dims = ParallelDims("fsdp", 8, dp_shard=8)
    assert dims == ParallelDims("fsdp", 8, dp_shard=8)
    with pytest.raises(AttributeError):
        dims.tp = 2
