"""LocalGCS lifecycle: nothing left running, clear start errors, persistent data dirs, non-root."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

import gcsckpt
import gcsckpt.io
from gcsckpt import _gcsio
from gcsckpt.testing import LocalGCS, LocalGCSError, nginx_config


def _group_members(pgids: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes in any of `pgids`."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) in pgids and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


def _wait_gone(pgids: set[int], timeout_s: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    left = _group_members(pgids)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _group_members(pgids)
    return left


def test_stop_leaves_no_process_and_no_run_dir():
    with LocalGCS(latency_ms=5, stream_mbps=100) as gcs:
        pgids = {proc.pid for proc in gcs._procs}
        members = _group_members(pgids)
        assert len(members) >= 3  # server + nginx master + at least one worker
        run_dir = os.path.dirname(gcs.data_dir)
        assert os.path.isdir(run_dir)
        gcs.create_bucket("bkt")
    assert _wait_gone(pgids, 0.5) == []
    assert not os.path.exists(run_dir)
    gcs.stop()  # idempotent


def test_with_body_raising_still_stops_everything():
    with pytest.raises(KeyError, match="boom"):
        with LocalGCS() as gcs:
            pgids = {proc.pid for proc in gcs._procs}
            raise KeyError("boom")
    assert _wait_gone(pgids, 0.5) == []


def test_killed_parent_takes_children_down(tmp_path):
    """SIGKILL the process holding a LocalGCS: the parent-death signal stops its children."""
    script = textwrap.dedent(
        """
        import json, sys, time
        from gcsckpt.testing import LocalGCS
        gcs = LocalGCS(log_dir=sys.argv[1]).start()
        print(json.dumps([p.pid for p in gcs._procs]), flush=True)
        time.sleep(600)
        """
    )
    # TMPDIR: the SIGKILLed owner cannot remove its run dir; keep it inside tmp_path.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        pgids = set(json.loads(child.stdout.readline()))
        assert len(_group_members(pgids)) >= 3
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _wait_gone(pgids) == []


def test_missing_nginx_is_named_with_its_package(monkeypatch):
    monkeypatch.setattr(nginx_config, "NGINX_BIN", "/nonexistent/sbin/nginx")
    with pytest.raises(LocalGCSError, match=r"/nonexistent/sbin/nginx.*apt-get install nginx"):
        LocalGCS().start()


def test_missing_echo_module_is_named_when_latency_is_asked(monkeypatch):
    monkeypatch.setattr(nginx_config, "ECHO_MODULE", "/nonexistent/echo.so")
    with pytest.raises(LocalGCSError, match="libnginx-mod-http-echo"):
        LocalGCS(latency_ms=10).start()
    with LocalGCS() as gcs:  # no latency: the module is not needed
        gcs.create_bucket("bkt")


def test_taken_port_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(LocalGCSError, match=f"nginx port 127.0.0.1:{port} is already in use"):
            LocalGCS(port=port).start()
        with pytest.raises(LocalGCSError, match=f"server port 127.0.0.1:{port}"):
            LocalGCS(server_port=port).start()


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="latency_ms"):
        LocalGCS(latency_ms=-1)
    with pytest.raises(ValueError, match="stream_mbps"):
        LocalGCS(stream_mbps=0)


def test_persistent_data_dir_survives_restart(tmp_path):
    data_dir, log_dir = str(tmp_path / "data"), str(tmp_path / "logs")
    payload = os.urandom(300_000)
    with LocalGCS(data_dir=data_dir, log_dir=log_dir) as gcs:
        gcs.create_bucket("ckpt")
        gcs.put("ckpt", "run/__0_0.distcp", payload)
        gcs.put("ckpt", "run/.metadata", b"meta")
    with LocalGCS(data_dir=data_dir, log_dir=log_dir) as gcs:
        gcs.create_bucket("ckpt")  # exists already: fine
        assert gcs.get("ckpt", "run/__0_0.distcp") == payload
        names = sorted(b.name for b in gcs.storage_client().list_blobs("ckpt", prefix="run/"))
        assert names == ["run/.metadata", "run/__0_0.distcp"]
        gcs.put("ckpt", "run/.metadata", b"meta2")
        assert gcs.get("ckpt", "run/.metadata") == b"meta2"
        assert gcs.request_count() == 2
    assert gcs.request_count() == 2  # the log stays in log_dir after stop
    for name in ("server.log", "nginx_error.log", "nginx_media_access.log"):
        assert os.path.getsize(os.path.join(log_dir, name)) > 0


def _uid_mapped(uid: int) -> bool:
    """True when this user namespace can switch to `uid` (Bazel's sandbox maps only uid 0)."""
    with open("/proc/self/uid_map") as f:
        for line in f:
            inside, _, count = (int(v) for v in line.split())
            if inside <= uid < inside + count:
                return True
    return False


def test_every_public_name_resolves():
    import gcsckpt.testing

    found = {name: getattr(gcsckpt.testing, name) for name in gcsckpt.testing.__all__}
    assert found["LocalGCS"] is LocalGCS and found["LocalGCSError"] is LocalGCSError
    assert found["FAULT_KINDS"] == gcsckpt.testing.faults.KINDS
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        gcsckpt.testing.Nope  # noqa: B018


def test_the_server_imports_the_endpoint_modules_by_their_package_names():
    """One module identity: the server's modules are `gcsckpt.testing.server_*` (never bare
    `server_*` names) and it loads neither gcsckpt.io nor google-cloud-storage."""
    code = (
        "import json, sys, gcsckpt.testing.server_main; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(WANTED))))"
    ).replace("WANTED", repr(("gcsckpt", "server_", "_gcsio", "google.cloud")))
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout) == [
        "gcsckpt",
        "gcsckpt.testing",
        "gcsckpt.testing.clients",
        "gcsckpt.testing.server_http",
        "gcsckpt.testing.server_main",
        "gcsckpt.testing.server_md5",
        "gcsckpt.testing.server_objects",
        "gcsckpt.testing.server_store",
        "gcsckpt.testing.server_sums",
        "gcsckpt.testing.server_uploads",
        "gcsckpt.testing.server_xml",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root every other test already covers this")
@pytest.mark.skipif(not _uid_mapped(65534), reason="uid 65534 is not mapped in this namespace")
def test_runs_as_non_root():
    """Root can drop to `nobody`: copy the package where nobody can read it and start there."""
    base = tempfile.mkdtemp(prefix="gcsckpt-nonroot-", dir="/tmp")  # pytest's tmp is 0700
    try:
        _run_as_nobody(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_as_nobody(base: str) -> None:
    nobody = 65534
    os.chmod(base, 0o755)
    pkg = os.path.join(base, "pkg", "gcsckpt")
    shutil.copytree(os.path.dirname(gcsckpt.testing.__file__), os.path.join(pkg, "testing"))
    # testing builds its URLs with gcsckpt.io, whose package loads the C++ module (gcsckpt._gcsio).
    shutil.copytree(os.path.dirname(gcsckpt.io.__file__), os.path.join(pkg, "io"))
    shutil.copy(_gcsio.__file__, pkg)
    shutil.copy(gcsckpt.__file__, os.path.join(pkg, "__init__.py"))
    work = os.path.join(base, "work")
    os.mkdir(work)
    os.chown(work, nobody, nobody)
    script = textwrap.dedent(
        """
        import os, sys
        from gcsckpt.testing import LocalGCS
        assert os.geteuid() != 0
        with LocalGCS(data_dir=sys.argv[1] + "/data", latency_ms=5, stream_mbps=500) as gcs:
            gcs.create_bucket("bkt")
            gcs.put("bkt", "a/b c", b"x" * 100000)
            assert gcs.get("bkt", "a/b c") == b"x" * 100000
            assert gcs.request_count() == 1
        print("non-root ok")
        """
    )

    def drop_to_nobody():
        os.setgroups([])
        os.setgid(nobody)
        os.setuid(nobody)

    out = subprocess.run(
        [sys.executable, "-c", script, work],
        env={"PATH": "/bin:/usr/bin", "PYTHONPATH": os.path.join(base, "pkg"), "TMPDIR": work},
        cwd=work,
        preexec_fn=drop_to_nobody,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "non-root ok" in out.stdout
