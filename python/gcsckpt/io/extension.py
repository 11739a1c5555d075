"""Imports the C++ range reader `gcsckpt._gcsio`, with an error that says what is missing.

The extension lives inside the package: the wheel installs it as `gcsckpt/_gcsio.cpython-*.so`,
Bazel places it at bazel-bin/python/gcsckpt/_gcsio.so. It links the system libcurl
(libcurl.so.4, not shipped in the wheel: it must match the system's TLS libraries and CA store).
Without it the loader's own message is "libcurl.so.4: cannot open shared object file"; this
module turns that into an ImportError that names libcurl and the package that provides it.
"""

from __future__ import annotations

import ctypes.util

_LIBCURL_HELP = (
    "gcsckpt's C++ range reader (_gcsio) needs the system library libcurl (libcurl.so.4), "
    "which was not found: install it (Debian/Ubuntu: apt-get install libcurl4; "
    "Fedora/RHEL: dnf install libcurl) and import again"
)


def _import_gcsio():
    try:
        import gcsckpt._gcsio as _gcsio
    except ModuleNotFoundError as e:
        if e.name != "gcsckpt._gcsio":
            raise
        raise ImportError(
            "gcsckpt's C++ extension gcsckpt._gcsio is not installed: install the gcsckpt wheel "
            "(tools/bazel run //:wheel_dist builds it); in Bazel depend on //python:io; in a "
            "source tree copy bazel-bin/python/gcsckpt/_gcsio.so (tools/bazel build "
            "//python:gcsckpt/_gcsio.so) into python/gcsckpt/",
            name="gcsckpt._gcsio",
        ) from e
    except ImportError as e:
        if "libcurl" in str(e) or ctypes.util.find_library("curl") is None:
            raise ImportError(f"{_LIBCURL_HELP} (loader: {e})", name="gcsckpt._gcsio") from e
        raise
    return _gcsio


_gcsio = _import_gcsio()

__all__ = ["_gcsio"]
