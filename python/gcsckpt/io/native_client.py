"""The native clients: what the range reader (`gcsckpt.io.range_reader.RangeReader`) and the
uploader (`gcsckpt.io.uploader.Uploader`) share when they build their C++ object
(`_gcsio.RangeReader`, `_gcsio.Uploader`): the option checks, and the C++ object's retry policy
fields, token source and credential description; and the front (`NativeClientFront`: options,
context manager, repr) of both."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Self

from gcsckpt.io.auth import READ_ONLY_SCOPE, native_token_source
from gcsckpt.io.retry import RetryPolicy


def check_client_options(retry: RetryPolicy, counts: Mapping[str, int]) -> None:
    """Checks the options every native client takes.

    Args:
        retry: must be a RetryPolicy.
        counts: option name -> value; each must be an int >= 1 (requests, bytes, threads).

    Raises:
        TypeError: ``retry`` is no RetryPolicy.
        ValueError: a count is not an int >= 1 (the message names it and its value).
    """
    if not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
    for name, value in counts.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def start_native_client(
    client_class: Callable,
    endpoint: str,
    retry: RetryPolicy,
    token_provider: Callable[[], str] | None,
    send_token: bool | None,
    options: Mapping,
    *,
    scope: str = READ_ONLY_SCOPE,
) -> tuple:
    """Builds ``client_class`` (``_gcsio.RangeReader`` or ``_gcsio.Uploader``) for ``endpoint`` with
    ``retry``'s attempts, backoffs and deadline (seconds), the credentials of
    ``gcsckpt.io.auth.native_token_source`` (with ``scope`` for ADC) and the tuning
    ``options`` (keyword arguments: bytes, seconds, counts).

    Returns:
        ``(client, credential_description)``: the description names the credential in
        401/403 errors, never the token.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: a token is needed, none was given and
            no ADC is configured.
    """
    source, credential = native_token_source(endpoint, token_provider, send_token, scope=scope)
    client = client_class(
        endpoint=endpoint,
        max_attempts=retry.max_attempts,
        initial_backoff_s=retry.initial_backoff_s,
        max_backoff_s=retry.max_backoff_s,
        deadline_s=retry.deadline_s,
        token_source=source,
        credential_description=credential,
        **options,
    )
    return client, credential


class NativeClientFront:
    """What RangeReader and Uploader show the same way. A subclass sets ``endpoint`` (str),
    ``retry`` (RetryPolicy), ``credential_description`` (str) and ``_options`` (the tuning
    options given to the C++ object) and defines ``close()``."""

    endpoint: str
    retry: RetryPolicy
    credential_description: str
    _options: dict

    @property
    def options(self) -> dict:
        """The tuning options it runs with (bytes, seconds, counts); a copy."""
        return dict(self._options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self._options.items())
        return (
            f"{type(self).__name__}({self.endpoint!r}, {opts}, retry={self.retry}, "
            f"credential={self.credential_description!r})"
        )
