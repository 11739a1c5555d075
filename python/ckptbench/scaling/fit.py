"""The growth exponent of a cost along an axis: the slope of log(cost) against log(axis)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def growth_exponent(axis: Sequence[float], cost: Sequence[float]) -> float:
    """Least-squares slope ``k`` of ``log cost = k log axis + c`` (cost ~ axis^k).

    Args:
      axis: the axis values (items, bytes, ranks), all > 0.
      cost: the cost at each axis value (seconds, µs, bytes), all > 0; same length.

    Returns:
      ``k``: 1.0 for cost linear in the axis, 0.0 for a constant cost.

    Raises:
      ValueError: fewer than two points, lengths differ, or a value is not > 0.
    """
    x, y = np.asarray(axis, dtype=float), np.asarray(cost, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(
            f"need two or more (axis, cost) pairs of equal length, got {x.size}/{y.size}"
        )
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("axis and cost values must be > 0 for a log-log fit")
    design = np.stack([np.log(x), np.ones_like(x)], axis=1)
    (slope, _), *_ = np.linalg.lstsq(design, np.log(y), rcond=None)
    return float(slope)
