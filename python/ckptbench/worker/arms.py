"""The benchmark's arms: each reader and writer it compares, made for the endpoint in use.

Readers (``--readers``) and writers (``--writers``): ``gcsckpt`` (GCSStorageReader / -Writer
with their defaults; ``gcsckpt-unverified`` the same with block checksums off, to measure their
cost), ``fsspec`` (torch's stock FsspecReader / -Writer over gcsfs, see
``baseline``), ``msc`` (multi-storage-client's DCP reader / writer on its GCS provider, with its
documented tuning), ``dataflux`` (gcs-torch-dataflux's DCP reader / writer with its defaults, on
a venv of its own) and, writers only, ``localfs`` (torch's stock FileSystemWriter into a
node-local folder: a reference for what ``dcp.save`` costs when storage is nearly free, never a
peer). Each arm is built as its own docs use it, pointed at a local endpoint with anonymous
credentials or at real GCS with Application Default Credentials, and never tuned to suit the
endpoint: an arm the endpoint cannot serve is reported failed with its error. Every arm's
settings are returned by :func:`reader_settings` / :func:`writer_settings` and go into the
result rows (``reader_options_json`` / ``writer_options_json``). Each arm's settings and why:
docs/design.md, "The benchmark's arms"; the figures behind them: docs/measurements.md, "msc
reader settings".
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from typing import Any

from ckptbench.roles import (
    CANDIDATE,
    CANDIDATES,
    LOCALFS,
    READ_ONCE,
    READERS,
    UNVERIFIED,
    WRITERS,
)

# localfs: /dev/shm has room for a case when twice its bytes are free there and three times
# are available as memory (tmpfs pages are memory; the ranks also hold the state being saved
# and, verifying, the state loaded back).
LOCAL_TMPFS = "/dev/shm"
LOCAL_TMPFS_FREE_FACTOR = 2
LOCAL_MEMORY_FACTOR = 3

MiB = 1 << 20
MSC_READER_THREADS = 8
MSC_WRITER_THREADS = 4
MSC_CACHE_SIZE = "64G"  # a bound, not an allocation: larger than any checkpoint of the catalogue
# The GCS provider's documented upload settings (multistorageclient.providers.gcs defaults).
MSC_UPLOAD_OPTIONS = {
    "multipart_threshold": 64 * MiB,
    "multipart_chunksize": 32 * MiB,
    "max_concurrency": 8,
}
# gcs-torch-dataflux 1.4.0's upload (dataflux_pytorch.multipart_upload.multipart defaults).
DATAFLUX_PART_BYTES = 32 * MiB
DATAFLUX_PART_WORKERS = 8
DATAFLUX_PROJECT = "gcsckpt-bench"  # google-cloud-storage needs a project name; GCS ignores it
DATAFLUX_PYTHON = os.environ.get("GCSCKPT_DATAFLUX_PYTHON", "/opt/gcsckpt/dataflux-venv/bin/python")


def arm_python(arm: str) -> str | None:
    """The interpreter arm ``arm``'s rank processes run on; None: the runner's own.

    Raises:
      FileNotFoundError: the arm's venv is missing (the message says how to build it).
    """
    if arm != "dataflux":
        return None
    if not os.access(DATAFLUX_PYTHON, os.X_OK):
        raise FileNotFoundError(
            f"the dataflux arm's interpreter {DATAFLUX_PYTHON} is missing: build it with "
            "tools/peers/dataflux/venv.sh (tools/bazel does) or set GCSCKPT_DATAFLUX_PYTHON"
        )
    return DATAFLUX_PYTHON


def _version(name: str) -> str | None:
    from ckptbench.record.host import package_version

    return package_version(name)


def reader_settings(reader: str, emulator: bool) -> dict[str, Any]:
    """What identifies ``reader``'s setup in the results (JSON-ready).

    Raises:
      ValueError: an unknown reader.
    """
    if reader == "gcsckpt":
        return {"class": "gcsckpt.dcp.GCSStorageReader", "options": "defaults"}
    if reader == UNVERIFIED:
        return {"class": "gcsckpt.dcp.GCSStorageReader", "options": {"verify": False}}
    if reader == READ_ONCE:
        return {"class": "gcsckpt.dcp.GCSStorageReader", "options": {"read_once": True}}
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
    if reader == "dataflux":
        return {
            "class": "dataflux_pytorch.lightning.gcs_filesystem.GCSDistributedReader",
            "gcs_torch_dataflux_version": "1.4.0",
            "google_cloud_storage_version": "2.19.0",
            "options": "defaults",
            "reads": "each object a rank reads, downloaded whole",
            "anonymous_credentials": emulator,
        }
    raise ValueError(f"reader {reader!r} is unknown; known: {', '.join(READERS)}")


def writer_settings(writer: str, emulator: bool, local_root: str | None = None) -> dict[str, Any]:
    """What identifies ``writer``'s setup in the results (JSON-ready).

    Args:
      writer: one of WRITERS.
      emulator: the storage is an emulator endpoint.
      local_root: ``localfs`` only: the folder its saves went below (:func:`local_save_root`;
        None: the job's scratch dir).

    Raises:
      ValueError: an unknown writer.
    """
    if writer == LOCALFS:
        if local_root == LOCAL_TMPFS:
            folder = f"{LOCAL_TMPFS} (tmpfs)"
        else:
            folder = f"job scratch dir below {local_root or tempfile.gettempdir()}"
        return {
            "class": "torch.distributed.checkpoint.FileSystemWriter",
            "options": "defaults",
            "single_file_per_rank": True,
            "sync_files": True,
            "thread_count": 1,
            "folder": folder,
            "role": "reference: dcp.save with storage nearly free; not a peer",
            "verified_by": "stock FileSystemReader on the saved folder itself",
        }
    if writer == "gcsckpt":
        return {"class": "gcsckpt.dcp.GCSStorageWriter", "options": "defaults"}
    if writer == UNVERIFIED:
        return {"class": "gcsckpt.dcp.GCSStorageWriter", "options": {"checksum_block_bytes": 0}}
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
            "multipart_upload": "XML API, objects above multipart_threshold",
            "multipart_threshold_bytes": MSC_UPLOAD_OPTIONS["multipart_threshold"],
            "multipart_chunksize_bytes": MSC_UPLOAD_OPTIONS["multipart_chunksize"],
            "max_concurrency": MSC_UPLOAD_OPTIONS["max_concurrency"],
        }
        return settings
    if writer == "dataflux":
        return {
            "class": "dataflux_pytorch.lightning.gcs_filesystem.GCSDistributedWriter",
            "gcs_torch_dataflux_version": "1.4.0",
            "google_cloud_storage_version": "2.19.0",
            "thread_count": 1,
            "multipart_upload": "XML API, every object",
            "part_bytes": DATAFLUX_PART_BYTES,
            "part_workers": DATAFLUX_PART_WORKERS,
            "part_checksum": "crc32c",
            "anonymous_credentials": emulator,
            "compat": "second close() of the upload buffer is a no-op (torch 2.13 closes first)",
        }
    raise ValueError(f"writer {writer!r} is unknown; known: {', '.join(WRITERS)}")


def local_save_root(checkpoint_bytes: int | None) -> str | None:
    """Where the ``localfs`` reference saves a case of ``checkpoint_bytes``: ``/dev/shm`` when
    it has room (twice the bytes free on it and three times available as memory), else None
    (the job's scratch dir, on the temp folder). Unknown size: None.
    """
    if checkpoint_bytes is None or not os.path.isdir(LOCAL_TMPFS):
        return None
    import psutil

    free = shutil.disk_usage(LOCAL_TMPFS).free
    available = psutil.virtual_memory().available
    if (
        free >= LOCAL_TMPFS_FREE_FACTOR * checkpoint_bytes
        and available >= LOCAL_MEMORY_FACTOR * checkpoint_bytes
    ):
        return LOCAL_TMPFS
    return None


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
        options: dict[str, Any] = {"base_path": bucket, **MSC_UPLOAD_OPTIONS}
        if endpoint is not None:
            options.update(endpoint_url=endpoint, skip_signature=True)
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


def _dataflux_classes():
    """(GCSDistributedReader, GCSDistributedWriter) without running the
    ``dataflux_pytorch.lightning`` package ``__init__`` (it imports lightning for classes this
    arm does not use; docs/design.md, "The benchmark's arms"): the package is registered
    uninitialized, with its search path, so only ``gcs_filesystem`` and what it imports run.

    One compatibility fix, recorded in the writer's settings: gcs-torch-dataflux 1.4.0's upload
    buffer (``DatafluxCheckpointBuffer``) uploads on every ``close()``, and torch 2.13's
    FileSystemWriter closes each stream itself before its ``with`` block ends, so the block's
    own close uploaded again from the closed buffer (``ValueError: I/O operation on closed
    file``; every save failed). The buffer used here makes a second close a no-op: each object
    is still uploaded exactly once, by dataflux's own multipart code, at torch's close.
    """
    name = "dataflux_pytorch.lightning"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)  # imports the parent package, not this one
        if spec is None:
            raise ImportError(f"{name} is not installed (gcs-torch-dataflux 1.4.0)")
        sys.modules[name] = importlib.util.module_from_spec(spec)
    from dataflux_pytorch.lightning import gcs_filesystem

    buffer = gcs_filesystem.DatafluxCheckpointBuffer
    if not getattr(buffer, "_gcsckpt_close_once", False):

        class CloseOnceBuffer(buffer):
            _gcsckpt_close_once = True

            def close(self) -> None:
                if not self.closed:
                    super().close()

        gcs_filesystem.DatafluxCheckpointBuffer = CloseOnceBuffer
    return gcs_filesystem.GCSDistributedReader, gcs_filesystem.GCSDistributedWriter


def _dataflux_client(endpoint: str | None):
    """google-cloud-storage client for the dataflux arm: anonymous at an emulator, else ADC."""
    if endpoint is not None:
        from gcsckpt.testing.clients import storage_client

        return storage_client(endpoint, project=DATAFLUX_PROJECT)
    from google.cloud import storage

    return storage.Client()


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
    if reader in CANDIDATES:
        from gcsckpt.dcp import GCSStorageReader

        return GCSStorageReader(
            url,
            endpoint=endpoint,
            verify=reader != UNVERIFIED,
            **({"read_once": True} if reader == READ_ONCE else {}),
        )
    if reader == "fsspec":
        from ckptbench.worker import baseline

        return baseline.make_fsspec_reader(url, endpoint)
    if reader == "msc":
        if msc is None:
            raise ValueError("the msc reader needs its round's MSCProfile")
        from multistorageclient.contrib.torch import MultiStorageFileSystemReader

        return MultiStorageFileSystemReader(msc.url(prefix), thread_count=MSC_READER_THREADS)
    if reader == "dataflux":
        reader_class, _ = _dataflux_classes()
        client = _dataflux_client(endpoint)
        return reader_class(url, client.project, storage_client=client)
    raise ValueError(f"reader {reader!r} is unknown; known: {', '.join(READERS)}")


def make_writer(
    writer: str,
    bucket: str,
    prefix: str,
    endpoint: str | None,
    msc: MSCProfile | None = None,
    folder: str | None = None,
):
    """A fresh StorageWriter of arm ``writer`` for ``gs://bucket/prefix`` (overwrite on); for
    ``localfs``, for the local ``folder`` instead.

    Raises:
      ValueError: an unknown writer, ``msc`` without a profile, or ``localfs`` without a folder.
    """
    if writer == LOCALFS:
        if folder is None:
            raise ValueError("the localfs writer needs its round's local folder")
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(folder)
    url = f"gs://{bucket}/{prefix}"
    if writer in CANDIDATES:
        from gcsckpt.dcp import GCSStorageWriter

        block_bytes = {} if writer == CANDIDATE else {"checksum_block_bytes": 0}
        return GCSStorageWriter(url, endpoint=endpoint, overwrite=True, **block_bytes)
    if writer == "fsspec":
        from ckptbench.worker import baseline

        return baseline.make_fsspec_writer(url, endpoint)
    if writer == "msc":
        if msc is None:
            raise ValueError("the msc writer needs its round's MSCProfile")
        from multistorageclient.contrib.torch import MultiStorageFileSystemWriter

        return MultiStorageFileSystemWriter(
            msc.url(prefix), thread_count=MSC_WRITER_THREADS, overwrite=True
        )
    if writer == "dataflux":
        _, writer_class = _dataflux_classes()
        client = _dataflux_client(endpoint)
        return writer_class(url, client.project, storage_client=client, overwrite=True)
    raise ValueError(f"writer {writer!r} is unknown; known: {', '.join(WRITERS)}")
