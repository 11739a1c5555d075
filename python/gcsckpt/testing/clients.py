"""Stock GCS clients pointed at a local endpoint: google-cloud-storage and gcsfs, anonymous."""

from __future__ import annotations

import os
import sys
import warnings

# gcsfs (2026.x) first waits on a gRPC probe unless this is off (docs/measurements.md, "gcsfs's
# gRPC probe"); it reads the variable once, at import.
_GCSFS_HNS_VAR = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"


def emulator_env(endpoint: str) -> dict[str, str]:
    """Environment for a process whose GCS clients should talk to `endpoint` without auth."""
    return {"STORAGE_EMULATOR_HOST": endpoint, _GCSFS_HNS_VAR: "false"}


def storage_client(endpoint: str, project: str = "test"):
    """A google.cloud.storage.Client with AnonymousCredentials whose every URL points at `endpoint`.

    Uploads, listing, metadata and media downloads all go to `endpoint` (api_endpoint option).
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )


def prepare_gcsfs_import() -> None:
    """Turns gcsfs's slow experimental probe off; call before anything imports gcsfs.

    Warns when gcsfs was already imported with the experimental class (then fsspec's "gs://"
    protocol keeps using it and every call first waits on the probe).
    """
    os.environ.setdefault(_GCSFS_HNS_VAR, "false")
    gcsfs = sys.modules.get("gcsfs")
    if gcsfs is not None and gcsfs.GCSFileSystem.__module__ != "gcsfs.core":
        warnings.warn(
            f"gcsfs was imported before {_GCSFS_HNS_VAR}=false was set; set it in the environment "
            "of the process, or import gcsckpt.testing first",
            RuntimeWarning,
            stacklevel=2,
        )


def gcsfs_filesystem(endpoint: str, **options):
    """A gcsfs.GCSFileSystem (the core class) for `endpoint` with token="anon".

    Args:
      endpoint: "http://127.0.0.1:PORT".
      **options: more GCSFileSystem arguments (e.g. block_size in bytes).
    """
    prepare_gcsfs_import()
    from gcsfs.core import GCSFileSystem

    return GCSFileSystem(token="anon", endpoint_url=endpoint, skip_instance_cache=True, **options)
