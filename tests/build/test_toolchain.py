"""The Bazel-built C++ extension imports beside torch in the pinned venv and links libcurl."""

import re
import sys

import torch

from gcsckpt import _gcsio


def test_extension_imports_beside_torch():
    assert torch.__version__.startswith("2.13.0")
    assert sys.version_info[:2] == (3, 11)
    assert _gcsio.__file__.endswith("_gcsio.so")


def test_libcurl_version_string():
    version = _gcsio.curl_version()
    # e.g. "libcurl/7.88.1 OpenSSL/3.0.x zlib/1.2.13 ..." on Debian 12.
    assert re.match(r"libcurl/\d+\.\d+\.\d+", version), version
    assert "OpenSSL" in version
