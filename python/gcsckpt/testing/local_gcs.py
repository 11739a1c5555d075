"""LocalGCS: a real GCS endpoint on loopback (our GCS server on disk + nginx in front)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import weakref

from gcsckpt.io.names import check_bucket_name
from gcsckpt.testing import clients, json_api, nginx_config
from gcsckpt.testing.media_log import MediaRequest, settled_media_log
from gcsckpt.testing.ports import LOOPBACK, free_port, port_is_free, wait_until_ready
from gcsckpt.testing.processes import ManagedProcess

# The server runs as `python -m gcsckpt.testing.server_main`, importing this very package from
# the folder that holds it (put first on its PYTHONPATH; `-P`: the working folder is not searched).
_SERVER_MODULE = "gcsckpt.testing.server_main"
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_START_ATTEMPTS = 3  # auto-picked ports can be taken between the pick and the bind


def _server_env() -> dict[str, str]:
    """This process's environment with the folder holding this `gcsckpt` first on PYTHONPATH."""
    paths = [_PACKAGE_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class LocalGCSError(RuntimeError):
    """The local endpoint could not start (missing program, taken port, crash); says which."""


def _check_programs(latency_ms: float) -> None:
    if not os.access(nginx_config.NGINX_BIN, os.X_OK):
        raise LocalGCSError(
            f"{nginx_config.NGINX_BIN} is missing or not executable: apt-get install nginx"
        )
    if latency_ms > 0 and not os.path.isfile(nginx_config.ECHO_MODULE):
        raise LocalGCSError(
            f"latency_ms needs {nginx_config.ECHO_MODULE} (nginx echo module): "
            "apt-get install libnginx-mod-http-echo"
        )


def _stop_all(procs: list[ManagedProcess], cleanup_dirs: list[str]) -> None:
    """Stops nginx before the server, then removes temp folders. Safe to call twice."""
    for proc in reversed(procs):
        proc.stop()
    procs.clear()
    for path in cleanup_dirs:
        shutil.rmtree(path, ignore_errors=True)
    cleanup_dirs.clear()


_RUNNING: weakref.WeakSet = weakref.WeakSet()  # started, not yet stopped (for SIGTERM)
_PREVIOUS_SIGTERM: list = []  # the handler replaced by _on_sigterm, once installed


def _on_sigterm(signum, frame) -> None:
    """Stops every running LocalGCS (processes and temp folders), then does what SIGTERM did
    before: the previous handler, or the default (the process ends with SIGTERM)."""
    for gcs in list(_RUNNING):
        gcs.stop()
    previous = _PREVIOUS_SIGTERM[0]
    signal.signal(signal.SIGTERM, previous)
    if callable(previous):
        previous(signum, frame)
    else:
        os.kill(os.getpid(), signum)


def _install_sigterm_cleanup() -> None:
    """From the main thread, once, unless SIGTERM is ignored: the temp folders go on SIGTERM
    too (Python's default SIGTERM runs no finalizer)."""
    if _PREVIOUS_SIGTERM or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):
        return
    _PREVIOUS_SIGTERM.append(previous)
    signal.signal(signal.SIGTERM, _on_sigterm)


class LocalGCS:
    """A GCS JSON API endpoint on 127.0.0.1, for tests and the default benchmark run.

    The server (gcsckpt.testing.server_main, threaded, on disk) handles uploads (JSON and XML API),
    metadata, listing, deletes, compose and copy; nginx serves media reads straight from its
    files with keep-alive and full Range semantics (206 + Content-Range, 416, suffix ranges),
    writes upload bodies to the data disk for the server to rename into place, and proxies
    everything else.

    Like GCS: every media answer carries ``x-goog-generation``; ``generation=`` and
    ``ifGenerationMatch=`` on media reads answer 404 / 412 when the object's generation
    differs; ``ifGenerationMatch`` on media, multipart and resumable uploads answers 412 when
    it does not hold (``0``: create only if absent); a later write has a larger generation; an
    overwrite is atomic (a read sees one version whole); 0-byte uploads work. See
    server_store.py and nginx_config.py for how.

    Args:
      data_dir: folder for objects (kept: reusing it later serves the same buckets and objects);
        None: a temp folder removed at stop().
      latency_ms: first-byte delay added to every media read and upload answer, milliseconds
        (models remote GCS).
      stream_mbps: bandwidth cap per media request, MB/s (1 MB = 1e6 bytes); None: uncapped.
        Uploads: the answer waits until the body would have arrived at this rate.
      log_dir: folder for server.log, nginx_error.log, nginx_media_access.log (kept);
        None: inside the run's temp folder (removed at stop()).
      nginx_workers: nginx worker processes; None: min(CPU count, 8).
      port / server_port: fixed ports; None: free ones picked at start.
      start_timeout_s: how long each program may take to answer, seconds.
      md5_in_upload_answers: compute every upload's MD5 while answering it, so that upload
        answers always carry md5Hash (and XML ETags are MD5s), as GCS's do; for clients that
        read md5Hash from an upload answer without sending one (gcsfs with consistency="md5",
        google-cloud-storage 2.x's transfer_manager with its default checksum="md5"). Off:
        only requests that send an MD5 have it computed inline, the others' later at idle
        priority (server_sums.py says why).

    Raises (at start / __enter__):
      LocalGCSError: nginx or its echo module (when latency_ms > 0) is missing,
        a fixed port is taken, or a program exits or does not answer in time (log tail quoted).
      ValueError: a negative latency or non-positive rate.

    Children run in their own process groups with a parent-death signal, so they go away when
    this object stops, when the with-body raises, and when this process is killed (create it
    from a thread that lives as long as the endpoint is needed: the signal follows that thread).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        latency_ms: float = 0.0,
        stream_mbps: float | None = None,
        log_dir: str | None = None,
        *,
        nginx_workers: int | None = None,
        port: int | None = None,
        server_port: int | None = None,
        start_timeout_s: float = 30.0,
        md5_in_upload_answers: bool = False,
    ) -> None:
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
        if stream_mbps is not None and stream_mbps <= 0:
            raise ValueError(f"stream_mbps must be > 0 or None, got {stream_mbps}")
        self.latency_ms = float(latency_ms)
        self.stream_mbps = stream_mbps
        self._data_dir_arg = data_dir
        self._log_dir_arg = log_dir
        self._workers = nginx_workers or min(os.cpu_count() or 1, 8)
        self._port_arg = port
        self._server_port_arg = server_port
        self._start_timeout_s = start_timeout_s
        self._md5_in_upload_answers = md5_in_upload_answers
        self._procs: list[ManagedProcess] = []
        self._cleanup_dirs: list[str] = []
        self._finalizer: weakref.finalize | None = None
        self.endpoint = ""  # "http://127.0.0.1:PORT" of nginx, set by start()
        self.server_endpoint = ""  # the server itself (media reads are nginx's)
        self.port = 0
        self.server_port = 0
        self.data_dir = ""
        self.log_dir = ""
        self._media_log = ""

    # lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> LocalGCS:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> LocalGCS:
        """Starts the server, then nginx, and waits until both answer `GET /` with "OK"."""
        if self._procs:
            raise LocalGCSError(f"LocalGCS already running at {self.endpoint}")
        _check_programs(self.latency_ms)
        run_dir = tempfile.mkdtemp(prefix="gcsckpt-localgcs-")
        self._cleanup_dirs.append(run_dir)
        self._finalizer = weakref.finalize(self, _stop_all, self._procs, self._cleanup_dirs)
        _install_sigterm_cleanup()
        _RUNNING.add(self)
        try:
            self._prepare_dirs(run_dir)
            self._start_server()
            self._start_nginx(run_dir)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops nginx and the server (whole process groups) and removes temp folders.

        Idempotent; objects in a caller-given data_dir and logs in a caller-given log_dir stay.
        Also runs on SIGTERM (a handler installed by the first start from the main thread).
        """
        _RUNNING.discard(self)
        _stop_all(self._procs, self._cleanup_dirs)

    @property
    def process_ids(self) -> list[int]:
        """Pids of the running server and nginx master (nginx's workers are their children);
        empty when stopped. The benchmark samples their CPU as the endpoint's."""
        return [proc.pid for proc in self._procs]

    def _prepare_dirs(self, run_dir: str) -> None:
        self.data_dir = os.path.abspath(self._data_dir_arg or os.path.join(run_dir, "data"))
        self.log_dir = os.path.abspath(self._log_dir_arg or os.path.join(run_dir, "logs"))
        for path in (self.data_dir, self.log_dir, os.path.join(self.data_dir, ".cloudstorage")):
            os.makedirs(path, exist_ok=True)

    def _pick_port(self, fixed: int | None, what: str) -> int:
        if fixed is None:
            return free_port()
        if not port_is_free(fixed):
            raise LocalGCSError(f"{what} port {LOOPBACK}:{fixed} is already in use")
        return fixed

    def _start_server(self) -> None:
        log = os.path.join(self.log_dir, "server.log")
        for attempt in range(_START_ATTEMPTS):
            port = self._pick_port(self._server_port_arg, "server")
            argv = [
                sys.executable,
                "-P",
                "-m",
                _SERVER_MODULE,
                "--port",
                str(port),
                "--data-dir",
                self.data_dir,
                # The latency model holds upload answers too (server_http.Pacing).
                "--upload-latency-ms",
                str(self.latency_ms),
                "--upload-rate",
                str(self.stream_mbps * 1e6 if self.stream_mbps else 0),
            ] + (["--md5-in-upload-answers"] if self._md5_in_upload_answers else [])
            proc = ManagedProcess("gcs server", argv, log, env=_server_env())
            self._procs.append(proc)
            if wait_until_ready(LOOPBACK, port, b"OK", self._start_timeout_s, proc.alive):
                self.server_port = port
                self.server_endpoint = f"http://{LOOPBACK}:{port}"
                return
            proc.stop()
            self._procs.remove(proc)
            if "cannot bind" in proc.log_tail() and self._server_port_arg is None:
                continue  # someone took the picked port: pick another
            raise LocalGCSError(
                f"the gcs server did not answer on {LOOPBACK}:{port} "
                f"(attempt {attempt + 1}); log {log}:\n{proc.log_tail()}"
            )
        raise LocalGCSError(f"the gcs server found no free port in {_START_ATTEMPTS} tries")

    def _start_nginx(self, run_dir: str) -> None:
        for attempt in range(_START_ATTEMPTS):
            port = self._pick_port(self._port_arg, "nginx")
            settings = nginx_config.NginxSettings(
                listen_port=port,
                server_port=self.server_port,
                objects_root=os.path.join(self.data_dir, ".cloudstorage"),
                run_dir=run_dir,
                log_dir=self.log_dir,
                latency_s=self.latency_ms / 1000.0,
                rate_bytes_per_s=int(self.stream_mbps * 1e6) if self.stream_mbps else 0,
                workers=self._workers,
            )
            conf = os.path.join(run_dir, "nginx.conf")
            with open(conf, "w") as out:
                out.write(nginx_config.render(settings))
            argv = [nginx_config.NGINX_BIN, "-p", run_dir, "-c", conf, "-e", settings.error_log]
            proc = ManagedProcess("nginx", [*argv, "-g", "daemon off;"], settings.error_log)
            self._procs.append(proc)
            if wait_until_ready(LOOPBACK, port, b"OK", self._start_timeout_s, proc.alive):
                self.port = port
                self.endpoint = f"http://{LOOPBACK}:{port}"
                self._media_log = settings.media_log
                return
            proc.stop()
            self._procs.remove(proc)
            if "Address already in use" in proc.log_tail() and self._port_arg is None:
                continue
            raise LocalGCSError(
                f"nginx did not answer on {LOOPBACK}:{port} (attempt {attempt + 1}); "
                f"config {conf}; log {settings.error_log}:\n{proc.log_tail()}"
            )
        raise LocalGCSError(f"nginx found no free port in {_START_ATTEMPTS} tries")

    # use ---------------------------------------------------------------------------------------

    def _require_running(self) -> None:
        if not self._procs:
            raise LocalGCSError("LocalGCS is not running (use it as a context manager or start())")

    def env(self) -> dict[str, str]:
        """{"STORAGE_EMULATOR_HOST": endpoint, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}."""
        self._require_running()
        return clients.emulator_env(self.endpoint)

    def storage_client(self, project: str = "test"):
        """google.cloud.storage.Client (AnonymousCredentials) whose requests go to `endpoint`."""
        self._require_running()
        return clients.storage_client(self.endpoint, project)

    def gcsfs(self, **options):
        """gcsfs.GCSFileSystem (token="anon") whose requests go to `endpoint`."""
        self._require_running()
        return clients.gcsfs_filesystem(self.endpoint, **options)

    def create_bucket(self, name: str, soft_delete_retention_s: int | None = None) -> None:
        """Creates bucket `name`; one that exists already (persistent data_dir) is fine.

        `soft_delete_retention_s`: 0 makes deletes final (no soft-deleted copy is kept); None
        keeps GCS's default for new buckets (7 days, during which a deleted object's bytes are
        kept, listed with softDeleted=true).

        Raises:
            ValueError: `name` breaks GCS's bucket naming rules (`gcsckpt.io.names`; the
                message names the rule), as GCS would refuse it.
        """
        check_bucket_name(name)
        self._require_running()
        json_api.create_bucket(self.endpoint, name, soft_delete_retention_s=soft_delete_retention_s)

    def put(self, bucket: str, name: str, data: bytes) -> int:
        """Writes `data` as gs://bucket/name (through nginx to the server); its generation.

        Raises:
          FileNotFoundError: the bucket does not exist.
        """
        self._require_running()
        return int(json_api.upload(self.endpoint, bucket, name, data)["generation"])

    def get(self, bucket: str, name: str) -> bytes:
        """The content of gs://bucket/name, by one media GET through nginx.

        Raises:
          FileNotFoundError: the bucket or the object does not exist.
        """
        self._require_running()
        return json_api.download(self.endpoint, bucket, name)

    def media_requests(self) -> list[MediaRequest]:
        """Every media read nginx answered so far, in completion order (any status).

        Also works after stop() when log_dir was given (the log stays there).
        """
        if not self._media_log:
            raise LocalGCSError("LocalGCS was never started: no media log to read")
        return settled_media_log(self._media_log)

    def request_count(self) -> int:
        """How many media GETs nginx answered so far (any status, 404s included)."""
        return len(self.media_requests())
