"""Child processes that never outlive their owner: own process group, parent-death signal, logs."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> None:
    """preexec_fn: ask the kernel to send SIGTERM to the child when its parent dies.

    SIGTERM (not SIGKILL) so nginx's master can still take its workers down with it.
    The signal fires when the *thread* that forked exits, so start these from a long-lived thread.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class ManagedProcess:
    """One background program started in its own process group, output appended to a log file.

    Args:
      name: a short label used in errors (e.g. "nginx").
      argv: the command line; argv[0] must be an absolute path.
      log_path: file that receives stdout and stderr.
      env: environment for the child (None: inherit).

    Raises:
      OSError: when the program cannot be executed.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        parent = os.getpid()
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
                start_new_session=True,  # own group: stop() can reach nginx's workers too
                preexec_fn=lambda: _die_with_parent(parent),
                close_fds=True,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        """True while the group leader has not exited."""
        return self.popen.poll() is None

    def group_alive(self) -> bool:
        """True while any process of this process group is left (workers included)."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the whole group, wait up to `grace_s` seconds, then SIGKILL what is left.

        Idempotent. Reaps the leader so no zombie stays behind.
        """
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None and not self.group_alive():
                return
            time.sleep(0.02)
        self._signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + grace_s
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last `max_bytes` bytes of the log, decoded leniently (for error messages)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - max_bytes))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""
