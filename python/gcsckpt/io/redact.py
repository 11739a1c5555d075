"""Removes credentials from text that came from a server (error bodies quoted in messages).

A server, or a proxy in front of it, may echo request headers into an error body; an error that
quotes that body must not carry the token on into logs, tracebacks or pickles. The C++ side
already redacts the token it sent; this is the Python side's one net for every error type
(RangeReadError, ObjectStoreError and the ObjectStore's other errors, CheckpointReadError).
"""

from __future__ import annotations

from collections.abc import Iterable

from gcsckpt.io.extension import _gcsio

REDACTED = "<redacted>"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (non-empty str), every bearer token and every Google
    access token (``ya29.``) replaced by ``<redacted>``; ``Bearer abc`` becomes
    ``Bearer <redacted>`` and the text after a token is kept.

    The rule is the C++ side's (``RedactCredentials``, cc/gcsio/outcome.cc), called
    through ``_gcsio``, so both sides redact alike.
    """
    for secret in secrets:
        if secret:
            text = _gcsio.redact_credentials(text, secret)
    return _gcsio.redact_credentials(text)


def redact_value(value, secrets: Iterable[str] = ()):
    """``redact`` applied to every str inside ``value`` (str, dict, list, tuple; others as is)."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v, secrets) for v in value)
    return value
