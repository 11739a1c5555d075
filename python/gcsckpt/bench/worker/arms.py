"""The benchmark's arms: each reader and writer it compares, made for the endpoint in use.

Readers (``--readers``) and writers (``--writers``):

- ``gcsckpt``: ``gcsckpt.dcp.GCSStorageReader`` / ``GCSStorageWriter`` with their defaults.
- ``fsspec``: torch's stock ``FsspecReader`` / ``FsspecWriter`` over gcsfs, as shipped (see
  ``baseline``).
- ``msc``: multi-storage-client's ``MultiStorageFileSystemReader`` / ``-Writer``
  (``multistorageclient.contrib.torch``) on its GCS provider (google-cloud-storage). Its docs'
  tuning: the reader's ``thread_count`` prefetches whole objects in parallel, and a node-local
  file cache (``caching_enabled``) makes the ranks of one machine fetch each object once.
  Measured here (8 gloo ranks, scaled OLMoE, local endpoint): thread_count=8 with the cache,
  23.7 s (fsdp) and 6.9-8.5 s (ep) per load, against 25-26 s and 12-13 s with its defaults;
  so that is the setting used. The writer runs with ``thread_count=4`` (the objects per rank
  GCSStorageWriter writes by default, so both upload the same number of objects in parallel).

MSC is configured through a profile file (``MSC_CONFIG``): a ``type: gcs`` storage provider
with ``base_path`` = the bucket; for an emulator also ``endpoint_url`` and ``skip_signature:
true`` (anonymous credentials); for real GCS neither, so google-cloud-storage uses Application
Default Credentials. The embedded endpoint (gcp-storage-emulator) has no XML multipart upload,
which MSC's GCS provider uses for objects above ``multipart_threshold`` (64 MiB by default;
the upload fails with 501), so against an emulator the threshold is raised past any object
(single-request uploads); against real GCS MSC keeps its default. Each timed round gets its own
profile name and its own empty cache folder, so no round reads what an earlier one cached and
MSC's per-profile client cache starts fresh; the folder is removed after the round.

Every arm's settings are returned by :func:`reader_settings` / :func:`writer_settings` and go
into the result rows (``reader_options_json``).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

READERS = ("gcsckpt", "fsspec", "msc")
WRITERS = ("gcsckpt", "fsspec", "msc")

MSC_READER_THREADS = 8
MSC_WRITER_THREADS = 4
MSC_CACHE_SIZE = "64G"  # a bound, not an allocation: larger than any checkpoint of the catalogue
# Past any object the benchmark writes: single-request uploads on an emulator (no XML multipart).
MSC_EMULATOR_MULTIPART_THRESHOLD = 1 << 40


def _version(name: str) -> str | None:
    from gcsckpt.bench.record.host import package_version

    return package_version(name)


def reader_settings(reader: str, emulator: bool) -> dict[str, Any]:
    """What identifies ``reader``'s setup in the results (JSON-ready).

    Raises:
      ValueError: an unknown reader.
    """
    if reader == "gcsckpt":
        return {"class": "gcsckpt.dcp.GCSStorageReader", "options": "defaults"}
    if reader == "fsspec":
        return {
            "class": "torch.distributed.checkpoint._fsspec_filesystem.FsspecReader",
            "filesystem": "gcsfs",
            "gcsfs_version": _version("gcsfs"),
            "fsspec_version": _version("fsspec"),
            "options": "defaults",
        }
    if reader == "msc":
        return {
            "class": "multistorageclient.contrib.torch.MultiStorageFileSystemReader",
            "msc_version": _version("multi-storage-client"),
            "provider": "gcs",
            "thread_count": MSC_READER_THREADS,
            "node_local_cache": True,
            "cache_scope": "one empty cache folder per round, shared by the node's ranks",
            "skip_signature": emulator,
        }
    raise ValueError(f"reader {reader!r} is unknown; known: {', '.join(READERS)}")


def writer_settings(writer: str, emulator: bool) -> dict[str, Any]:
    """What identifies ``writer``'s setup in the results (JSON-ready).

    Raises:
      ValueError: an unknown writer.
    """
    if writer == "gcsckpt":
        return {"class": "gcsckpt.dcp.GCSStorageWriter", "options": "defaults"}
    if writer == "fsspec":
        return {
            "class": "torch.distributed.checkpoint._fsspec_filesystem.FsspecWriter",
            "filesystem": "gcsfs",
            "gcsfs_version": _version("gcsfs"),
            "fsspec_version": _version("fsspec"),
            "options": "defaults",
        }
    if writer == "msc":
        settings: dict[str, Any] = {
            "class": "multistorageclient.contrib.torch.MultiStorageFileSystemWriter",
            "msc_version": _version("multi-storage-client"),
            "provider": "gcs",
            "thread_count": MSC_WRITER_THREADS,
            "skip_signature": emulator,
            "multipart_upload": not emulator,
        }
        if emulator:
            settings["multipart_threshold_bytes"] = MSC_EMULATOR_MULTIPART_THRESHOLD
            settings["why_no_multipart"] = "the emulator has no XML multipart upload"
        return settings
    raise ValueError(f"writer {writer!r} is unknown; known: {', '.join(WRITERS)}")


class MSCProfile:
    """One MSC profile for one round: a config file, a cache folder, and the ``msc://`` URL.

    Args:
      work_dir: a folder private to this round, the same path on every rank of the node
        (holds ``msc_config.json`` and ``cache/``); created here, removed by ``close``.
      profile: the profile name (new per round, so MSC's per-profile client cache is fresh).
      bucket: GCS bucket.
      endpoint: emulator URL, or None for real GCS (Application Default Credentials).
      cache: use the node-local file cache (the reader's tuning); False for writers.

    ``MSC_CONFIG`` is pointed at the file; MSC reads it when the profile is first resolved.
    """

    def __init__(
        self, work_dir: str, profile: str, bucket: str, endpoint: str | None, cache: bool
    ) -> None:
        self.work_dir = work_dir
        self.profile = profile
        options: dict[str, Any] = {"base_path": bucket}
        if endpoint is not None:
            options.update(
                endpoint_url=endpoint,
                skip_signature=True,
                multipart_threshold=MSC_EMULATOR_MULTIPART_THRESHOLD,
            )
        entry: dict[str, Any] = {"storage_provider": {"type": "gcs", "options": options}}
        config: dict[str, Any] = {"profiles": {profile: entry}}
        if cache:
            entry["caching_enabled"] = True
            config["cache"] = {
                "size": MSC_CACHE_SIZE,
                "location": os.path.join(work_dir, "cache"),
            }
        os.makedirs(work_dir, exist_ok=True)
        self.config_path = os.path.join(work_dir, "msc_config.json")
        # Every rank writes the same bytes; write-then-rename keeps readers off a partial file.
        partial = f"{self.config_path}.{os.getpid()}"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(config, f)
        os.replace(partial, self.config_path)
        os.environ["MSC_CONFIG"] = self.config_path

    def url(self, prefix: str) -> str:
        """``msc://<profile>/<prefix>`` for an object prefix in the bucket."""
        return f"msc://{self.profile}/{prefix}"

    def close(self) -> None:
        """Removes the round's folder (config and cache); missing files are fine."""
        shutil.rmtree(self.work_dir, ignore_errors=True)


def make_reader(
    reader: str, bucket: str, prefix: str, endpoint: str | None, msc: MSCProfile | None = None
):
    """A fresh StorageReader of arm ``reader`` for ``gs://bucket/prefix``.

    Args:
      reader: one of READERS.
      bucket, prefix: the checkpoint folder.
      endpoint: emulator URL or None (real GCS).
      msc: the round's MSCProfile (required for ``msc``).

    Raises:
      ValueError: an unknown reader, or ``msc`` without a profile.
    """
    url = f"gs://{bucket}/{prefix}"
    if reader == "gcsckpt":
        from gcsckpt.dcp import GCSStorageReader

        return GCSStorageReader(url, endpoint=endpoint)
    if reader == "fsspec":
        from gcsckpt.bench.worker import baseline

        return baseline.make_fsspec_reader(url, endpoint)
    if reader == "msc":
        if msc is None:
            raise ValueError("the msc reader needs its round's MSCProfile")
        from multistorageclient.contrib.torch import MultiStorageFileSystemReader

        return MultiStorageFileSystemReader(msc.url(prefix), thread_count=MSC_READER_THREADS)
    raise ValueError(f"reader {reader!r} is unknown; known: {', '.join(READERS)}")


def make_writer(
    writer: str, bucket: str, prefix: str, endpoint: str | None, msc: MSCProfile | None = None
):
    """A fresh StorageWriter of arm ``writer`` for ``gs://bucket/prefix`` (overwrite on).

    Raises:
      ValueError: an unknown writer, or ``msc`` without a profile.
    """
    url = f"gs://{bucket}/{prefix}"
    if writer == "gcsckpt":
        from gcsckpt.dcp import GCSStorageWriter

        return GCSStorageWriter(url, endpoint=endpoint, overwrite=True)
    if writer == "fsspec":
        from gcsckpt.bench.worker import baseline

        return baseline.make_fsspec_writer(url, endpoint)
    if writer == "msc":
        if msc is None:
            raise ValueError("the msc writer needs its round's MSCProfile")
        from multistorageclient.contrib.torch import MultiStorageFileSystemWriter

        return MultiStorageFileSystemWriter(
            msc.url(prefix), thread_count=MSC_WRITER_THREADS, overwrite=True
        )
    raise ValueError(f"writer {writer!r} is unknown; known: {', '.join(WRITERS)}")
