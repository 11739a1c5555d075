"""Retry policy for ranged GETs (picklable, validated)."""

from __future__ import annotations

import dataclasses

from gcsckpt.io import defaults


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Retried: HTTP 408, 429, 500, 502, 503, 504; connection refused or reset; timeouts; short
    bodies; wrong ``Content-Range``; a request that receives no byte for ``stall_timeout_s``.
    Other 4xx answers fail at once. A retry asks only for the bytes not yet received.

    The wait before attempt ``n + 1`` is drawn uniformly from
    ``[0, min(max_backoff_s, initial_backoff_s * 2 ** (n - 1))]`` seconds ("full jitter",
    AWS Architecture Blog, "Exponential Backoff And Jitter", 2015; GCS's retry strategy page
    also asks for exponential backoff with jitter).

    Attributes:
        max_attempts: attempts per HTTP request, the first included (>= 1).
        initial_backoff_s: cap of the first backoff draw, seconds (>= 0).
        max_backoff_s: cap of every backoff draw, seconds (>= initial_backoff_s).
        deadline_s: no new attempt of a request starts later than this many seconds after its
            first attempt began (> 0).

    Raises:
        ValueError: a field is out of range (the message names it).
    """

    max_attempts: int = defaults.MAX_ATTEMPTS
    initial_backoff_s: float = defaults.INITIAL_BACKOFF_S
    max_backoff_s: float = defaults.MAX_BACKOFF_S
    deadline_s: float = defaults.RETRY_DEADLINE_S

    def __post_init__(self) -> None:
        if int(self.max_attempts) != self.max_attempts or self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_attempts must be an int >= 1, got {self.max_attempts}"
            )
        if not self.initial_backoff_s >= 0:
            raise ValueError(
                f"RetryPolicy.initial_backoff_s must be >= 0, got {self.initial_backoff_s}"
            )
        if not self.max_backoff_s >= self.initial_backoff_s:
            raise ValueError(
                f"RetryPolicy.max_backoff_s ({self.max_backoff_s}) must be >= initial_backoff_s "
                f"({self.initial_backoff_s})"
            )
        if not self.deadline_s > 0:
            raise ValueError(f"RetryPolicy.deadline_s must be > 0, got {self.deadline_s}")
