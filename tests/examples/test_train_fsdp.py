"""examples/train_fsdp.py: killed mid-run and restarted, it resumes from the newest complete
checkpoint (skipping a newer one without `.metadata`) and prints the same loss values, bit for
bit, as a run that was never interrupted.

The uninterrupted run uses the example's embedded endpoint (its default). The killed and the
restarted run use `--bucket` against an endpoint this test keeps running, as GCS outlives a
killed job (STORAGE_EMULATOR_HOST points the example's clients at it); the emulator's own files
would not survive a SIGKILL mid-write, which is not what is under test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from gcsckpt.testing import LocalGCS

RUNFILES = Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "gcsckpt"))
SCRIPT = RUNFILES / "examples" / "train_fsdp.py"
STEPS, SAVE_EVERY = 12, 4
BUCKET, PREFIX = "train-fsdp", "run"  # the example's local bucket and default prefix
_STEP = re.compile(r"^step (\d+) loss \S+ \((\S+)\)$")
_RESUME = re.compile(
    r"^resume: gs://train-fsdp/run/step-(\d+) \(step (\d+)\) .*skipped incomplete: (.*)$"
)


def _command(where: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",  # FSDP2 shards over 2 ranks as over 4
        str(SCRIPT),
        f"--steps={STEPS}",
        f"--save_every={SAVE_EVERY}",
        "--width=64",
        *where,
    ]


def _losses(lines: list[str]) -> dict[int, str]:
    """{step: loss as float.hex()} from the example's output."""
    return {int(m.group(1)): m.group(2) for m in map(_STEP.match, lines) if m}


def _run(where: list[str], env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run(_command(where), capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout.splitlines()


def _run_and_kill(where: list[str], env: dict[str, str]) -> list[str]:
    """Runs until step-4 is committed and one more step is printed, then SIGKILLs torchrun and
    every rank."""
    proc = subprocess.Popen(
        _command(where),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines, committed = [], False
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            committed = committed or lines[-1].startswith("save step-4: .metadata committed")
            if committed and _STEP.match(lines[-1]):
                break
    finally:
        # torchrun starts each rank in its own session: kill the whole tree, ranks first.
        tree = psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]
        for p in tree:
            p.send_signal(signal.SIGKILL)
        psutil.wait_procs(tree, timeout=60)
        proc.wait(timeout=60)
    assert committed, "\n".join(lines)
    return lines


def _steps(gcs: LocalGCS) -> tuple[list[int], list[int]]:
    """(complete, incomplete) step numbers: with and without a committed ``.metadata``."""
    names = [b.name for b in gcs.storage_client().list_blobs(BUCKET, prefix=f"{PREFIX}/")]
    steps = {int(n.split("/")[1].removeprefix("step-")) for n in names}
    complete = {s for s in steps if f"{PREFIX}/step-{s}/.metadata" in names}
    return sorted(complete), sorted(steps - complete)


def _complete_steps(gcs: LocalGCS) -> list[int]:
    return _steps(gcs)[0]


def test_killed_and_restarted_run_continues_the_same_loss_curve(tmp_path):
    reference = _losses(_run([f"--local_dir={tmp_path / 'embedded'}"]))
    assert sorted(reference) == list(range(1, STEPS + 1))

    with LocalGCS(data_dir=str(tmp_path / "objects")) as gcs:
        gcs.create_bucket(BUCKET)
        env = dict(os.environ, **gcs.env())
        where = [f"--bucket=gs://{BUCKET}/{PREFIX}"]
        killed = _losses(_run_and_kill(where, env))
        assert max(killed) < STEPS
        assert killed == {s: reference[s] for s in killed}  # same curve up to the kill

        # An interrupted save of a later step: a data object, no .metadata (what a kill during
        # an upload leaves). The restart must skip it.
        gcs.put(BUCKET, f"{PREFIX}/step-{STEPS}/__0_0.distcp", b"partial upload")
        complete, incomplete = _steps(gcs)
        assert complete and complete[-1] >= SAVE_EVERY and STEPS not in complete
        newest = complete[-1]
        # The planted step, and any save the kill interrupted before its .metadata (on a slow
        # machine the next async save may already have started uploading).
        skipped = [s for s in incomplete if s > newest]
        assert STEPS in skipped

        resumed = _run(where, env)
        matches = [m for m in map(_RESUME.match, resumed) if m]
        assert len(matches) == 1, resumed[:5]
        assert (int(matches[0].group(1)), int(matches[0].group(2))) == (newest, newest)
        assert matches[0].group(3) == ", ".join(f"step-{s}" for s in skipped)
        after = _losses(resumed)
        assert sorted(after) == list(range(newest + 1, STEPS + 1))
        assert after == {s: reference[s] for s in after}  # bitwise: float.hex of every loss
        assert _complete_steps(gcs)[-1] == STEPS  # the re-trained step replaced the partial save
