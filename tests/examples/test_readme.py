"""Every Python snippet of README.md runs as pasted, each in a fresh process against a fresh
local endpoint (STORAGE_EMULATOR_HOST, buckets `bucket` and `my-bucket`), with torchrun's
environment for one rank where a snippet makes a process group. The whole-loop snippet runs twice:
the second run resumes (its `load` finds step 100, so no step is trained or saved again).

The processes fork from one child interpreter that imported torch once (a torch import per
snippet was most of this test's CPU): each snippet runs as `__main__` in new globals, with its
own environment, stdout and stderr, and exits through the interpreter's own shutdown (atexit,
thread joins); a snippet still has to import every name it uses."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
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


# Reads one job a line ({"code", "env", "stdout", "stderr"}), forks, runs the code in the child as
# `python -c` would (exit status 1 and the traceback on stderr when it raises), and answers the
# child's exit code on a line. Only torch is imported before the forks: nothing that reads the
# snippets' environment (STORAGE_EMULATOR_HOST, RANK, ...) at import time.
_FORKER = """
import json, os, sys, traceback
import torch, torch.distributed.checkpoint
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.environ.clear()
        os.environ.update(job["env"])
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        try:
            exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            raise SystemExit(1)
        raise SystemExit(0)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def forker():
    """The interpreter the snippets' processes fork from (see the module docstring)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    yield proc
    proc.stdin.close()
    if proc.wait(timeout=60) != 0:
        raise AssertionError(f"the snippets' forker exited with {proc.returncode}")


def _run(forker, code: str, endpoint: str) -> subprocess.CompletedProcess:
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
    with tempfile.TemporaryDirectory() as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        job = {"code": code, "env": env, "stdout": out, "stderr": err}
        forker.stdin.write(json.dumps(job) + "\n")
        forker.stdin.flush()
        if not select.select([forker.stdout], [], [], 240)[0]:
            os.killpg(forker.pid, signal.SIGKILL)
            raise TimeoutError("a README snippet ran for more than 240 s")
        answer = forker.stdout.readline()
        assert answer, "the snippets' forker exited"
        return subprocess.CompletedProcess(
            ["<snippet>"], int(answer), Path(out).read_text(), Path(err).read_text()
        )


def test_the_readme_has_its_snippets():
    assert len(SNIPPETS) == 6
    assert any("GCSCheckpointer(" in s and "ckpt.load(state)" in s for s in SNIPPETS)


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs_as_pasted(forker, index):
    code = SNIPPETS[index]
    tier = Path(default_local_dir(), "bucket", "run", "rank-0-of-1")
    shutil.rmtree(tier, ignore_errors=True)
    try:
        with LocalGCS() as gcs:
            for bucket in ("bucket", "my-bucket"):
                gcs.create_bucket(bucket)
            first = _run(forker, code, gcs.endpoint)
            assert first.returncode == 0, first.stderr[-4000:]
            if "print(ckpt.steps())" in code:  # the LocalGCS snippet: its comments hold
                assert first.stdout.splitlines() == ["[5, 4]", "5 tensor([5., 5., 5., 5.])"]
            if "keep_latest=3" in code:  # the whole loop: retention, then a resume
                with ObjectStore(gcs.endpoint) as store:
                    assert complete_steps(store, "gs://bucket/run") == [100, 90, 80]
                    generations = sorted(store.list_objects("bucket", "run/"))
                assert sorted(p.name for p in tier.iterdir()) == ["step-100"]
                again = _run(forker, code, gcs.endpoint)
                assert again.returncode == 0, again.stderr[-4000:]
                with ObjectStore(gcs.endpoint) as store:
                    assert sorted(store.list_objects("bucket", "run/")) == generations
    finally:
        shutil.rmtree(tier, ignore_errors=True)
