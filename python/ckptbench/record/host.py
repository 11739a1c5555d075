"""Facts about the machine and software a benchmark ran on, recorded with every result row."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import psutil

_GIT = "/usr/bin/git"  # absolute: Bazel tests run with a minimal PATH


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """Host and software facts.

    Attributes:
      vcpu_count: logical CPUs of the host (``os.cpu_count()``).
      cpu_affinity_count: logical CPUs this process may run on (cgroups/taskset limit).
      machine_architecture: ``platform.machine()``, e.g. ``x86_64``.
      memory_total_bytes: physical memory in bytes.
      os_release: kernel release (``platform.release()``).
      python_version: e.g. ``3.11.2``.
      torch_version, transformers_version: installed distribution versions, None if absent.
      source_commit_sha: git commit of the benchmark sources, None when not in a git checkout.
      accelerator_name: CUDA device 0's name when probed and present, else None.
    """

    vcpu_count: int
    cpu_affinity_count: int
    machine_architecture: str
    memory_total_bytes: int
    os_release: str
    python_version: str
    torch_version: str | None
    transformers_version: str | None
    source_commit_sha: str | None
    accelerator_name: str | None = None


def package_version(name: str) -> str | None:
    """Installed version of distribution ``name`` without importing it; None if not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit(repo_dir: Path | str) -> str | None:
    """``git rev-parse HEAD`` in ``repo_dir``; None when git, the repo or a commit is missing."""
    try:
        done = subprocess.run(
            [_GIT, "-C", str(repo_dir), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and len(sha) == 40 else None


def _default_repo_dir() -> Path:
    # `bazel run` exports the workspace root; elsewhere the sources' own checkout is the best guess.
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    return Path(workspace) if workspace else Path(__file__).resolve().parent


def _accelerator_name() -> str | None:
    import torch  # deferred: importing torch costs seconds and is only needed for GPU runs

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def collect_host_facts(
    repo_dir: Path | str | None = None, probe_accelerator: bool = False
) -> HostFacts:
    """Collects HostFacts for this process.

    Args:
      repo_dir: where to look up the git commit; defaults to ``$BUILD_WORKSPACE_DIRECTORY`` (set
        by ``bazel run``) or this file's folder.
      probe_accelerator: import torch and record CUDA device 0's name.
    """
    return HostFacts(
        vcpu_count=os.cpu_count() or 1,
        cpu_affinity_count=len(os.sched_getaffinity(0)),
        machine_architecture=platform.machine(),
        memory_total_bytes=psutil.virtual_memory().total,
        os_release=platform.release(),
        python_version=platform.python_version(),
        torch_version=package_version("torch"),
        transformers_version=package_version("transformers"),
        source_commit_sha=git_commit(repo_dir if repo_dir is not None else _default_repo_dir()),
        accelerator_name=_accelerator_name() if probe_accelerator else None,
    )


def host_facts() -> dict:
    """``collect_host_facts()`` as a dict, plus the 1-minute load average (``load_avg_1m``) and
    the extension's libcurl version (``libcurl``): what the range-read benchmark records."""
    from gcsckpt.io.extension import _gcsio  # the one import of the extension

    return {
        **dataclasses.asdict(collect_host_facts()),
        "load_avg_1m": os.getloadavg()[0],
        "libcurl": _gcsio.curl_version(),
    }
