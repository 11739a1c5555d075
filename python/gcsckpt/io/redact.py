"""Removes credentials from text that came from a server (error bodies quoted in messages).

A server, or a proxy in front of it, may echo request headers into an error body; an error that
quotes that body must not carry the token on into logs, tracebacks or pickles. The C++ engine
already redacts the token it sent; this is the Python side's one net for every error type
(RangeReadError, ObjectStoreError and the ObjectStore's other errors, CheckpointReadError).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "<redacted>"

# "Bearer <token>" in any case (header echoes), the token being its run of RFC 6750 token
# characters, as the C++ engine's RedactCredentials reads it (cc/gcsio/response_check.cc): the
# text after it (a quote, a comma, the rest of the echoed body) is kept. And Google OAuth2
# access tokens ("ya29....") wherever they stand.
_PATTERNS = (
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]+=*"),
    re.compile(r"\bya29\.[0-9A-Za-z_\-.]+"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (non-empty str) and every bearer token replaced.

    Tokens become ``<redacted>``; ``Bearer abc`` becomes ``Bearer <redacted>``.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _PATTERNS[0].sub(lambda m: m.group(1) + REDACTED, text)
    return _PATTERNS[1].sub(REDACTED, text)


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
