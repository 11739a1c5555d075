"""The one retry policy (picklable, validated): the C++ range reader takes it as is, and
`api_core_retry` turns it into the google.api_core Retry that every other GCS request of the
package (`.metadata`, uploads, listing, deletes; `gcsckpt.io.objects`) runs under."""

from __future__ import annotations

import dataclasses
import functools

from gcsckpt.io import defaults
from gcsckpt.io.extension import _gcsio


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Retried: the HTTP statuses of ``RETRYABLE_STATUSES`` (408, 429, 500, 502, 503, 504: the
    C++ side's list); connection refused or reset; timeouts; short bodies; wrong
    ``Content-Range``; a request that receives no byte for ``stall_timeout_s``.
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
        ValueError: a field is out of range (the message names it and its value).
    """

    max_attempts: int = defaults.MAX_ATTEMPTS
    initial_backoff_s: float = defaults.INITIAL_BACKOFF_S
    max_backoff_s: float = defaults.MAX_BACKOFF_S
    deadline_s: float = defaults.RETRY_DEADLINE_S

    def __post_init__(self) -> None:
        if int(self.max_attempts) != self.max_attempts:
            raise ValueError(f"RetryPolicy.max_attempts must be an int, got {self.max_attempts}")
        # The ranges are the C++ side's rule (RetryPolicy::Validate), applied once for both.
        _gcsio.validate_retry_policy(
            int(self.max_attempts),
            float(self.initial_backoff_s),
            float(self.max_backoff_s),
            float(self.deadline_s),
        )


# Statuses retried by every request of the package: the C++ side's own list
# (IsRetryableStatus in cc/gcsio/retry_policy.cc); other 4xx answers fail at once.
RETRYABLE_STATUSES = frozenset(_gcsio.retryable_http_statuses())

# How many attempts the last call of a request made, set on the exception that ends it.
ATTEMPTS_ATTR = "gcsckpt_attempts"


def is_retryable(exc: BaseException) -> bool:
    """True for the failures ``RetryPolicy`` retries: a status of ``RETRYABLE_STATUSES`` (as
    google.api_core errors or as google-cloud-storage media ``InvalidResponse``), connection
    refused/reset, timeouts and broken bodies (requests, urllib3, google-auth transport)."""
    import google.auth.exceptions
    import requests
    import urllib3.exceptions
    from google.api_core import exceptions as api_exceptions

    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return exc.code in RETRYABLE_STATUSES
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status in RETRYABLE_STATUSES
    return isinstance(
        exc,
        (
            ConnectionError,
            TimeoutError,
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            urllib3.exceptions.ProtocolError,
            google.auth.exceptions.TransportError,
        ),
    )


def api_core_retry(policy: RetryPolicy):
    """``policy`` as a ``google.api_core.retry.Retry`` for google-cloud-storage calls.

    Same statuses (``is_retryable``), the same full-jitter backoff (api_core draws each wait
    uniformly from [0, cap], the cap doubling from ``initial_backoff_s`` up to
    ``max_backoff_s``) and ``deadline_s`` as its timeout. api_core has no attempt limit, so the
    returned object counts attempts per call of the function it wraps and stops after
    ``max_attempts``; the exception that ends a call carries the count in
    ``getattr(exc, ATTEMPTS_ATTR)``. Media uploads wrap each request (each resumable chunk)
    separately, so the limit applies per request, as in the C++ RangeReader and Uploader.
    """
    from google.api_core import retry as api_retry

    class _PolicyRetry(api_retry.Retry):
        def __call__(self, func, on_error=None):
            @functools.wraps(func)
            def with_retries(*args, **kwargs):
                attempts = 0

                def predicate(exc: BaseException) -> bool:
                    nonlocal attempts
                    attempts += 1
                    setattr(exc, ATTEMPTS_ATTR, attempts)
                    return attempts < policy.max_attempts and is_retryable(exc)

                def final_error(errors, reason, timeout):
                    last = errors[-1]
                    if reason == api_retry.RetryFailureReason.TIMEOUT:
                        last.add_note(f"retry deadline {policy.deadline_s:g} s passed")
                    return last, None

                return api_retry.retry_target(
                    functools.partial(func, *args, **kwargs),
                    predicate,
                    api_retry.exponential_sleep_generator(
                        self._initial, self._maximum, multiplier=self._multiplier
                    ),
                    timeout=self._timeout,
                    on_error=on_error,
                    exception_factory=final_error,
                )

            return with_retries

    return _PolicyRetry(
        predicate=is_retryable,
        initial=policy.initial_backoff_s,
        maximum=policy.max_backoff_s,
        multiplier=2.0,
        timeout=policy.deadline_s,
    )
