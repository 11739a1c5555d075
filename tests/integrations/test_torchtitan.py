"""torchtitan's own CheckpointManager machinery with gcsckpt underneath (GCSCheckpointManager),
on 2 gloo CPU ranks against LocalGCS: selected from torchtitan's config (its ConfigManager and
CLI); in each async_mode (GCSCheckpointer "sync", "thread", "process"), a save every step with
keep_latest_k=2 honoured in the bucket (old steps' objects gone), and a restart that resumes
exactly (model, optimizer, LR schedulers, the step), or loads an older step asked for, or
refuses a deleted one."""

from __future__ import annotations

import pytest
import titan_ranks
import torch
from titan_ranks import BUCKET
from torchtitan.config.manager import ConfigManager

from ckptbench.harness.local_ranks import run_ranks
from gcsckpt.dcp.steps import list_steps
from gcsckpt.integrations.torchtitan import GCSCheckpointManager
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

STEPS = 5
_PRELOAD = ("torch", "torch.distributed.checkpoint", "titan_ranks")


def _run(fn, *args):
    return run_ranks(fn, 2, *args, preload=_PRELOAD, timeout_s=120.0)


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def test_selected_from_torchtitans_config_and_command_line():
    args = ["--module", "titan_registry", "--config", "gcs_run"]
    overrides = ["--checkpoint.keep-latest-k", "4", "--checkpoint.endpoint", "http://127.0.0.1:1"]
    config = ConfigManager().parse_args(args + overrides)
    assert type(config.checkpoint) is GCSCheckpointManager.Config
    assert config.checkpoint.folder == "gs://titan/from-config"
    assert config.checkpoint.keep_latest_k == 4  # from the command line
    assert config.checkpoint.endpoint == "http://127.0.0.1:1"
    assert config.checkpoint.interval == 10  # from the registry function
    assert GCSCheckpointManager.Config._owner is GCSCheckpointManager  # what build() makes


def _assert_equal(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), f"{what}: {key}"
        else:
            assert got[key] == value, f"{what}: {key}"


def _assert_state(got: dict, want: dict) -> None:
    _assert_equal(got["model"], want["model"], "model")
    _assert_equal(got["optim"], want["optim"], "optimizer")
    assert got["lr"] == want["lr"]
    assert got["step"] == want["step"]


@pytest.mark.parametrize("async_mode", ["disabled", "async", "async_with_pinned_mem"])
def test_saves_prunes_and_resumes_exactly(gcs, async_mode):
    prefix = f"run-{async_mode}"
    folder = f"gs://{BUCKET}/{prefix}"
    trained = _run(titan_ranks.train, gcs.endpoint, folder, async_mode, STEPS)
    for report in trained:
        assert report["fresh_start_loaded"] is False  # empty folder: a fresh start
        assert report["saved"] == [True] * STEPS
    snapshots = trained[0]["snapshots"]
    _assert_state(trained[1]["snapshots"][STEPS], snapshots[STEPS])  # replicated on 2 ranks
    assert snapshots[STEPS - 1]["step"] == STEPS - 1
    assert not torch.equal(snapshots[STEPS]["model"]["0.weight"], snapshots[1]["model"]["0.weight"])

    # keep_latest_k=2: only step-4 and step-5 are left, every object of steps 1-3 deleted.
    names = ObjectStore(gcs.endpoint).list(BUCKET, f"{prefix}/")
    assert {name.split("/")[1] for name in names} == {"step-4", "step-5"}
    infos = list_steps(ObjectStore(gcs.endpoint), folder)
    assert [(i.step, i.complete) for i in infos] == [(5, True), (4, True)]
    for info in infos:  # each step: .metadata and the objects it names, written by both ranks
        folder_names = {
            n.rsplit("/", 1)[1] for n in names if n.split("/")[1] == f"step-{info.step}"
        }
        assert folder_names == {".metadata", *info.named}
        assert {name[:3] for name in info.named} == {"__0", "__1"}

    # A restart resumes the newest step exactly, from other initial weights; then load_step=4
    # loads step 4, and load_step=2 (deleted) is refused as torchtitan does (FileNotFoundError).
    resumed = _run(titan_ranks.resume, gcs.endpoint, folder, async_mode, [-1, STEPS - 1, 2])
    for newest, older, gone in resumed:
        assert newest["loaded"] is True
        assert newest["before"]["step"] == 0
        assert not torch.equal(
            newest["before"]["model"]["0.weight"], snapshots[STEPS]["model"]["0.weight"]
        )
        _assert_state(newest["after"], snapshots[STEPS])
        assert newest["last_load"] == {"step": STEPS, "source": "gcs", "skipped": []}
        assert older["loaded"] is True
        _assert_state(older["after"], snapshots[STEPS - 1])
        assert older["last_load"]["step"] == STEPS - 1
        assert gone["loaded"].startswith("NoCheckpointError: ")
        assert f"{folder}/step-2 is not a complete checkpoint" in gone["loaded"]
        assert "[5, 4]" in gone["loaded"]
        _assert_state(gone["after"], gone["before"])  # nothing changed
