"""GPU: the runner loads tiny OLMoE into CUDA tensors over nccl, one rank per GPU (up to 2).

Tagged ``gpu`` in BUILD (``tools/bazel test --config=gpu //...``); skipped without CUDA.
"""

from __future__ import annotations

import io

import pytest
import torch

from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.config import RunConfig
from gcsckpt.testing import LocalGCS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
BUCKET = "runner-gpu"


def test_tiny_olmoe_loads_into_cuda_with_both_readers(tmp_path):
    ranks = min(torch.cuda.device_count(), 2)
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        config = RunConfig(
            cases=("load-olmoe_1b_7b_0924-*",),
            sweep_axes=("model", "strategy"),
            bucket=f"gs://{BUCKET}/gpu",
            endpoint=gcs.endpoint,
            rounds=2,
            baseline_rounds=1,
            world_size_override=ranks,
            model_scale="tiny",
            device="cuda",
            output_dir=str(tmp_path),
            job_timeout_s=300.0,
        )
        outcome = run_benchmark(config, out=io.StringIO(), live_progress=False)
    assert [r.status for r in outcome.results] == ["ok"] * 4, [
        r.error_message for r in outcome.failures
    ]
    assert all(r.checksums_verified for r in outcome.results)
    for row in outcome.report.rows:
        assert row["distributed_backend"] == "nccl"
        assert row["compute_accelerator_type"] == "gpu"
        assert row["compute_accelerator_name"]
        assert row["world_size"] == ranks
