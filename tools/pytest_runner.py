"""Runs pytest on the files Bazel passes as arguments; honours Bazel's sharding and XML output."""

import os
import sys

import pytest


class _ShardPlugin:
    """Keeps every TEST_TOTAL_SHARDS-th test from TEST_SHARD_INDEX on (Bazel sharding)."""

    def __init__(self, index: int, total: int) -> None:
        self.index, self.total = index, total

    def pytest_collection_modifyitems(self, config, items):  # noqa: ARG002 (pytest hook signature)
        keep = [item for i, item in enumerate(items) if i % self.total == self.index]
        items[:] = keep


def main() -> int:
    # bqemulator ships a pytest plugin that needs testcontainers (Docker); tests start it alone.
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:bqemulator"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    plugins = []
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    if total > 1:
        status = os.environ.get("TEST_SHARD_STATUS_FILE")
        if status:  # tells Bazel this runner understands sharding
            open(status, "w").close()
        plugins.append(_ShardPlugin(int(os.environ.get("TEST_SHARD_INDEX", "0")), total))
    code = pytest.main(args + sys.argv[1:], plugins=plugins)
    # An empty shard is not a failure.
    return 0 if code == pytest.ExitCode.NO_TESTS_COLLECTED and total > 1 else int(code)


if __name__ == "__main__":
    sys.exit(main())
