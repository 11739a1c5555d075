"""A failed load's error text (harness.job.describe_error)."""

from __future__ import annotations

from torch.distributed.checkpoint.api import CheckpointException

from ckptbench.harness.job import describe_error


def test_describe_error_keeps_one_line_per_rank():
    try:
        raise OSError("gs://b/ckpt/__0_0.distcp bytes=0-99: connection reset")
    except OSError as err:
        wrapped = (err, None)
    exc = CheckpointException("load failed", {1: wrapped, 0: (ValueError("bad"), None)})
    text = describe_error(exc)
    assert text == (
        "rank 0: ValueError: bad; "
        "rank 1: OSError: gs://b/ckpt/__0_0.distcp bytes=0-99: connection reset"
    )
