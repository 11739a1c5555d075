"""A REAPI v2 remote execution service on 127.0.0.1: PostgreSQL, BuildGrid and N bots.

    <rbe venv python> tools/rbe/service.py [--workers N] [--endpoint-file PATH]

Starts, in order and each as its own process (PIDs kept):
  1. PostgreSQL (Debian's postgresql 15: initdb into a fresh data folder, trust auth, TCP on
     127.0.0.1 only, fsync off: a scratch database), the job table of BuildGrid's scheduler;
  2. BuildGrid (`bgd server start tools/rbe/buildgrid.yml`): Execution, Bots, CAS, ByteStream and
     ActionCache for the instance "";
  3. N bots (tools/rbe/worker.py), one process each.
Then prints the endpoint (`grpc://127.0.0.1:PORT`) on stdout (and into --endpoint-file) and waits.
SIGTERM / SIGINT, or any of its processes dying, stops every process it started (by PID, in
reverse order) and removes its state folder; the exit status is non-zero when a process died.

Why our own launcher: BuildGrid ships no bot and no all-in-one runner, and PostgreSQL refuses to
run as root (CI runs as root): as root the database runs as the `postgres` user (setpriv).
Run it with the venv of tools/rbe/venv.sh (Python 3.13, BuildGrid 0.9.1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).absolute().parent
CONFIG = HERE / "buildgrid.yml"
WORKER = HERE / "worker.py"
PG_BIN = Path(os.environ.get("GCSCKPT_PG_BIN", "/usr/lib/postgresql/15/bin"))
START_TIMEOUT_S = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    """Waits until 127.0.0.1:port accepts connections; raises RuntimeError naming `what` if the
    process exits first or START_TIMEOUT_S passes (with the tail of its log)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(
        f"{what} did not listen on 127.0.0.1:{port} in {START_TIMEOUT_S} s:\n{tail(log)}"
    )


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


class Service:
    """The running processes; stop() ends each one it started, newest first."""

    def __init__(self, state: Path, workers: int, log=sys.stderr):
        self.state = state
        self.workers = workers
        self.log = log
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.endpoint = ""

    def say(self, msg: str) -> None:
        print(f"tools/rbe/service: {msg}", file=self.log, flush=True)

    def spawn(self, name: str, argv: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
        logfile = self.state / f"{name}.log"
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                **kw,
            )
        self.procs.append((name, proc))
        self.say(f"started {name} (pid {proc.pid}, log {logfile})")
        return proc

    def start(self) -> str:
        pg_port = self.start_postgres()
        bgd_port = free_port()
        sql = f"postgresql://bgd@127.0.0.1:{pg_port}/buildgrid"
        venv_bin = Path(sys.executable).parent
        self.run_checked([str(venv_bin / "bgd"), "migrate", "apply", sql], "bgd migrate")
        env = dict(
            os.environ,
            GCSCKPT_BGD_PORT=str(bgd_port),
            GCSCKPT_BGD_SQL=sql,
            GCSCKPT_BGD_STATE=str(self.state),
        )
        bgd = self.spawn("buildgrid", [str(venv_bin / "bgd"), "server", "start", str(CONFIG)], env)
        wait_for_port(bgd_port, bgd, "BuildGrid", self.state / "buildgrid.log")
        self.endpoint = f"grpc://127.0.0.1:{bgd_port}"
        for i in range(self.workers):
            self.spawn(
                f"worker-{i}",
                [sys.executable, str(WORKER), "--endpoint", self.endpoint, "--name", f"worker-{i}"],
            )
        return self.endpoint

    def start_postgres(self) -> int:
        data = self.state / "pg"
        data.mkdir()
        as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses root: run it as Debian's `postgres` user
            pw = pwd.getpwnam(os.environ.get("GCSCKPT_PG_USER", "postgres"))
            os.chown(data, pw.pw_uid, pw.pw_gid)
            as_user = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]
        self.run_checked(
            as_user
            + [str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "bgd", "--no-sync"]
            + ["-E", "UTF8", "--locale=C"],
            "initdb",
            cwd="/",
        )
        port = free_port()
        pg = self.spawn(
            "postgres",
            as_user
            + [str(PG_BIN / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port)]
            + ["-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "full_page_writes=off"]
            + ["-c", "synchronous_commit=off", "-c", "max_connections=200"],
            cwd="/",
        )
        wait_for_port(port, pg, "PostgreSQL", self.state / "postgres.log")
        import psycopg  # in the rbe venv (BuildGrid's driver)

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # the port opens a moment before the server accepts sessions
            try:
                with psycopg.connect(
                    f"postgresql://bgd@127.0.0.1:{port}/postgres", autocommit=True
                ) as c:
                    c.execute("CREATE DATABASE buildgrid")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or pg.poll() is not None:
                    raise
                time.sleep(0.1)
        return port

    def run_checked(self, argv: list[str], what: str, **kw) -> None:
        log = self.state / f"{what.replace(' ', '_')}.log"
        with open(log, "wb") as out:
            rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT, **kw)
        if rc != 0:
            raise RuntimeError(f"{what} exited with {rc}:\n{tail(log)}")

    def dead(self) -> list[str]:
        return [
            f"{n} (pid {p.pid}) exited with {p.returncode}"
            for n, p in self.procs
            if p.poll() is not None
        ]

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                # SIGINT first: postgres does a fast shutdown on it, bgd and the bots exit cleanly.
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.say(f"stopped {name} (pid {proc.pid}, exit {proc.returncode})")
        self.procs.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="number of bot processes")
    parser.add_argument("--endpoint-file", help="also write the endpoint URL here")
    parser.add_argument("--keep-state", action="store_true", help="keep the state folder (logs)")
    parser.add_argument("--log-dir", help="copy every process's log here on exit")
    args = parser.parse_args()

    # A fresh state folder under /tmp; 0711 so the `postgres` user reaches its data folder.
    state = Path(tempfile.mkdtemp(prefix="gcsckpt-rbe-", dir="/tmp"))
    state.chmod(0o711)
    service = Service(state, args.workers)
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    status = 0
    try:
        endpoint = service.start()
        if args.endpoint_file:
            Path(args.endpoint_file).write_text(endpoint + "\n")
        print(endpoint, flush=True)
        service.say(f"serving {endpoint} with {args.workers} workers (state {state})")
        while not stopping:
            if dead := service.dead():
                service.say("FAILED: " + "; ".join(dead))
                for name, _ in service.procs:
                    print(f"--- {name}.log\n{tail(state / f'{name}.log')}", file=sys.stderr)
                status = 1
                break
            time.sleep(0.2)
    except Exception as e:  # noqa: BLE001 - report, stop what started, exit non-zero
        service.say(f"FAILED: {e}")
        status = 1
    finally:
        service.stop()
        if args.log_dir:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
            for log in state.glob("*.log"):
                shutil.copy(log, args.log_dir)
        if args.keep_state:
            service.say(f"state kept in {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
