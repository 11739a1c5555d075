"""`import gcsckpt.io` when the extension's libcurl cannot be loaded: an ImportError naming it.

A copy of the Bazel-built `_gcsio.so` whose DT_NEEDED entry asks for `libcurl.so.9` (a library
no system has) stands in for a machine without libcurl: the dynamic loader fails exactly as it
would for a missing libcurl.so.4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUNFILES = Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "gcsckpt"))
NEEDED = b"libcurl.so.4\0"


def _import_in_child(extension_dir: Path) -> subprocess.CompletedProcess:
    # The copy comes first on sys.path, so `import _gcsio` finds it before the real one.
    code = f"import sys; sys.path.insert(0, {str(extension_dir)!r}); import gcsckpt.io"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_missing_libcurl_names_it(tmp_path):
    built = (RUNFILES / "cc/gcsio/_gcsio.so").read_bytes()
    assert built.count(NEEDED) == 1
    (tmp_path / "_gcsio.so").write_bytes(built.replace(NEEDED, b"libcurl.so.9\0"))
    result = _import_in_child(tmp_path)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gcsckpt's C++ range reader (_gcsio) needs the system")
    assert "libcurl (libcurl.so.4)" in last
    assert "apt-get install libcurl4" in last
    assert "libcurl.so.9: cannot open shared object file" in last  # the loader's own words


def test_present_libcurl_imports(tmp_path):
    (tmp_path / "_gcsio.so").write_bytes((RUNFILES / "cc/gcsio/_gcsio.so").read_bytes())
    result = _import_in_child(tmp_path)
    assert result.returncode == 0, result.stderr
