"""Every Python snippet of README.md runs as pasted, each in a fresh interpreter against a fresh
local endpoint (STORAGE_EMULATOR_HOST, buckets `bucket` and `my-bucket`), with torchrun's
environment for one rank where a snippet makes a process group. The whole-loop snippet runs twice:
the second run resumes (its `load` finds step 100, so no step is trained or saved again)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gcsckpt.dcp.local_tier import default_local_dir
from gcsckpt.dcp.steps import complete_steps
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS
from gcsckpt.testing.ports import free_port


def _readme() -> Path:
    for folder in Path(__file__).absolute().parents:
        if (folder / "README.md").is_file() and (folder / "tests").is_dir():
            return folder / "README.md"
    raise FileNotFoundError("README.md above " + __file__)


SNIPPETS = re.findall(r"^```python\n(.*?)^```$", _readme().read_text(), re.M | re.S)


def _run(code: str, endpoint: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        STORAGE_EMULATOR_HOST=endpoint,
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240
    )


def test_the_readme_has_its_snippets():
    assert len(SNIPPETS) == 6
    assert any("GCSCheckpointer(" in s and "ckpt.load(state)" in s for s in SNIPPETS)


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs_as_pasted(index):
    code = SNIPPETS[index]
    tier = Path(default_local_dir(), "bucket", "run", "rank-0-of-1")
    shutil.rmtree(tier, ignore_errors=True)
    try:
        with LocalGCS() as gcs:
            for bucket in ("bucket", "my-bucket"):
                gcs.create_bucket(bucket)
            first = _run(code, gcs.endpoint)
            assert first.returncode == 0, first.stderr[-4000:]
            if "print(ckpt.steps())" in code:  # the LocalGCS snippet: its comments hold
                assert first.stdout.splitlines() == ["[5, 4]", "5 tensor([5., 5., 5., 5.])"]
            if "keep_latest=3" in code:  # the whole loop: retention, then a resume
                with ObjectStore(gcs.endpoint) as store:
                    assert complete_steps(store, "gs://bucket/run") == [100, 90, 80]
                    generations = sorted(store.list_objects("bucket", "run/"))
                assert sorted(p.name for p in tier.iterdir()) == ["step-100"]
                again = _run(code, gcs.endpoint)
                assert again.returncode == 0, again.stderr[-4000:]
                with ObjectStore(gcs.endpoint) as store:
                    assert sorted(store.list_objects("bucket", "run/")) == generations
    finally:
        shutil.rmtree(tier, ignore_errors=True)
