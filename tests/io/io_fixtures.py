"""Constants and helpers shared by the range reader tests (fixtures live in conftest.py)."""

from __future__ import annotations

import numpy as np

from gcsckpt.io import RetryPolicy

BUCKET = "reader-tests"
# Short backoffs keep retry tests fast; attempts stay at the production default.
FAST_RETRY = RetryPolicy(max_attempts=6, initial_backoff_s=0.005, max_backoff_s=0.05, deadline_s=60)


def object_bytes(size: int, seed: int) -> bytes:
    """Deterministic pseudo-random content of `size` bytes."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
