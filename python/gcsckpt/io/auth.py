"""Bearer tokens from Google Application Default Credentials (google-auth): the one token
provider of the package, for the C++ range reader (a callable) and for google-cloud-storage
(wrapped by `TokenProviderCredentials`)."""

from __future__ import annotations

import datetime
import threading

from gcsckpt.io import defaults

READ_ONLY_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
READ_WRITE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
# Refresh this long before expiry (the C++ token cache uses the same margin); google-auth itself
# treats tokens as stale ~3.75 min early.
REFRESH_MARGIN_S = defaults.TOKEN_REFRESH_MARGIN_S


class GoogleAuthTokenProvider:
    """Callable returning a valid OAuth2 access token (str) from google-auth credentials.

    Refreshes the credentials when they are invalid or expire within ``REFRESH_MARGIN_S``
    seconds. Thread-safe. The token never appears in ``repr``/``str``.

    Args:
        credentials: a ``google.auth.credentials.Credentials``; None loads Application Default
            Credentials with ``scope``.
        scope: OAuth2 scope for ADC (default ``devstorage.read_only``; uploads need
            ``READ_WRITE_SCOPE``).

    Raises:
        google.auth.exceptions.DefaultCredentialsError: no ADC is configured.
        google.auth.exceptions.RefreshError: (on call) the token could not be refreshed.
    """

    def __init__(self, credentials=None, scope: str = READ_ONLY_SCOPE):
        import google.auth
        import google.auth.transport.requests

        self._from_adc = credentials is None
        if credentials is None:
            credentials, _ = google.auth.default(scopes=[scope])
        self._credentials = credentials
        self._request = google.auth.transport.requests.Request()
        self._lock = threading.Lock()

    @property
    def description(self) -> str:
        """Which credential is used (account email or credential type, and whether it came from
        Application Default Credentials or was passed by the caller), for error messages."""
        kind = type(self._credentials).__name__
        source = "Application Default Credentials" if self._from_adc else "passed by the caller"
        email = getattr(self._credentials, "service_account_email", None)
        if isinstance(email, str) and email and email != "default":
            return f"{email} ({kind}, {source})"
        return f"{kind} ({source})"

    def token_with_expiry(self) -> tuple[str, float | None]:
        """(access token, expiry as Unix epoch seconds or None if unknown)."""
        with self._lock:
            expiry = self._credentials.expiry
            due = (
                expiry is not None and (expiry - _utcnow_naive()).total_seconds() < REFRESH_MARGIN_S
            )
            if not self._credentials.valid or not self._credentials.token or due:
                self._credentials.refresh(self._request)
            expiry = self._credentials.expiry
            epoch = None
            if expiry is not None:
                epoch = expiry.replace(tzinfo=datetime.UTC).timestamp()
            return self._credentials.token, epoch

    def __call__(self) -> str:
        return self.token_with_expiry()[0]

    def __repr__(self) -> str:
        return f"GoogleAuthTokenProvider({self.description})"


def _utcnow_naive() -> datetime.datetime:
    # google-auth keeps expiry as a naive UTC datetime.
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def default_token_provider(scope: str = READ_ONLY_SCOPE) -> GoogleAuthTokenProvider:
    """A token provider backed by Application Default Credentials with ``scope`` (default
    read-only GCS).

    Raises:
        google.auth.exceptions.DefaultCredentialsError: no ADC is configured.
    """
    return GoogleAuthTokenProvider(scope=scope)


def sends_token(endpoint: str, token_provider, send_token: bool | None = None) -> bool:
    """Whether requests to ``endpoint`` carry a bearer token: ``send_token`` when given, else
    always when the caller passed a ``token_provider`` (private endpoints and gateways need
    it), else unless ``endpoint`` is an emulator (`gcsckpt.io.endpoint.is_emulator_endpoint`)."""
    from gcsckpt.io.endpoint import is_emulator_endpoint

    if send_token is not None:
        return bool(send_token)
    return token_provider is not None or not is_emulator_endpoint(endpoint)


def credential_source(endpoint: str, token_provider, send_token: bool | None = None) -> str:
    """Which credential source requests to ``endpoint`` use, as 401/403 errors name it (never
    the token): "token_provider passed by the caller (<name>)", "Application Default
    Credentials", "anonymous (emulator endpoint)" or "anonymous (send_token=False)"; a
    `GoogleAuthTokenProvider` describes itself (credential type, ADC or passed by the caller).
    It does not load ADC."""
    if not sends_token(endpoint, token_provider, send_token):
        return (
            "anonymous (send_token=False)"
            if send_token is False
            else ("anonymous (emulator endpoint)")
        )
    if token_provider is None:
        return "Application Default Credentials"
    described = getattr(token_provider, "description", None)
    if isinstance(described, str) and described:
        return described
    name = getattr(token_provider, "__qualname__", type(token_provider).__name__)
    return f"token_provider passed by the caller ({name})"


def native_token_source(
    endpoint: str, token_provider, send_token: bool | None, scope: str = READ_ONLY_SCOPE
) -> tuple:
    """What the native clients (`_gcsio.RangeReader`, `_gcsio.Uploader`) take as credentials:
    ``(source, description)``. ``source`` is None (send no token) or a callable returning a token or
    a ``(token, expires_at_epoch_s)`` tuple; ``description`` names the credential source and the
    endpoint in 401/403 errors (`credential_source`), never the token.

    Args:
        endpoint: the resolved endpoint; ``send_token=None`` sends a token when a
            ``token_provider`` is given, or else unless it is an emulator (`sends_token`).
        token_provider: a callable returning a token; None -> ADC with ``scope``.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: a token is needed, none was given and
            no ADC is configured.
    """
    if not sends_token(endpoint, token_provider, send_token):
        return None, f"{credential_source(endpoint, token_provider, send_token)} at {endpoint}"
    provider = token_provider if token_provider is not None else default_token_provider(scope)
    credential = credential_source(endpoint, provider, True)
    return getattr(provider, "token_with_expiry", provider), f"{credential} at {endpoint}"


def token_provider_credentials(token_provider):
    """google-auth credentials that put ``token_provider()`` (a callable returning an OAuth2
    access token, str) into every request's Authorization header, so google-cloud-storage uses
    the same tokens (and the same refresh margin) as the range reader. A 401 makes the
    transport call ``refresh`` and retry once, which asks the provider again."""
    import google.auth.credentials

    class TokenProviderCredentials(google.auth.credentials.Credentials):
        def refresh(self, request) -> None:
            self.token = token_provider()

        def before_request(self, request, method, url, headers) -> None:
            self.token = token_provider()
            headers["authorization"] = f"Bearer {self.token}"

        def __repr__(self) -> str:
            return f"TokenProviderCredentials({token_provider!r})"

    return TokenProviderCredentials()
