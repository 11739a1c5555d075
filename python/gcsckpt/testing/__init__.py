"""Local GCS for tests and benchmarks: LocalGCS (our GCS server + nginx), FaultProxy and Fault.

The names below are imported on first use, so that importing the package stays light: the
endpoint's server process (``python -m gcsckpt.testing.server_main``) runs inside it without
loading ``gcsckpt.io`` (the C++ extension, google-cloud-storage).

Importing this package sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (unless already set) so that
gcsfs, imported later by the stock FsspecReader baseline, does not wait on its gRPC probe.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gcsckpt.testing.clients import prepare_gcsfs_import

if TYPE_CHECKING:
    from gcsckpt.testing.clients import emulator_env, gcsfs_filesystem, storage_client
    from gcsckpt.testing.fault_proxy import FaultProxy
    from gcsckpt.testing.faults import KINDS as FAULT_KINDS
    from gcsckpt.testing.faults import Fault
    from gcsckpt.testing.json_api import GCSHTTPError, media_path, quote_object
    from gcsckpt.testing.local_gcs import LocalGCS, LocalGCSError
    from gcsckpt.testing.media_log import MediaRequest

# Public name (each of __all__) -> (module, name in it).
_EXPORTS = {
    "FAULT_KINDS": ("faults", "KINDS"),
    "Fault": ("faults", "Fault"),
    "FaultProxy": ("fault_proxy", "FaultProxy"),
    "GCSHTTPError": ("json_api", "GCSHTTPError"),
    "LocalGCS": ("local_gcs", "LocalGCS"),
    "LocalGCSError": ("local_gcs", "LocalGCSError"),
    "MediaRequest": ("media_log", "MediaRequest"),
    "emulator_env": ("clients", "emulator_env"),
    "gcsfs_filesystem": ("clients", "gcsfs_filesystem"),
    "media_path": ("json_api", "media_path"),
    "prepare_gcsfs_import": ("clients", "prepare_gcsfs_import"),
    "quote_object": ("json_api", "quote_object"),
    "storage_client": ("clients", "storage_client"),
}

prepare_gcsfs_import()


def __getattr__(name: str):
    """Imports the module of a public name on first use (PEP 562).

    Raises:
      AttributeError: ``name`` is not one of ``__all__``.
    """
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gcsckpt.testing' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(f"gcsckpt.testing.{module}"), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "FAULT_KINDS",
    "Fault",
    "FaultProxy",
    "GCSHTTPError",
    "LocalGCS",
    "LocalGCSError",
    "MediaRequest",
    "emulator_env",
    "gcsfs_filesystem",
    "media_path",
    "prepare_gcsfs_import",
    "quote_object",
    "storage_client",
]
