"""The names under a run's ``step-`` folders, listed with each arm's own client, as its user
would: gcsckpt's ObjectStore, or gcsfs. Which steps are committed (``.metadata`` is written last,
so a folder without it is a save that never finished) is the library's one definition,
``gcsckpt.dcp.steps.committed_steps``, applied to either arm's names."""

from __future__ import annotations


def split_url(base_url: str) -> tuple[str, str]:
    """(bucket, prefix) of ``gs://bucket/prefix``.

    Raises:
      ValueError: not a gs:// URL with a bucket.
    """
    if not base_url.startswith("gs://") or not base_url[5:].split("/", 1)[0]:
        raise ValueError(f"checkpoint prefix {base_url!r} is not gs://bucket/prefix")
    bucket, _, prefix = base_url[5:].partition("/")
    return bucket, prefix.strip("/")


def list_names(reader: str, bucket: str, prefix: str, endpoint: str | None) -> list[str]:
    """Every object name below ``<prefix>/step-`` of `bucket`, listed with arm `reader`'s client:
    ``gcsckpt`` with gcsckpt's ObjectStore, ``fsspec`` with gcsfs (``find``).

    Raises:
      ValueError: another arm.
    """
    head = f"{prefix}/step-" if prefix else "step-"
    if reader == "gcsckpt":
        from gcsckpt.io import ObjectStore

        with ObjectStore(endpoint) as store:
            return store.list(bucket, head)
    if reader == "fsspec":
        import gcsfs

        from ckptbench.worker.baseline import fsspec_storage_options

        fs = gcsfs.GCSFileSystem(**fsspec_storage_options(endpoint))
        names = [path.partition("/")[2] for path in fs.find(f"{bucket}/{prefix}".rstrip("/"))]
        return [name for name in names if name.startswith(head)]
    raise ValueError(f"reader {reader!r} has no listing here; known: gcsckpt, fsspec")
