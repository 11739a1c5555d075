"""The command line (`python -m gcsckpt`: ls, rm, gc) on a local endpoint, through a child
process as a user runs it: tables and JSON, dry runs by default, deletions with --yes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from gcsckpt.dcp import GCSCheckpointer
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

BUCKET = "cli-runs"
ROOT = f"gs://{BUCKET}/run"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        ckpt = GCSCheckpointer("sync", root=ROOT, endpoint=endpoint.endpoint)
        for step in (1, 2, 3):
            ckpt.save({"w": torch.full((1000,), float(step))}, step=step)
        ckpt.close()
        store = ObjectStore(endpoint.endpoint)
        # a failed save's leftovers: a step without .metadata, and an unnamed object in step-2
        store.upload(BUCKET, "run/step-0/__0_00000000000000aa_0.distcp", b"x" * 100)
        store.upload(BUCKET, "run/step-2/__0_00000000000000bb_0.distcp", b"y" * 50)
        yield endpoint


def _cli(gcs, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run(
        [sys.executable, "-m", "gcsckpt", *args, "--endpoint", gcs.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _names(gcs) -> list[str]:
    return sorted(ObjectStore(gcs.endpoint).list(BUCKET, "run/"))


def test_ls_table_and_json(gcs):
    table = _cli(gcs, "ls", ROOT)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["step", "bytes", "objects", "complete", "age", "problem"]
    assert [line.split()[0] for line in lines[1:]] == ["step-3", "step-2", "step-1", "step-0"]
    assert lines[-1].split()[1:4] == ["100", "1", "no"] and "no .metadata" in lines[-1]
    listed = json.loads(_cli(gcs, "ls", ROOT, "--json").stdout)
    steps = {row["step"]: row for row in listed["steps"]}
    assert [row["step"] for row in listed["steps"]] == [3, 2, 1, 0]
    assert steps[2]["objects"] == 3 and steps[2]["complete"] is True
    assert steps[0]["complete"] is False and steps[0]["bytes"] == 100


def test_gc_dry_run_then_yes(gcs):
    dry = json.loads(_cli(gcs, "gc", ROOT, "--min-age-s", "0", "--json").stdout)
    urls = sorted(row["url"] for row in dry["objects"])
    assert dry["dry_run"] is True and urls == [
        f"gs://{BUCKET}/run/step-0/__0_00000000000000aa_0.distcp",
        f"gs://{BUCKET}/run/step-2/__0_00000000000000bb_0.distcp",
    ]
    assert len(_names(gcs)) == 8  # nothing deleted
    young = _cli(gcs, "gc", ROOT)  # default --min-age-s 3600: a save may be in flight
    assert young.stdout.startswith("would delete (dry run; --yes deletes): 0 data object(s)")
    done = _cli(gcs, "gc", ROOT, "--min-age-s", "0", "--yes")
    assert done.returncode == 0 and done.stdout.startswith("deleted: 2 data object(s), 150 bytes")
    assert not any("aa_0" in n or "bb_0" in n for n in _names(gcs))


def test_rm_keep_latest_dry_run_then_yes(gcs):
    dry = _cli(gcs, "rm", ROOT, "--keep-latest", "1")
    assert dry.stdout.splitlines()[0] == (
        f"would delete (dry run; --yes deletes): 2 step(s) under {ROOT}"
    )
    assert any(n.startswith("run/step-1/") for n in _names(gcs))
    done = _cli(gcs, "rm", ROOT, "--keep-latest", "1", "--yes")
    assert done.returncode == 0, done.stderr
    assert {n.split("/")[1] for n in _names(gcs)} == {"step-3"}


def test_errors_name_the_bucket_and_exit_1(gcs):
    missing = _cli(gcs, "ls", "gs://no-such-bucket-here/run")
    assert missing.returncode == 1 and "gs://no-such-bucket-here/run/step-" in missing.stderr
    bad = _cli(gcs, "ls", "s3://x/y")
    assert bad.returncode == 1 and "'s3://x/y'" in bad.stderr
