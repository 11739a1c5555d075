"""The run's bucket type, the last part of every case name: ``reg``, ``zon``, ``hns`` or ``local``.

A real bucket's (or an emulator's) type comes from its metadata (one ``buckets.get``):
``hns`` when its hierarchical namespace is enabled, ``zon`` for a zonal bucket (location type
``zone``, or storage class ``RAPID``), else ``reg``. The embedded local endpoint is ``local``
without asking it (it has no real bucket behind it).
"""

from __future__ import annotations

from typing import Any

from gcsckpt.bench.runner.storage import BenchStorage

LOCAL = "local"


def classify_bucket(bucket: Any) -> str:
    """``hns``, ``zon`` or ``reg`` for a ``google.cloud.storage.Bucket`` (metadata loaded)."""
    if bucket.hierarchical_namespace_enabled:
        return "hns"
    if (bucket.location_type or "").lower() == "zone" or bucket.storage_class == "RAPID":
        return "zon"
    return "reg"


def run_bucket_type(bucket_url: str | None, endpoint: str | None) -> str:
    """The type of the bucket a run uses (``--bucket``, ``--endpoint``); ``local`` without one.

    Raises:
      google.api_core.exceptions.GoogleAPICallError: the bucket's metadata cannot be read (e.g.
        NotFound, Forbidden); google.auth.exceptions.DefaultCredentialsError: no credentials.
    """
    if bucket_url is None:
        return LOCAL
    storage = BenchStorage(bucket_url, endpoint)
    # ObjectStore has no bucket-metadata call; its google-cloud-storage client (the one
    # transport, with its credentials and endpoint) answers buckets.get.
    client = storage.client._storage_client()
    try:
        return classify_bucket(client.get_bucket(storage.bucket))
    finally:
        storage.client.close()
