"""host.collect_host_facts: real values of this machine and the git commit of a checkout."""

import os
import subprocess

from ckptbench.record.host import collect_host_facts, git_commit, package_version


def _git(repo, *args):
    return subprocess.run(
        ["/usr/bin/git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_host_facts_describe_this_machine(tmp_path):
    facts = collect_host_facts(repo_dir=tmp_path)
    assert facts.vcpu_count == os.cpu_count()
    assert facts.cpu_affinity_count == len(os.sched_getaffinity(0))
    assert facts.memory_total_bytes > 2**30
    assert facts.torch_version == package_version("torch")
    assert facts.torch_version.startswith("2.")
    assert facts.transformers_version == "4.46.3"
    assert facts.source_commit_sha is None  # tmp_path is no git checkout
    assert facts.accelerator_name is None


def test_git_commit_of_a_checkout(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("x")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    expected = _git(tmp_path, "rev-parse", "HEAD")
    assert git_commit(tmp_path) == expected
    assert collect_host_facts(repo_dir=tmp_path).source_commit_sha == expected


def test_unknown_package_has_no_version():
    assert package_version("no-such-distribution-gcsckpt") is None
