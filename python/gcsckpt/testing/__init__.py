"""Local GCS for tests and benchmarks: LocalGCS (our GCS server + nginx), FaultProxy and Fault.

Importing this package sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (unless already set) so that
gcsfs, imported later by the stock FsspecReader baseline, does not wait on its gRPC probe.
"""

from gcsckpt.testing.clients import (
    emulator_env,
    gcsfs_filesystem,
    prepare_gcsfs_import,
    storage_client,
)
from gcsckpt.testing.fault_proxy import FaultProxy
from gcsckpt.testing.faults import KINDS as FAULT_KINDS
from gcsckpt.testing.faults import Fault
from gcsckpt.testing.json_api import GCSHTTPError, media_path, quote_object
from gcsckpt.testing.local_gcs import LocalGCS, LocalGCSError
from gcsckpt.testing.media_log import MediaRequest

prepare_gcsfs_import()

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
