"""Which GCS endpoint to talk to, and whether it is an emulator (no credentials sent)."""

from __future__ import annotations

import os
import urllib.parse

GCS_ENDPOINT = "https://storage.googleapis.com"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The endpoint URL to use, normalized (scheme added, trailing '/' removed).

    Order: the ``endpoint`` argument, else ``$STORAGE_EMULATOR_HOST`` (as google-cloud-storage
    reads it, e.g. ``"http://127.0.0.1:9023"`` or ``"127.0.0.1:9023"``), else
    ``https://storage.googleapis.com``. A value without a scheme gets ``http://``.

    Raises:
        ValueError: the chosen value is empty or has no host.
    """
    value = endpoint if endpoint is not None else os.environ.get(EMULATOR_ENV) or GCS_ENDPOINT
    value = value.strip().rstrip("/")
    if not value:
        raise ValueError("GCS endpoint is empty")
    if "://" not in value:
        value = "http://" + value
    if not urllib.parse.urlsplit(value).hostname:
        raise ValueError(f"GCS endpoint {value!r} has no host")
    return value


def is_emulator_endpoint(endpoint: str) -> bool:
    """True unless ``endpoint`` is a Google API host (``googleapis.com`` or a subdomain).

    Emulators and local stand-ins (loopback, private hosts) get no Authorization header.
    """
    host = urllib.parse.urlsplit(resolve_endpoint(endpoint)).hostname or ""
    return not (host == "googleapis.com" or host.endswith(".googleapis.com"))


def quote_object(name: str) -> str:
    """Percent-encodes an object name for a URL path segment (UTF-8, nothing left unescaped, as
    GCS requires: '/' becomes %2F)."""
    return urllib.parse.quote(name, safe="")


def media_path(bucket: str, name: str) -> str:
    """The JSON API media download path of gs://bucket/name,
    ``/download/storage/v1/b/{bucket}/o/{name}?alt=media`` (the path the C++ side's url.cc
    builds too)."""
    return f"/download/storage/v1/b/{quote_object(bucket)}/o/{quote_object(name)}?alt=media"
