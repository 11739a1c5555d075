"""The tiny benchmark run both runner end-to-end tests start from: tiny OLMoE fsdp + ep pair at
world size 2 against a local endpoint."""

from __future__ import annotations

from ckptbench.runner.config import RunConfig

# Names without the bucket type: the cases' object prefixes.
FSDP_BASE = "load-olmoe_1b_7b_0924-fsdp-ws2"
EP_BASE = "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2"
# Case names on the emulator's bucket (regional metadata: "-reg").
FSDP = f"{FSDP_BASE}-reg"
EP = f"{EP_BASE}-reg"


def tiny_run_config(endpoint: str, bucket_url: str, output_dir, **changes) -> RunConfig:
    """RunConfig for the tiny pair under `bucket_url` (gs://...); `changes` override fields."""
    fields = dict(
        cases=("load-olmoe_1b_7b_0924-*",),
        sweep_axes=("model", "strategy"),
        bucket=bucket_url,
        endpoint=endpoint,
        world_size_override=2,
        model_scale="tiny",
        output_dir=str(output_dir),
        job_timeout_s=300.0,
    )
    fields.update(changes)
    return RunConfig(**fields)


def interpreter_facts(rank: int) -> tuple[int, str, str, str]:
    """Rank-side: (rank, interpreter, google-cloud-storage version, _gcsio's module file), for
    the test that the dataflux arm's ranks run on its own venv with the repository's tree."""
    import sys

    from google.cloud import storage

    from gcsckpt.io.extension import _gcsio

    return rank, sys.executable, storage.__version__, _gcsio.__file__
