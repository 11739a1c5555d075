"""Rank processes on this machine: run a function on N ranks of a process group, collect results.

The one launcher of the tests and of the benchmark's single-machine runner. Ranks fork from a
forkserver that imported ``preload`` once: on 2 cores that saves ~2 CPU-seconds per rank over
"spawn", and unlike plain "fork" the ranks never inherit the caller's threads (a resource
sampler, LocalGCS's log readers). Each rank joins a group at ``tcp://127.0.0.1:<free port>``
(gloo on CPU; nccl with one GPU per rank), runs ``fn(rank, *args)`` and pickles what it returns.
Part of the benchmark, not of the wheel (which ships ``gcsckpt.testing``'s endpoint only).

``LocalRanks(executable=...)`` runs the ranks on another Python interpreter (a venv with other
pins, e.g. a benchmark arm whose library needs an older google-cloud-storage): they start with
"spawn" on that interpreter, with this repository's import roots (this process's ``sys.path``
minus its own installation) ahead of that interpreter's own ``sys.path``, and without re-running
this process's ``__main__``. The interpreter must be the same Python version (pickles, the
``gcsckpt._gcsio`` extension).
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing.spawn as mp_spawn
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gcsckpt.testing.ports import free_port

# Set while ranks start (the forkserver inherits them) and in every rank: one intra-op thread
# per rank (many ranks share few cores), gloo over loopback.
RANK_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
DEFAULT_PRELOAD = ("torch", "torch.distributed.checkpoint")
_POLL_S = 0.2


def backend_for(device: str) -> str:
    """``gloo`` for CPU ranks, ``nccl`` for CUDA ranks."""
    return "nccl" if device == "cuda" else "gloo"


class RankError(RuntimeError):
    """The ranks gave no results.

    Attributes:
      rank: the rank at fault; None when the wall-clock limit ran out.
      traceback: the rank's exception with its traceback when it raised, else None.
    """

    def __init__(self, message: str, rank: int | None = None, traceback: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback


@functools.cache
def _interpreter_path(executable: str) -> tuple[str, ...]:
    """``sys.path`` of ``executable`` started plainly (its stdlib and site-packages).

    Raises:
      RankError: the interpreter cannot be run.
    """
    try:
        answer = subprocess.run(
            [executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise RankError(f"rank interpreter {executable} cannot run: {err}") from err
    return tuple(json.loads(answer.stdout))


def _repository_roots() -> list[str]:
    """This process's import roots that are not its own installation (stdlib, site-packages)."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else entry
        if entry and not any(real == p or real.startswith(p + os.sep) for p in own):
            roots.append(entry)
    return roots


@contextlib.contextmanager
def _spawn_on(executable: str):
    """While active, processes started with "spawn" run ``executable`` with the import path
    described in the module docstring (multiprocessing keeps both settings module-wide)."""
    child_path = [*_repository_roots(), *_interpreter_path(executable)]
    original_exe = mp_spawn.get_executable()
    original_data = mp_spawn.get_preparation_data

    def preparation_data(name: str) -> dict:
        data = original_data(name)
        data["sys_path"] = child_path
        data.pop("init_main_from_path", None)  # this process's __main__ may not import there
        data.pop("init_main_from_name", None)
        return data

    mp_spawn.set_executable(executable)
    mp_spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = original_data
        mp_spawn.set_executable(original_exe)


def _result_path(out: str, rank: int) -> Path:
    return Path(out, f"rank{rank}.pkl")


def _fn_error_path(out: str, rank: int) -> Path:
    return Path(out, f"rank{rank}.fn-error")


def _first_fn_error(out: str) -> tuple[int, str] | None:
    """(rank, traceback) of the rank whose ``fn`` raised first, if any did.

    When one rank raises, its peers then fail in their next collective ("Connection closed by
    peer"), and whichever process torch's spawn context notices first is not necessarily the
    one at fault: the error files say which rank's own code raised, and when.
    """
    found = []
    for path in Path(out).glob("rank*.fn-error"):
        rank = int(path.name[len("rank") : -len(".fn-error")])
        found.append((path.stat().st_mtime_ns, rank, path.read_text(errors="replace")))
    if not found:
        return None
    _, rank, text = min(found)
    return rank, text


def _rank_main(
    rank: int,
    fn: Callable,
    world_size: int,
    port: int,
    out: str,
    device: str,
    timeout_s: float,
    args: tuple,
) -> None:
    os.environ.update(RANK_ENV)
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend_for(device),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        try:
            result = fn(rank, *args)
        except BaseException:
            _fn_error_path(out, rank).write_text(traceback.format_exc())
            raise
        dist.barrier()
    finally:
        dist.destroy_process_group()
    target = _result_path(out, rank)
    tmp = target.with_suffix(".tmp")  # the launcher never reads a half-written result
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, target)


class LocalRanks:
    """Starts rank processes on this machine, one group per ``run``.

    Args:
      preload: modules the forkserver imports once before forking ranks (only the call that
        starts the forkserver sets them: it lives as long as this process).
      start_method: ``forkserver`` (default) or ``spawn``; ``spawn`` whenever ``executable``
        is given.
      timeout_s: the process group's collective timeout, seconds.
      executable: the ranks' Python interpreter; None: this process's (see the module
        docstring).
    """

    def __init__(
        self,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        start_method: str = "forkserver",
        timeout_s: float = 120.0,
        executable: str | None = None,
    ) -> None:
        self.executable = executable
        if executable is not None:
            start_method = "spawn"
        self.start_method = start_method
        self.timeout_s = timeout_s
        self._context = mp.get_context(start_method)
        if start_method == "forkserver":
            self._context.set_forkserver_preload(list(preload))

    def queue(self, maxsize: int = 0) -> Any:
        """A queue the ranks can put to (pass it in ``args``), from this launcher's context."""
        return self._context.Queue(maxsize)

    def run(
        self,
        fn: Callable,
        world_size: int,
        *args: Any,
        device: str = "cpu",
        on_poll: Callable[[], None] | None = None,
        wall_limit_s: float | None = None,
    ) -> list[Any]:
        """Runs ``fn(rank, *args)`` on ``world_size`` fresh rank processes; results by rank.

        Args:
          fn: a function defined at a module's top level (the ranks import it by name).
          world_size: number of rank processes.
          *args: picklable arguments passed to every rank after its rank number.
          device: ``cpu`` (gloo) or ``cuda`` (nccl, rank r on GPU r).
          on_poll: called every 0.2 s while the ranks run, and once after they end.
          wall_limit_s: kill the ranks after this many seconds; None: no limit.

        Raises:
          RankError: a rank raised (``traceback`` holds its traceback) or exited with a non-zero
            code, a rank exited without a result, or ``wall_limit_s`` ran out.
        """
        saved = {key: os.environ.get(key) for key in RANK_ENV}
        os.environ.update(RANK_ENV)
        try:
            with tempfile.TemporaryDirectory(prefix="gcsckpt-ranks-") as out:
                rank_args = (fn, world_size, free_port(), out, device, self.timeout_s, args)
                interpreter = (
                    contextlib.nullcontext()
                    if self.executable is None
                    else _spawn_on(self.executable)
                )
                with interpreter:
                    context = mp.start_processes(
                        _rank_main,
                        args=rank_args,
                        nprocs=world_size,
                        join=False,
                        start_method=self.start_method,
                    )
                self._join(
                    context,
                    world_size,
                    on_poll,
                    wall_limit_s,
                    out,
                )
                results = []
                for rank in range(world_size):
                    path = _result_path(out, rank)
                    if not path.exists():
                        raise RankError(f"rank {rank} exited without writing results", rank)
                    results.append(pickle.loads(path.read_bytes()))
                return results
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    @staticmethod
    def _join(
        context: Any,
        world_size: int,
        on_poll: Callable[[], None] | None,
        wall_limit_s: float | None,
        out: str,
    ) -> None:
        deadline = None if wall_limit_s is None else time.monotonic() + wall_limit_s
        try:
            while not context.join(timeout=_POLL_S):
                if on_poll is not None:
                    on_poll()
                if deadline is not None and time.monotonic() > deadline:
                    raise RankError(f"no result after {wall_limit_s:.0f} s on {world_size} ranks")
        except mp.ProcessRaisedException as err:
            # Give the rank at fault a moment to finish writing its error file.
            time.sleep(_POLL_S)
            culprit = _first_fn_error(out)
            rank, text = culprit if culprit is not None else (err.error_index, str(err))
            raise RankError(f"rank {rank} failed: {text}", rank, text) from err
        except mp.ProcessExitedException as err:
            raise RankError(
                f"rank {err.error_index} exited with code {err.exit_code}", err.error_index
            ) from err
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(5)
            if on_poll is not None:
                on_poll()


def run_ranks(
    fn: Callable,
    world_size: int,
    *args: Any,
    preload: Sequence[str] = DEFAULT_PRELOAD,
    timeout_s: float = 120.0,
) -> list[Any]:
    """Runs ``fn(rank, *args)`` on ``world_size`` gloo CPU ranks; returns the results by rank.

    The forkserver also preloads ``fn``'s own module (and so what it imports).

    Args:
      fn: a function defined at a module's top level (the ranks import it by name).
      world_size: number of rank processes.
      *args: picklable arguments passed to every rank after its rank number.
      preload: modules the forkserver imports once before forking ranks.
      timeout_s: gloo collective timeout, seconds.

    Raises:
      RankError: a rank raised (the message carries its traceback) or exited.
    """
    modules = [*preload, fn.__module__] if fn.__module__ != "__main__" else list(preload)
    return LocalRanks(modules, timeout_s=timeout_s).run(fn, world_size, *args)
