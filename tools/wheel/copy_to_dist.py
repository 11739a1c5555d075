"""`tools/bazel run //:wheel_dist`: copies the wheel built by //:wheel into <workspace>/dist/.

`bazel build` can only write under bazel-bin; a run target knows the workspace
($BUILD_WORKSPACE_DIRECTORY) and puts the wheel where `pip install dist/...` expects it.

Usage: copy_to_dist.py WHEEL [DEST_DIR]  (DEST_DIR defaults to $BUILD_WORKSPACE_DIRECTORY/dist).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    wheel = Path(argv[1])
    if len(argv) == 3:
        dest = Path(argv[2])
    elif os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
        dest = Path(os.environ["BUILD_WORKSPACE_DIRECTORY"], "dist")
    else:
        sys.exit("copy_to_dist: give DEST_DIR, or run it with `tools/bazel run //:wheel_dist`")
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / wheel.name
    shutil.copyfile(wheel, target)
    print(f"{target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv)
