"""//:wheel: file list, tags, metadata, and a 2-rank FSDP2 save/load by the installed wheel.

The wheel must hold exactly the sources of the shipped libraries (byte for byte), the extension
Bazel built inside the package (gcsckpt._gcsio), the version of `gcsckpt.__version__`, a
description of its own (not the repository's README), Requires-Dist entries that match the
modules' third-party imports with ranges that start at the tested pins; installed with
`pip install --no-deps` into a fresh venv (other packages from the pinned environment through a
.pth file), it must save and load a sharded state dict against the local endpoint from a folder
outside the repository.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import wheel_contents as wc
from packaging.utils import canonicalize_name

import gcsckpt
from gcsckpt.testing import LocalGCS

RUNFILES = Path(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "gcsckpt"))
VERSION = gcsckpt.__version__  # the one source of the version
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
DIST_INFO = f"gcsckpt-{VERSION}.dist-info"
EXTENSION = "gcsckpt._gcsio"
EXTENSION_FILE = f"gcsckpt/_gcsio{sysconfig.get_config_var('EXT_SUFFIX')}"
BUILT_EXTENSION = "gcsckpt/_gcsio.so"  # where Bazel places it in the package (//python:io's data)
BUCKET = "wheel"


@pytest.fixture(scope="module")
def wheel() -> str:
    found = sorted((RUNFILES / "dist").glob("gcsckpt-*.whl"))
    assert len(found) == 1, found
    return str(found[0])


@pytest.fixture(scope="module")
def contents(wheel) -> dict[str, str]:
    return wc.files(wheel)


def _package_sources() -> dict[str, str]:
    """{gcsckpt/...: sha256} of the shipped libraries' files in this test's runfiles (the built
    extension apart: the wheel holds it under setuptools' name, EXTENSION_FILE)."""
    root = RUNFILES / "python"
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (root / "gcsckpt").rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and str(p.relative_to(root)) != BUILT_EXTENSION
    }


def test_name_and_tags(wheel):
    assert Path(wheel).name == f"gcsckpt-{VERSION}-{TAG}-{TAG}-linux_x86_64.whl"
    fields = wc.read(wheel, f"{DIST_INFO}/WHEEL").decode().splitlines()
    assert "Root-Is-Purelib: false" in fields
    assert f"Tag: {TAG}-{TAG}-linux_x86_64" in fields


def test_declares_the_gcsckpt_console_script(wheel):
    entry_points = wc.read(wheel, f"{DIST_INFO}/entry_points.txt").decode().splitlines()
    assert "[console_scripts]" in entry_points
    assert "gcsckpt = gcsckpt.cli:main" in entry_points


def test_holds_exactly_the_package_sources_and_the_extension(wheel, contents):
    sources = _package_sources()
    assert len(sources) > 30  # io, dcp and testing modules
    shipped = {k: v for k, v in contents.items() if k.startswith("gcsckpt/")}
    shipped.pop(EXTENSION_FILE)  # the extension, inside the package
    assert sorted(set(sources) - set(shipped)) == []  # a missing file fails here
    assert sorted(set(shipped) - set(sources)) == []
    assert shipped == sources  # same bytes
    assert not any(k.startswith("ckptbench/") for k in contents)
    built = (RUNFILES / "python" / BUILT_EXTENSION).read_bytes()
    assert contents[EXTENSION_FILE] == hashlib.sha256(built).hexdigest()
    others = set(contents) - set(shipped) - {EXTENSION_FILE}
    names = ("METADATA", "WHEEL", "RECORD", "top_level.txt", "entry_points.txt")
    assert others == {f"{DIST_INFO}/{n}" for n in names}
    # One top-level package: nothing of the wheel sits beside `gcsckpt` in site-packages.
    assert wc.read(wheel, f"{DIST_INFO}/top_level.txt").decode().split() == ["gcsckpt"]


def test_version_is_the_package_version(wheel):
    """One source: the wheel's name and METADATA carry `gcsckpt.__version__` (its __init__.py)."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert wc.metadata(wheel, DIST_INFO)["Version"] == VERSION
    shipped_init = wc.read(wheel, "gcsckpt/__init__.py").decode()
    assert f'__version__ = "{VERSION}"' in shipped_init.splitlines()


def test_description_is_the_wheels_own(wheel):
    """The long description is tools/wheel/description.md: no build or CI instructions, no links
    into the repository."""
    meta = wc.metadata(wheel, DIST_INFO)
    body = meta.get_payload()
    assert body.strip() == (RUNFILES / "tools/wheel/description.md").read_text().strip()
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta["Summary"].startswith("PyTorch distributed checkpoints (DCP) on Google Cloud")
    for word in ("bazel", "tools/", "docs/", ".ci", "requirements.lock"):
        assert word not in body.lower(), word
    assert re.findall(r"\]\((?!https://)[^)]*\)", body) == []  # Markdown links: absolute only
    assert "from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter" in body


def test_record_lists_every_file_with_its_hash(wheel, contents):
    rows = list(csv.reader(io.StringIO(wc.read(wheel, f"{DIST_INFO}/RECORD").decode())))
    record = {row[0]: row[1] for row in rows}
    assert set(record) == set(contents)
    for name, digest in contents.items():
        if name == f"{DIST_INFO}/RECORD":
            assert record[name] == ""
            continue
        b64 = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
        assert record[name] == f"sha256={b64}", name


def _module_imports(wheel, contents):
    """{archive path: (modules, maybe_modules)} of every shipped .py file."""
    return {
        name: wc.imported_modules(wc.read(wheel, name).decode())
        for name in contents
        if name.endswith(".py")
    }


def _shipped_module_names(contents) -> set[str]:
    names = set()
    for name in contents:
        if name.startswith("gcsckpt/") and name.endswith(".py"):
            parts = name[: -len(".py")].split("/")
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names | {EXTENSION}


def test_every_gcsckpt_import_is_shipped(wheel, contents):
    shipped = _shipped_module_names(contents)
    missing = []
    for name, (modules, maybe) in _module_imports(wheel, contents).items():
        for module in modules:
            kind = wc.classify(module, EXTENSION)
            if kind == "gcsckpt" and module not in shipped:
                missing.append(f"{name}: {module}")
        for module in maybe:  # `from gcsckpt.x import y`: y is a shipped module or a name in x
            if (
                wc.classify(module, EXTENSION) == "gcsckpt"
                and module.rsplit(".", 1)[0] not in shipped
            ):
                missing.append(f"{name}: {module}")
    assert missing == []


# Shipped files whose third-party imports belong to an extra (archive path prefix -> extra);
# every other file's are the core requirements.
EXTRA_FILES = {
    "gcsckpt/testing/": "testing",
    "gcsckpt/integrations/torchtitan": "torchtitan",
}


def _extra_of(name: str) -> str | None:
    return next((e for prefix, e in EXTRA_FILES.items() if name.startswith(prefix)), None)


def _third_party(wheel, contents, *, extra: str | None) -> set[str]:
    """Distributions imported by the shipped files of `extra` (None: the core files)."""
    dists = set()
    for name, (modules, maybe) in _module_imports(wheel, contents).items():
        if _extra_of(name) != extra:
            continue
        for module in modules:
            if wc.classify(module, EXTENSION) != "third_party":
                continue
            subs = sorted(m for m in maybe if m.startswith(module + "."))
            # A namespace package (google.cloud) has no file: its imported submodule does.
            dists.add(wc.distribution_of(subs[0] if subs and "." in module else module))
    return dists


def test_requirements_match_imports_and_tested_pins(wheel, contents):
    reqs = wc.requirements(wc.metadata(wheel, DIST_INFO))
    assert set(reqs) == {None, "testing", "torchtitan"}
    core = _third_party(wheel, contents, extra=None)
    assert set(reqs[None]) == core
    for extra in ("testing", "torchtitan"):
        assert set(reqs[extra]) == _third_party(wheel, contents, extra=extra) - core, extra
    assert {"torch", "google-auth"} <= core
    assert set(reqs["torchtitan"]) == {"torchtitan"}
    assert str(reqs["torchtitan"]["torchtitan"].specifier) == "<0.4,>=0.3.0"  # below next minor
    pins = {}
    for line in (RUNFILES / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version.strip()
    for group in reqs.values():
        for name, req in group.items():
            floors = [s.version for s in req.specifier if s.operator == ">="]
            assert floors == [pins[name].split("+")[0]], (name, str(req))
            assert req.specifier.contains(pins[name], prereleases=True), (name, str(req))
    meta = wc.metadata(wheel, DIST_INFO)
    major, minor = sys.version_info[:2]
    assert meta["Requires-Python"] in (f"<{major}.{minor + 1},>={major}.{minor}",)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _clean_env(home: Path) -> dict[str, str]:
    """This environment without Bazel's Python path and runfiles variables."""
    drop = ("PYTHON", "RUNFILES", "TEST_SRCDIR", "BUILD_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(home), PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def test_installed_wheel_saves_and_loads_fsdp2_on_two_ranks(wheel, gcs, tmp_path):
    venv = tmp_path / "venv"
    env = _clean_env(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            env=env,
            text=True,
        ).strip()
    )
    # The pinned environment's packages (torch, google-auth, ...) come after the venv's own.
    (site / "pinned-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        wheel,
    ]
    subprocess.run(install, check=True, env=env, capture_output=True)
    assert (site / EXTENSION_FILE).is_file()
    assert sorted(p.name for p in site.glob("_gcsio*")) == []  # no top-level module

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    script = job_dir / "wheel_job.py"
    script.write_bytes((RUNFILES / "tests/wheel/wheel_job.py").read_bytes())
    ckpt = f"gs://{BUCKET}/fsdp2"
    result = subprocess.run(
        [python, script, "--endpoint", gcs.endpoint, "--ckpt", ckpt],
        cwd=job_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["prefix"] == str(venv)
    assert report["version"] == VERSION
    assert report["gcsckpt"] == str(site / "gcsckpt" / "__init__.py")
    assert report["gcsio"] == str(site / EXTENSION_FILE)
    runfiles = str(RUNFILES.resolve())
    assert [p for p in report["sys_path"] if p.startswith(runfiles) or "runfiles" in p] == []
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    # The console script, installed beside the venv's python (no step-N folders at the top).
    listed = subprocess.run(
        [venv / "bin" / "gcsckpt", "ls", f"gs://{BUCKET}", "--endpoint", gcs.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-4000:]
    assert listed.stdout.split() == ["step", "bytes", "objects", "complete", "age", "problem"]
    for rank in report["ranks"]:
        assert rank["mismatches"] == []
        assert rank["compared"] == 4 + 4 * 3 + 1  # 4 params; step, exp_avg, exp_avg_sq each; groups
    names = {b.name for b in gcs.storage_client().list_blobs(BUCKET, prefix="fsdp2/")}
    assert "fsdp2/.metadata" in names
    # Data objects carry the save's id: ``__{rank}_{save}_{i}.distcp``, one per rank here.
    for rank in (0, 1):
        assert len(fnmatch.filter(names, f"fsdp2/__{rank}_*_0.distcp")) == 1, sorted(names)
