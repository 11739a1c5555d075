"""Code hygiene as a test: ruff (lint + format) over Python, clang-format over C++.

Usage (from a py_test): lint_check.py ruff|clang-format <files...>. Files come from Bazel globs,
so a new file is checked as soon as it is in a BUILD glob.
"""

import os
import shutil
import subprocess
import sys


def _ruff(files: list[str]) -> int:
    config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ruff.toml")
    base = [sys.executable, "-m", "ruff"]
    lint = subprocess.run([*base, "check", "--no-cache", "--config", config, *files])
    fmt = subprocess.run([*base, "format", "--check", "--no-cache", "--config", config, *files])
    return lint.returncode or fmt.returncode


def _clang_format(files: list[str]) -> int:
    binary = shutil.which("clang-format", path="/usr/bin:/bin:/usr/local/bin")
    if binary is None:
        print("clang-format not found: apt-get install clang-format", file=sys.stderr)
        return 1
    config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".clang-format")
    style = f"--style=file:{config}"
    return subprocess.run([binary, style, "--dry-run", "-Werror", *files]).returncode


def main() -> int:
    tool, files = sys.argv[1], sys.argv[2:]
    if not files:
        print(f"no files given to {tool}", file=sys.stderr)
        return 1
    print(f"{tool}: checking {len(files)} files")
    return _ruff(files) if tool == "ruff" else _clang_format(files)


if __name__ == "__main__":
    sys.exit(main())
