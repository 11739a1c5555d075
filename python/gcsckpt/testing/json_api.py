"""Minimal GCS JSON API calls over http.client: create a bucket, upload and download an object.

Used to seed and check a local endpoint without the weight of google-cloud-storage.
Object names are percent-encoded with no safe characters, as GCS requires ('/' becomes %2F).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

from gcsckpt.io.endpoint import media_path, quote_object

__all__ = ["GCSHTTPError", "create_bucket", "download", "media_path", "quote_object", "upload"]


class GCSHTTPError(RuntimeError):
    """A JSON API call answered an unexpected status.

    Attributes:
      status: the HTTP status.
      what: what was asked, e.g. "upload gs://bucket/object".
    """

    def __init__(self, what: str, status: int, body: bytes) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:300]!r}")
        self.status = status
        self.what = what


def _call(
    endpoint: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> tuple[int, bytes]:
    url = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def create_bucket(
    endpoint: str,
    bucket: str,
    project: str = "test",
    exist_ok: bool = True,
    soft_delete_retention_s: int | None = None,
) -> None:
    """Creates `bucket`; an existing one is fine when `exist_ok`.

    `soft_delete_retention_s`: the bucket's `softDeletePolicy.retentionDurationSeconds` (0: no
    soft delete, deletes are final), set by a PATCH of the bucket (so that an existing bucket
    gets it too); None leaves GCS's default for new buckets (7 days).

    Raises:
      GCSHTTPError: any other answer than 200 (or 409 with `exist_ok`), or a refused PATCH.
    """
    status, body = _call(
        endpoint,
        "POST",
        f"/storage/v1/b?project={urllib.parse.quote(project)}",
        json.dumps({"name": bucket}).encode(),
        {"Content-Type": "application/json"},
    )
    if not (status == 200 or (status == 409 and exist_ok)):
        raise GCSHTTPError(f"create bucket {bucket!r}", status, body)
    if soft_delete_retention_s is None:
        return
    policy = {"softDeletePolicy": {"retentionDurationSeconds": str(soft_delete_retention_s)}}
    status, body = _call(
        endpoint,
        "PATCH",
        f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}",
        json.dumps(policy).encode(),
        {"Content-Type": "application/json"},
    )
    if status != 200:
        raise GCSHTTPError(f"set soft delete policy of bucket {bucket!r}", status, body)


def upload(endpoint: str, bucket: str, name: str, data: bytes) -> dict:
    """Uploads `data` (bytes) as gs://bucket/name in one simple media upload.

    Returns:
      The object resource (dict) the server answered.
    Raises:
      FileNotFoundError: the bucket does not exist.
      GCSHTTPError: any other failure.
    """
    path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote_object(name)}"
    payload, content_type = bytes(data), "application/octet-stream"
    status, body = _call(endpoint, "POST", path, payload, {"Content-Type": content_type})
    if status == 404:
        raise FileNotFoundError(f"upload gs://{bucket}/{name}: bucket {bucket!r} does not exist")
    if status != 200:
        raise GCSHTTPError(f"upload gs://{bucket}/{name}", status, body)
    return json.loads(body)


def download(endpoint: str, bucket: str, name: str) -> bytes:
    """The whole content of gs://bucket/name, by one media GET.

    Raises:
      FileNotFoundError: the bucket or object does not exist (HTTP 404).
      GCSHTTPError: any other status.
    """
    status, body = _call(endpoint, "GET", media_path(bucket, name))
    if status == 404:
        raise FileNotFoundError(f"gs://{bucket}/{name} does not exist (bucket or object)")
    if status != 200:
        raise GCSHTTPError(f"download gs://{bucket}/{name}", status, body)
    return body
