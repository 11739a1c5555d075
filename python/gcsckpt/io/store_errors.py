"""How ObjectStore's google-cloud-storage failures become the package's errors.

One mapping for every control-plane request: 404 -> FileNotFoundError, 412 -> FileExistsError
(with the attempts made), anything else -> ``ObjectStoreError`` naming the method, the gs://
URL, the status or connection error, the attempts and a short server message. Kept apart from
``gcsckpt.io.objects`` so the client reads as requests, not as error plumbing; no message ever
carries a bearer token (``gcsckpt.io.redact``).
"""

from __future__ import annotations

import json

from gcsckpt.io.errors import after_attempts
from gcsckpt.io.redact import redact
from gcsckpt.io.retry import ATTEMPTS_ATTR

_SNIPPET_CHARS = 200  # of a server's error text kept in messages


class ObjectStoreError(IOError):
    """A GCS request failed for good; the message names method, gs:// URL, status (or the
    connection error), the attempts made and a short, token-free server message.

    A failed conditional ``ObjectStore.upload`` sets ``landed``: False when the object does
    not hold the bytes sent (nothing of the upload is visible), None when that could not be
    told (reading the object back failed too). Other failures have no ``landed`` attribute.
    """


def gcs_error_shape(response, *args, **kwargs):
    """A `requests` response hook: gives an error answer whose JSON body is not GCS's shape
    (`{"error": "Not Found"}`, a bare string: proxies, other servers) GCS's
    `{"error": {"code": status, "message": text}}`, so google-api-core maps it to its status
    (it raises AttributeError on such bodies) and the message quotes the server's text.

    Returns the response (changed in place when its status is >= 400 and its body is JSON
    without an `error` object).
    """
    if response.status_code < 400:
        return response
    try:
        payload = json.loads(response.content or b"null")
    except ValueError:
        return response  # not JSON: api_core quotes the text as it is
    error = payload.get("error") if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        return response
    message = error if isinstance(error, str) and error else response.text
    body = {"error": {"code": response.status_code, "message": message[:_SNIPPET_CHARS]}}
    response._content = json.dumps(body).encode()  # what `.json()` and `.text` read
    return response


def _server_message(exc: BaseException) -> str:
    """The server's own error text: the JSON API's `error.message`, else the body, else the
    library's message."""
    text = getattr(getattr(exc, "response", None), "text", None)
    if not text:
        return str(getattr(exc, "message", None) or exc)
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an api_core error or a media `InvalidResponse`, else None."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _cause(exc: BaseException) -> str:
    """Status and a short server message (api_core errors, media InvalidResponse), else the
    connection error's type and text; never a bearer token."""
    status = _status(exc)
    if status is not None:
        cause = f"HTTP {status} {redact(_server_message(exc))[:_SNIPPET_CHARS]!r}"
    else:
        cause = f"{type(exc).__name__}: {redact(str(exc))[:_SNIPPET_CHARS]}"
    notes = getattr(exc, "__notes__", None)
    return cause + "".join(f" ({note})" for note in notes or ())


def _attempts(exc: BaseException) -> int:
    """Attempts the retry made, from `exc` or the error it was raised from (google-cloud-storage
    re-raises media errors as api_core errors after the retry gave up)."""
    seen: BaseException | None = exc
    while seen is not None:
        attempts = getattr(seen, ATTEMPTS_ATTR, None)
        if attempts:
            return attempts
        seen = seen.__cause__ or seen.__context__
    return 1


def store_error(method: str, what: str, exc: BaseException, credential: str = "") -> OSError:
    """The package's error for a failed library call on `what` (a gs:// URL) by `method`;
    `credential` names the credential source and endpoint (never a token), quoted for HTTP
    401/403.

    Returns:
        FileNotFoundError for HTTP 404; FileExistsError for 412 (a refused precondition), whose
        ``attempts`` attribute counts the attempts made (1: the first was refused); else
        ObjectStoreError.
    """
    status = _status(exc)
    if status == 404:
        return FileNotFoundError(f"{what}: not found (HTTP 404)")
    if status == 412:
        refused = FileExistsError(f"{what}: precondition failed (HTTP 412), the object exists")
        refused.attempts = _attempts(exc)
        return refused
    denied = ""
    if status in (401, 403) and credential:
        denied = f" (permission denied for credential {redact(credential)})"
    return ObjectStoreError(
        f"{method} {what} failed {after_attempts(_attempts(exc))}: {_cause(exc)}{denied}"
    )
