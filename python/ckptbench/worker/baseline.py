"""The stock baseline: torch's ``FsspecReader`` / ``FsspecWriter`` over gcsfs, plus an outside count
of their requests.

The reader is used exactly as shipped (default block size, cache and retries); the only addition
is a wrapper around ``GCSFileSystem._request`` (every gcsfs HTTP call goes through it) that counts
requests and response bytes, so the baseline's rows carry request counts like gcsckpt's. gcsfs
retries inside ``_request``, so retried attempts are not visible here (``retries`` stays None).

Against a local emulator, ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` must be set before gcsfs is
imported (else every call first waits on a gRPC probe: docs/measurements.md, "gcsfs's gRPC
probe"); this module sets it when asked for an emulator reader and imports gcsfs only then.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

_HNS_VAR = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"
_METADATA_OBJECT = ".metadata"


@dataclass
class RequestCounts:
    """gcsfs HTTP calls since the last ``reset``.

    Attributes:
      requests: completed HTTP calls (metadata, listing and media GETs).
      data_bytes: response body bytes of calls for objects other than ``.metadata``.
      metadata_bytes: response body bytes of calls for ``.metadata``.
    """

    requests: int = 0
    data_bytes: int = 0
    metadata_bytes: int = 0


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = RequestCounts()

    def add(self, url: str, body: bytes) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        with self._lock:
            self.counts.requests += 1
            if path.endswith(_METADATA_OBJECT):
                self.counts.metadata_bytes += len(body)
            else:
                self.counts.data_bytes += len(body)

    def take(self) -> RequestCounts:
        with self._lock:
            counts, self.counts = self.counts, RequestCounts()
        return counts


_COUNTER = _Counter()


def _install_counter(filesystem_class: Any) -> None:
    """Wraps ``filesystem_class._request`` once per process (idempotent)."""
    original = filesystem_class._request
    if getattr(original, "_gcsckpt_counting", False):
        return

    @functools.wraps(original)
    async def counted(self, method, path, *args, **kwargs):
        result = await original(self, method, path, *args, **kwargs)
        _COUNTER.add(self._format_path(path, args), result[3])  # (status, headers, info, body)
        return result

    counted._gcsckpt_counting = True  # type: ignore[attr-defined]
    filesystem_class._request = counted


def take_request_counts() -> RequestCounts:
    """Counts since the previous call (or since the counter was installed), and resets them."""
    return _COUNTER.take()


def fsspec_storage_options(endpoint: str | None) -> dict[str, Any]:
    """gcsfs options for ``endpoint``: an emulator gets ``endpoint_url`` and anonymous access;
    None (real GCS) gets none, so gcsfs uses Application Default Credentials."""
    if endpoint is None:
        return {}
    return {"endpoint_url": endpoint, "token": "anon"}


def make_fsspec_reader(checkpoint_url: str, endpoint: str | None):
    """A stock ``FsspecReader`` for ``checkpoint_url`` (``gs://bucket/prefix``).

    Args:
      checkpoint_url: the checkpoint folder.
      endpoint: emulator URL (``http://127.0.0.1:PORT``), or None for real GCS.

    Returns:
      torch's ``FsspecReader`` (``torch.distributed.checkpoint._fsspec_filesystem``); its gcsfs
      calls are counted (see :func:`take_request_counts`).
    """
    if endpoint is not None:
        os.environ.setdefault(_HNS_VAR, "false")
    from gcsfs.core import GCSFileSystem
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    _install_counter(GCSFileSystem)
    # gcsfs logs every file open at INFO; under torchrun absl shows INFO, and the baseline
    # should cost the same however it is launched.
    logging.getLogger("gcsfs").setLevel(logging.WARNING)
    return FsspecReader(checkpoint_url, **fsspec_storage_options(endpoint))


def make_fsspec_writer(checkpoint_url: str, endpoint: str | None):
    """A stock ``FsspecWriter`` for ``checkpoint_url`` (``gs://bucket/prefix``), as shipped
    (one object per rank, no extra threads, overwrite on), over gcsfs with the options of
    :func:`fsspec_storage_options`; its gcsfs calls are counted like the reader's."""
    if endpoint is not None:
        os.environ.setdefault(_HNS_VAR, "false")
    from gcsfs.core import GCSFileSystem
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    _install_counter(GCSFileSystem)
    logging.getLogger("gcsfs").setLevel(logging.WARNING)
    return FsspecWriter(checkpoint_url, **fsspec_storage_options(endpoint))
