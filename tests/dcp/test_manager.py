"""GCSCheckpointer(root=...) in one process against a local endpoint: the run's steps, retention,
the node-local tier, fall-backs, its own exceptions; kills (during a save, a retention pass and a
load) in child processes; stock torch reading a step the manager wrote; LocalGCS after SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed.checkpoint as dcp
from disk_faults import flip_on_disk
from torch.distributed.checkpoint import FileSystemReader

from gcsckpt.dcp import (
    CheckpointLoadError,
    CheckpointSaveError,
    GCSCheckpointer,
    NoCheckpointError,
)
from gcsckpt.dcp.steps import list_steps
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

BUCKET = "manager"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def _state(value: float) -> dict:
    return {"w": torch.full((64,), float(value)), "b": torch.arange(8) + int(value)}


def _blank() -> dict:
    return {"w": torch.zeros(64), "b": torch.zeros(8, dtype=torch.int64)}


def _names(gcs, prefix: str) -> list[str]:
    return sorted(ObjectStore(gcs.endpoint).list(BUCKET, prefix))


def _listing(gcs, prefix: str) -> list[tuple]:
    return sorted(
        (i.name, i.size, i.generation)
        for i in ObjectStore(gcs.endpoint).list_objects(BUCKET, prefix)
    )


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("mode", ["sync", "thread"])
def test_steps_retention_and_resume(gcs, mode):
    root = f"gs://{BUCKET}/retention-{mode}"
    ckpt = GCSCheckpointer(mode, root=root, keep_latest=2, keep_every=4, endpoint=gcs.endpoint)
    assert ckpt.steps() == [] and ckpt.latest() is None
    assert ckpt.load(_blank()) is None  # a first run
    for step in range(1, 8):
        ckpt.save(_state(step), step=step)
    ckpt.close()
    again = GCSCheckpointer(mode, root=root, endpoint=gcs.endpoint)
    assert again.steps() == [7, 6, 4] and again.latest() == 7  # 4 kept by keep_every
    assert {n.split("/")[1] for n in _names(gcs, f"retention-{mode}/")} == {
        "step-4",
        "step-6",
        "step-7",
    }
    state = _blank()
    assert again.load(state) == 7 and torch.equal(state["w"], _state(7)["w"])
    assert again.last_load["source"] == "gcs"
    assert again.load(state, step=4) == 4 and torch.equal(state["b"], _state(4)["b"])
    with pytest.raises(NoCheckpointError, match="step-5 is not a complete checkpoint"):
        again.load(state, step=5)
    again.close()


def test_two_runs_under_different_roots_do_not_touch_each_other(gcs):
    one = GCSCheckpointer("sync", root=f"gs://{BUCKET}/run", keep_latest=1, endpoint=gcs.endpoint)
    two = GCSCheckpointer("sync", root=f"gs://{BUCKET}/run2", keep_latest=1, endpoint=gcs.endpoint)
    nested = GCSCheckpointer("sync", root=f"gs://{BUCKET}/run/sub", endpoint=gcs.endpoint)
    for step in (1, 2):
        two.save(_state(step), step=step)
        nested.save(_state(step), step=step)
    for step in (1, 2, 3):
        one.save(_state(step), step=step)
    for ckpt in (one, two, nested):
        ckpt.close()
    assert one.steps() == [3] and two.steps() == [2] and nested.steps() == [2, 1]


def test_truncated_object_makes_its_step_incomplete_and_load_falls_back(gcs):
    root = f"gs://{BUCKET}/truncated"
    ckpt = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.save(_state(2), step=2)
    store = ObjectStore(gcs.endpoint)
    data = [n for n in _names(gcs, "truncated/step-2/") if n.endswith(".distcp")][0]
    store.upload(BUCKET, data, store.download(BUCKET, data)[:-10])
    infos = {info.step: info for info in ckpt.step_infos()}
    assert not infos[2].complete and infos[2].committed
    assert f"gs://{BUCKET}/{data} holds" in infos[2].problem and "(truncated)" in infos[2].problem
    assert ckpt.steps() == [1]
    state = _blank()
    assert ckpt.load(state) == 1 and torch.equal(state["w"], _state(1)["w"])
    ckpt.close()


def test_a_newest_step_that_fails_to_load_is_skipped_with_the_reason(gcs, caplog):
    root = f"gs://{BUCKET}/failing"
    ckpt = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.save(_state(2), step=2)
    store = ObjectStore(gcs.endpoint)
    data = [n for n in _names(gcs, "failing/step-2/") if n.endswith(".distcp")][0]
    body = bytearray(store.download(BUCKET, data))
    body[-1] ^= 0xFF
    store.upload(BUCKET, data, bytes(body))  # same size, rewritten after .metadata
    assert ckpt.steps() == [2, 1]
    state = _blank()
    with caplog.at_level("WARNING", logger="gcsckpt.dcp.checkpointer"):
        assert ckpt.load(state) == 1
    assert torch.equal(state["w"], _state(1)["w"])
    [(skipped, why)] = ckpt.last_load["skipped"]
    assert skipped == 2 and f"load of {root}/step-2 failed on rank(s) 0" in why
    assert "check_commit_order=False" in why  # a copied checkpoint's hint
    assert "falling back to step-1" in caplog.text
    with pytest.raises(CheckpointLoadError) as info:  # asked for: no fall-back
        ckpt.load(state, step=2)
    assert isinstance(info.value, Exception) and info.value.__cause__ is not None
    ckpt.close()


def test_save_failure_is_a_plain_exception_naming_the_checkpoint(gcs):
    ckpt = GCSCheckpointer("sync", root="gs://no-such-bucket/run", endpoint=gcs.endpoint)
    with pytest.raises(CheckpointSaveError) as info:
        ckpt.save(_state(1), step=1)
    assert "save of gs://no-such-bucket/run/step-1 failed on rank(s) 0" in str(info.value)
    assert isinstance(info.value, Exception) and info.value.__cause__ is not None
    ckpt.close()


def test_local_tier_is_used_when_newest_and_whole(gcs, tmp_path):
    root = f"gs://{BUCKET}/local"
    ckpt = GCSCheckpointer("thread", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.save(_state(2), step=2)
    ckpt.close()
    copies = sorted(p.name for p in (tmp_path / BUCKET / "local" / "rank-0-of-1").iterdir())
    assert copies == ["step-2"]  # only the newest is kept
    ckpt = GCSCheckpointer("sync", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    state = _blank()
    assert ckpt.load(state) == 2 and ckpt.last_load["source"] == "local"
    assert torch.equal(state["w"], _state(2)["w"]) and torch.equal(state["b"], _state(2)["b"])
    ckpt.close()


def test_local_tier_older_than_gcs_newest_step_is_not_used(gcs, tmp_path):
    root = f"gs://{BUCKET}/stale"
    ckpt = GCSCheckpointer("sync", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.close()
    elsewhere = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)  # another node
    elsewhere.save(_state(2), step=2)
    elsewhere.close()
    ckpt = GCSCheckpointer("sync", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    state = _blank()
    assert ckpt.load(state) == 2 and ckpt.last_load["source"] == "gcs"
    assert "local copy is step-1, loading step-2" in ckpt.last_load["local_problem"]
    assert torch.equal(state["w"], _state(2)["w"])
    ckpt.close()


def test_corrupted_local_copy_is_caught_and_gcs_used(gcs, tmp_path):
    root = f"gs://{BUCKET}/corrupt"
    ckpt = GCSCheckpointer("sync", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    ckpt.save(_state(3), step=3)
    ckpt.close()
    folder = tmp_path / BUCKET / "corrupt" / "rank-0-of-1" / "step-3"
    victim = next(p for p in folder.iterdir() if p.suffix == ".distcp")
    body = bytearray(victim.read_bytes())
    body[len(body) // 2] ^= 0x01  # same size: only the CRC-32C tells
    victim.write_bytes(bytes(body))
    state = _blank()
    assert ckpt.load(state) == 3 and ckpt.last_load["source"] == "gcs"
    assert f"{victim}: CRC-32C" in ckpt.last_load["local_problem"]
    assert torch.equal(state["w"], _state(3)["w"])


@pytest.mark.parametrize("mode", ["sync", "thread"])
def test_stock_torch_loads_a_step_the_manager_wrote(gcs, tmp_path, mode):
    # Step 6 is written from the plans and Metadata cached by step 5's save (GCSSavePlanner),
    # with block checksums in `.metadata`, and step 5 is then deleted by retention.
    root = f"gs://{BUCKET}/stock-{mode}"
    ckpt = GCSCheckpointer(mode, root=root, keep_latest=1, endpoint=gcs.endpoint)
    ckpt.save(_state(5), step=5)
    ckpt.save(_state(6), step=6)
    ckpt.close()
    assert ckpt.steps() == [6]
    store = ObjectStore(gcs.endpoint)
    for name in _names(gcs, f"stock-{mode}/step-6/"):
        (tmp_path / name.rsplit("/", 1)[1]).write_bytes(store.download(BUCKET, name))
    state = _blank()
    dcp.load(state, storage_reader=FileSystemReader(str(tmp_path)), no_dist=True)
    assert torch.equal(state["w"], _state(6)["w"]) and torch.equal(state["b"], _state(6)["b"])


def test_a_byte_changed_under_the_same_generation_makes_load_fall_back(gcs):
    # Size, generation and commit order all look right: only the block checksums tell.
    root = f"gs://{BUCKET}/flipped"
    ckpt = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.save(_state(2), step=2)
    data = [n for n in _names(gcs, "flipped/step-2/") if n.endswith(".distcp")][0]
    before = _listing(gcs, "flipped/")
    flip_on_disk(gcs, BUCKET, data, ObjectStore(gcs.endpoint).size(BUCKET, data) - 1)
    assert _listing(gcs, "flipped/") == before and ckpt.steps() == [2, 1]
    state = _blank()
    assert ckpt.load(state) == 1 and torch.equal(state["w"], _state(1)["w"])
    [(skipped, why)] = ckpt.last_load["skipped"]
    assert skipped == 2 and f"gs://{BUCKET}/{data} bytes=" in why and "CRC-32C mismatch" in why
    ckpt.close()


# The killed steps, each in a process of its own that dies by SIGKILL. One child interpreter
# (one torch import) forks a fresh process per step and prints each one's exit code; its own
# threads are torch's import-time ones only, so the forks are as clean as a new interpreter.
_KILLS = """
    import json, os, signal, sys, textwrap, traceback, torch
    from gcsckpt.dcp import GCSCheckpointer
    endpoint = sys.argv[1]
    def state(v):
        return {"w": torch.full((64,), float(v)), "b": torch.arange(8) + int(v)}
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    codes = {}
    for name, (root, code) in json.loads(sys.argv[2]).items():
        pid = os.fork()
        if pid == 0:
            try:
                exec(textwrap.dedent(code), dict(globals(), root=root))
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(3)  # it was not killed
        codes[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps(codes))
"""

_KILL_SAVE = """
    from gcsckpt.dcp import checkpointer
    ckpt = GCSCheckpointer("sync", root=root, endpoint=endpoint)
    ckpt.save(state(1), step=1)
    class Dying(checkpointer.GCSStorageWriter):
        finish = die  # every data object uploaded, killed before .metadata
    checkpointer.GCSStorageWriter = Dying
    ckpt.save(state(2), step=2)
"""

_KILL_RETENTION = """
    from gcsckpt.io.objects import ObjectStore
    ckpt = GCSCheckpointer("sync", root=root, endpoint=endpoint)
    for step in (1, 2):
        ckpt.save(state(step), step=step)
    delete = ObjectStore.delete
    def delete_then_die(self, bucket, name, **kwargs):
        delete(self, bucket, name, **kwargs)
        if name.endswith("/.metadata"):
            die()
    ObjectStore.delete = delete_then_die
    ckpt.keep_latest = 1
    ckpt.apply_retention()
"""

_KILL_LOAD = """
    from gcsckpt.dcp import checkpointer_load
    class Dying(checkpointer_load.GCSStorageReader):
        read_data = die
    checkpointer_load.GCSStorageReader = Dying
    GCSCheckpointer("sync", root=root, keep_latest=1, endpoint=endpoint).load(state(0))
"""


@pytest.fixture(scope="module")
def killed(gcs):
    """Runs the three killed steps (a save, a retention pass, a load) in one child interpreter;
    returns ({step: exit code}, the child's stderr, the load root's listing before its kill,
    the checkpointer that saved that root's step 1)."""
    root = f"gs://{BUCKET}/killload"
    ckpt = GCSCheckpointer("sync", root=root, keep_latest=1, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    before = _listing(gcs, "killload/")
    steps = {
        "save": (f"gs://{BUCKET}/killsave", _KILL_SAVE),
        "retention": (f"gs://{BUCKET}/killretain", _KILL_RETENTION),
        "load": (root, _KILL_LOAD),
    }
    child = _child(_KILLS, gcs.endpoint, json.dumps(steps))
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout), child.stderr, before, ckpt


def test_kill_during_a_save_leaves_the_previous_step_loadable(gcs, killed):
    root = f"gs://{BUCKET}/killsave"
    codes, stderr, _, _ = killed
    assert codes["save"] == -signal.SIGKILL, stderr
    assert any(n.endswith(".distcp") for n in _names(gcs, "killsave/step-2/"))
    ckpt = GCSCheckpointer("sync", root=root, keep_latest=1, endpoint=gcs.endpoint)
    assert ckpt.steps() == [1]
    state = _blank()
    assert ckpt.load(state) == 1 and torch.equal(state["w"], _state(1)["w"])
    ckpt.save(_state(2), step=2)  # the same step again: the cut save left no .metadata
    ckpt.close()
    assert ckpt.steps() == [2] and _names(gcs, "killsave/step-1/") == []


def test_kill_during_retention_never_leaves_a_half_deleted_step_listed(gcs, killed):
    root = f"gs://{BUCKET}/killretain"
    codes, stderr, _, _ = killed
    assert codes["retention"] == -signal.SIGKILL, stderr
    left = _names(gcs, "killretain/step-1/")
    assert left and not any(n.endswith("/.metadata") for n in left)  # cut between the deletes
    ckpt = GCSCheckpointer("sync", root=root, keep_latest=1, endpoint=gcs.endpoint)
    assert ckpt.steps() == [2]
    state = _blank()
    assert ckpt.load(state) == 2 and torch.equal(state["w"], _state(2)["w"])
    ckpt.save(_state(3), step=3)  # the next committed save finishes the deletion
    ckpt.close()
    assert _names(gcs, "killretain/step-1/") == [] and ckpt.steps() == [3]


def test_kill_during_a_load_changes_nothing(gcs, killed):
    codes, stderr, before, ckpt = killed
    assert codes["load"] == -signal.SIGKILL, stderr
    assert _listing(gcs, "killload/") == before
    state = _blank()
    assert ckpt.load(state) == 1 and torch.equal(state["w"], _state(1)["w"])
    ckpt.close()


def test_process_mode_without_main_guard_says_what_to_add(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("from gcsckpt.dcp import GCSCheckpointer\nGCSCheckpointer('process')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1
    assert f"{script} (line 2)" in run.stderr
    assert 'if __name__ == "__main__":' in run.stderr
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "from gcsckpt.dcp import GCSCheckpointer\n"
        "def main():\n    GCSCheckpointer('process').close()\n    print('made')\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    run = subprocess.run(
        [sys.executable, str(guarded)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout == "made\n", run.stderr


def test_local_gcs_leaves_no_temp_dir_after_sigterm(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom gcsckpt.testing import LocalGCS\n"
            "gcs = LocalGCS().start()\nprint(gcs.data_dir, *gcs.process_ids, flush=True)\n"
            "time.sleep(120)\n",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    data_dir, *pids = child.stdout.readline().split()
    run_dir = os.path.dirname(data_dir)
    assert os.path.isdir(run_dir)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
    assert not os.path.exists(run_dir)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)


def test_step_listing_names_objects_of_uncommitted_steps(gcs):
    root = f"gs://{BUCKET}/listing"
    ckpt = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.close()
    ObjectStore(gcs.endpoint).upload(BUCKET, "listing/step-3/__0_0_0.distcp", b"x" * 10)
    infos = list_steps(ObjectStore(gcs.endpoint), root)
    assert [(i.step, i.committed, i.complete, i.problem) for i in infos] == [
        (3, False, False, "no .metadata"),
        (1, True, True, ""),
    ]
    assert infos[0].bytes == 10 and infos[0].updated is not None


def test_local_copy_of_another_save_of_the_same_step_is_not_used(gcs, tmp_path):
    root = f"gs://{BUCKET}/resaved"
    ckpt = GCSCheckpointer("sync", root=root, local_dir=tmp_path, endpoint=gcs.endpoint)
    ckpt.save(_state(1), step=1)
    ckpt.close()
    store = ObjectStore(gcs.endpoint)
    for name in _names(gcs, "resaved/"):  # the run is restarted from scratch elsewhere
        store.delete(BUCKET, name)
    elsewhere = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    elsewhere.save(_state(11), step=1)
    elsewhere.close()
    state = _blank()
    assert ckpt.load(state) == 1 and ckpt.last_load["source"] == "gcs"
    assert "another save of step-1" in ckpt.last_load["local_problem"]
    assert torch.equal(state["w"], _state(11)["w"])
