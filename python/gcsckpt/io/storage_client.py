"""The google-cloud-storage client under ``gcsckpt.io.ObjectStore``: anonymous against an
emulator endpoint, ``gcsckpt.io.auth`` credentials otherwise, on one keep-alive pool of
``pool_size`` connections (no urllib3 retries: the ``RetryPolicy`` owns them), with every error
body shaped for ``gcsckpt.io.store_errors``."""

from __future__ import annotations

import os
from collections.abc import Callable

from gcsckpt.io.auth import (
    READ_WRITE_SCOPE,
    GoogleAuthTokenProvider,
    credential_source,
    sends_token,
    token_provider_credentials,
)
from gcsckpt.io.store_errors import gcs_error_shape

# No project is needed for object calls; google-cloud-storage's anonymous client uses the same.
_NO_PROJECT = "<none>"


# google-cloud-storage's public switch (its maintainers' answer, googleapis/google-cloud-python
# #17650) for the bucket-metadata lookup it makes in a background thread on a client's first use
# of each bucket, only to label OpenTelemetry spans, with tracing on or off.
BUCKET_METADATA_LOOKUP_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def make_storage_client(
    endpoint: str, token_provider: Callable[[], str] | None, pool_size: int
) -> tuple:
    """Builds a ``google.cloud.storage.Client`` for ``endpoint`` (a resolved base URL).

    Sets $DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA=true unless it is set already (see
    ``ObjectStore``).

    Args:
        endpoint: the endpoint's base URL, already resolved (``gcsckpt.io.resolve_endpoint``).
        token_provider: callable returning an OAuth2 access token; None -> google-auth ADC
            (read-write scope) when the endpoint gets a token, else anonymous.
        pool_size: connections kept alive.

    Returns:
        ``(client, session, credential_description)``: the session is the client's keep-alive
        pool (the caller closes it); the description is the ADC source found (str) when ADC was
        used, else None (the caller's description stands).

    Raises:
        google.auth.exceptions.DefaultCredentialsError: ADC is needed and none is configured.
    """
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    os.environ.setdefault(BUCKET_METADATA_LOOKUP_ENV, "true")
    description = None
    if not sends_token(endpoint, token_provider):
        credentials = AnonymousCredentials()
        # Anonymous credentials cannot refresh: a 401 is reported as it came.
        session = AuthorizedSession(credentials, refresh_status_codes=())
    else:
        provider = token_provider or GoogleAuthTokenProvider(scope=READ_WRITE_SCOPE)
        if token_provider is None:
            description = credential_source(endpoint, provider)
        credentials = token_provider_credentials(provider)
        session = AuthorizedSession(credentials)
    session.hooks["response"].append(gcs_error_shape)  # error bodies of any shape
    # Retries belong to the RetryPolicy, not to urllib3; one pool per scheme.
    adapter = HTTPAdapter(pool_connections=2, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    client = storage.Client(
        project=_NO_PROJECT,
        credentials=credentials,
        _http=session,
        client_options={"api_endpoint": endpoint},
    )
    return client, session, description
