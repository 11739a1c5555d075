"""Runs examples/train_fsdp.py under torchrun for the example's tests: command lines (one node
or one of several c10d nodes), its loss lines, a launch whose output is read while it runs, and
the SIGKILL of a launch's whole process tree (torchrun starts every rank in a session of its own,
so a process group alone does not reach the ranks)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from gcsckpt.testing import Fault, FaultProxy, LocalGCS

RUNFILES = Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "gcsckpt"))
SCRIPT = RUNFILES / "examples" / "train_fsdp.py"
STEPS, SAVE_EVERY = 12, 4
BUCKET, PREFIX = "train-fsdp", "run"  # the example's local bucket and default prefix
WHERE = [f"--bucket=gs://{BUCKET}/{PREFIX}"]  # against an endpoint the test keeps running
STEP_LINE = re.compile(r"^step (\d+) loss \S+ \((\S+)\)$")
RESUME_LINE = re.compile(
    r"^resume: gs://train-fsdp/run/step-(\d+) \(step (\d+)\) .*skipped incomplete: (.*)$"
)
TIMEOUT_S = 600


def command(where: list[str], ranks: int = 2, node: tuple[int, int] | None = None) -> list[str]:
    """torchrun running the example: standalone with `ranks` ranks, or as one of `node`
    (is_host, rendezvous port) of two c10d nodes on loopback with `ranks` ranks each."""
    if node is None:
        launch = ["--standalone"]
    else:
        is_host, port = node
        launch = [
            "--nnodes=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id=train-fsdp-{port}",
            f"--rdzv-conf=is_host={is_host}",  # one agent hosts the store; no guessing
            "--local-addr=127.0.0.1",
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launch,
        f"--nproc-per-node={ranks}",
        str(SCRIPT),
        f"--steps={STEPS}",
        f"--save_every={SAVE_EVERY}",
        "--width=64",
        *where,
    ]


def rank_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment plus `base`, gloo on loopback."""
    return dict(os.environ, GLOO_SOCKET_IFNAME="lo", **(base or {}))


def losses(lines: list[str]) -> dict[int, str]:
    """{step: loss as float.hex()} from the example's output."""
    return {int(m.group(1)): m.group(2) for m in map(STEP_LINE.match, lines) if m}


def run(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Runs one launch to its end; asserts it succeeded; returns its stdout lines."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout.splitlines()


class Launch:
    """One torchrun launch in its own session whose stdout lines are collected as they come."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def rank_process(self, rank: int) -> psutil.Process:
        """The worker process whose RANK is `rank`.

        Raises:
          LookupError: no child of this launch has that rank.
        """
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank):
                    return child
            except psutil.NoSuchProcess:
                continue
        raise LookupError(f"launch {self.proc.pid} has no rank {rank} process")

    def kill(self) -> None:
        """SIGKILLs the launch's process group and every process below torchrun."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for p in tree:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(tree, timeout=60)
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)

    def wait(self, timeout_s: float) -> int | None:
        """The launch's exit status, or None if it still runs after `timeout_s` seconds."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        return "\n".join(self.lines[-80:])


def wait_until(condition: Callable[[], bool], launches: list[Launch], what: str) -> None:
    """Polls `condition` until it holds; fails (with the launches' output) when one exits
    first or TIMEOUT_S passes."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        ended = [launch for launch in launches if launch.proc.poll() is not None]
        assert not ended and time.monotonic() < deadline, f"never {what}:\n" + "\n".join(
            launch.output() for launch in launches
        )
        time.sleep(0.1)


def objects(gcs: LocalGCS, prefix: str = f"{PREFIX}/") -> dict[str, int]:
    """{object name: generation} below `prefix`."""
    blobs = gcs.storage_client().list_blobs(BUCKET, prefix=prefix)
    return {b.name: b.generation for b in blobs}


def steps(gcs: LocalGCS) -> tuple[list[int], list[int]]:
    """(complete, incomplete) step numbers: with and without a committed ``.metadata``."""
    names = list(objects(gcs))
    found = {int(n.split("/")[1].removeprefix("step-")) for n in names}
    complete = {s for s in found if f"{PREFIX}/step-{s}/.metadata" in names}
    return sorted(complete), sorted(found - complete)


def data_objects(gcs: LocalGCS, step: int) -> list[str]:
    """Names of the data objects (``__<rank>_<save id>_<i>.distcp``) of `step`'s folder."""
    return sorted(n for n in objects(gcs, f"{PREFIX}/step-{step}/") if n.endswith(".distcp"))


def hold_uploads(step: int, ranks: str) -> Fault:
    """A FaultProxy rule that holds the answer to every request for the data objects of `step`
    whose rank matches the fnmatch class `ranks` (e.g. "1", "[123]") for 300 s: their uploads
    stay in flight (forwarded, so what a request carried may land), so `.metadata` never comes."""
    return Fault(
        kind="stall",
        stall_s=300.0,
        count=None,
        media_only=False,
        object_glob=f"{PREFIX}/step-{step}/__{ranks}_*",
    )


def wait_mid_save(launches: list[Launch], proxy: FaultProxy, gcs: LocalGCS, step: int) -> None:
    """Waits until the launches printed every step's loss, an upload of `step` is held and one
    of its data objects has landed: the run is blocked inside that save."""
    wait_until(
        lambda: (
            STEPS in losses([line for launch in launches for line in list(launch.lines)])
            and proxy.injected_per_fault[0] >= 1
            and bool(data_objects(gcs, step))
        ),
        launches,
        f"trained to step {STEPS} with step-{step}'s uploads in flight",
    )


def check_interrupted(gcs: LocalGCS, step: int) -> None:
    """`step`'s folder holds rank 0's data objects (a held upload may have landed too: its
    request was forwarded) and no `.metadata`; only the save before it is complete."""
    landed = [n.split("/")[-1] for n in data_objects(gcs, step)]
    assert any(n.startswith("__0_") for n in landed), landed
    assert f"{PREFIX}/step-{step}/.metadata" not in objects(gcs)
    assert steps(gcs) == ([SAVE_EVERY], [step])


def check_resumed(lines: list[str], gcs: LocalGCS, reference: dict[int, str], skipped: int) -> None:
    """The restart resumed from step-4 (skipping `skipped`), printed the reference's losses for
    steps 5..12 bit for bit, and left every save complete."""
    matches = [m for m in map(RESUME_LINE.match, lines) if m]
    assert len(matches) == 1, lines[:20]
    assert matches[0].groups() == (str(SAVE_EVERY), str(SAVE_EVERY), f"step-{skipped}")
    after = losses(lines)
    assert sorted(after) == list(range(SAVE_EVERY + 1, STEPS + 1))
    assert after == {s: reference[s] for s in after}  # bitwise: float.hex of every loss
    assert steps(gcs) == ([SAVE_EVERY, skipped, STEPS], [])  # the interrupted step saved again
