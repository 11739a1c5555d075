"""`import gcsckpt.io` when the extension gcsckpt._gcsio cannot be loaded: an ImportError naming
what is missing.

A copy of the package (its root and `io`) holds a copy of the Bazel-built extension whose
DT_NEEDED entry asks for `libcurl.so.9` (a library no system has): it stands in for a machine
without libcurl, and the dynamic loader fails exactly as it would for a missing libcurl.so.4.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import gcsckpt

RUNFILES = Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "gcsckpt"))
BUILT = RUNFILES / "python/gcsckpt/_gcsio.so"
NEEDED = b"libcurl.so.4\0"


def _package(tmp_path: Path, extension: bytes | None) -> Path:
    """A folder holding a copy of `gcsckpt` (root and io) with `extension` as gcsckpt/_gcsio.so
    (None: without it)."""
    root = tmp_path / "pkg"
    source = Path(gcsckpt.__file__).parent
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(source / "io", root / "gcsckpt" / "io", ignore=ignore)
    shutil.copyfile(source / "__init__.py", root / "gcsckpt" / "__init__.py")
    if extension is not None:
        (root / "gcsckpt" / "_gcsio.so").write_bytes(extension)
    return root


def _import_in_child(root: Path) -> subprocess.CompletedProcess:
    # The copy comes first on sys.path, so `gcsckpt` (and its extension) is the copy's.
    code = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import gcsckpt.io; "
        "from gcsckpt import _gcsio; print(_gcsio.__name__, _gcsio.__file__)"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_missing_libcurl_names_it(tmp_path):
    built = BUILT.read_bytes()
    assert built.count(NEEDED) == 1
    result = _import_in_child(_package(tmp_path, built.replace(NEEDED, b"libcurl.so.9\0")))
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gcsckpt's C++ range reader (_gcsio) needs the system")
    assert "libcurl (libcurl.so.4)" in last
    assert "apt-get install libcurl4" in last
    assert "libcurl.so.9: cannot open shared object file" in last  # the loader's own words


def test_missing_extension_says_where_it_comes_from(tmp_path):
    result = _import_in_child(_package(tmp_path, None))
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gcsckpt's C++ extension gcsckpt._gcsio is not installed")
    assert "//python:io" in last and "bazel-bin/python/gcsckpt/_gcsio.so" in last


def test_present_libcurl_imports_inside_the_package(tmp_path):
    root = _package(tmp_path, BUILT.read_bytes())
    result = _import_in_child(root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gcsckpt._gcsio", str(root / "gcsckpt" / "_gcsio.so")]
