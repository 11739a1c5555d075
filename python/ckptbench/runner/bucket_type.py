"""The run's bucket type, the last part of every case name: ``reg``, ``zon``, ``hns`` or ``local``.

A real bucket's (or an emulator's) type comes from its metadata (one ``buckets.get``):
``hns`` when its hierarchical namespace is enabled, ``zon`` for a zonal bucket (location type
``zone``, or storage class ``RAPID``), else ``reg``. The embedded local endpoint is ``local``
without asking it (it has no real bucket behind it).
"""

from __future__ import annotations

from typing import Any

from ckptbench.runner.storage import BenchStorage

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
      FileNotFoundError: no such bucket; gcsckpt.io.ObjectStoreError: its metadata cannot be
        read (e.g. 403, or no credentials).
    """
    if bucket_url is None:
        return LOCAL
    storage = BenchStorage(bucket_url, endpoint)
    return classify_bucket(storage.client.bucket_metadata(storage.bucket))
