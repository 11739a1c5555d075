"""Each arm's settings and construction (worker.arms): the MSC profile, recorded settings, the
localfs reference's folder."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from ckptbench import roles
from ckptbench.worker import arms
from ckptbench.worker.arms import (
    MSC_UPLOAD_OPTIONS,
    MSCProfile,
    local_save_root,
    make_writer,
    reader_settings,
    writer_settings,
)
from ckptbench.worker.case_jobs import SaveJob


def test_msc_profile_configures_the_endpoint_with_the_documented_upload_settings(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("MSC_CONFIG", raising=False)
    profile = MSCProfile(str(tmp_path / "r1"), "bench-r1", "bkt", "http://127.0.0.1:9", True)
    config = json.loads((tmp_path / "r1" / "msc_config.json").read_text())
    assert os.environ["MSC_CONFIG"] == profile.config_path
    assert config["profiles"]["bench-r1"] == {
        "storage_provider": {
            "type": "gcs",
            "options": {
                "base_path": "bkt",
                "multipart_threshold": 64 << 20,
                "multipart_chunksize": 32 << 20,
                "max_concurrency": 8,
                "endpoint_url": "http://127.0.0.1:9",
                "skip_signature": True,
            },
        },
        "caching_enabled": True,
    }
    assert config["cache"]["location"] == str(tmp_path / "r1" / "cache")
    assert profile.url("run/ckpt") == "msc://bench-r1/run/ckpt"
    profile.close()
    assert not (tmp_path / "r1").exists()
    real = MSCProfile(str(tmp_path / "r2"), "bench-r2", "bkt", None, False)
    config = json.loads(open(real.config_path).read())
    assert config == {
        "profiles": {
            "bench-r2": {
                "storage_provider": {
                    "type": "gcs",
                    "options": {"base_path": "bkt", **MSC_UPLOAD_OPTIONS},
                }
            }
        }
    }  # real GCS: Application Default Credentials, the same upload settings


def test_arm_settings_name_the_class_and_tuning():
    assert reader_settings("msc", emulator=False)["thread_count"] == 8
    for emulator in (True, False):  # the same upload settings against any endpoint
        msc = writer_settings("msc", emulator=emulator)
        assert msc["multipart_threshold_bytes"] == 64 << 20
        assert (msc["multipart_chunksize_bytes"], msc["max_concurrency"]) == (32 << 20, 8)
    assert writer_settings("fsspec", emulator=True)["class"].endswith("FsspecWriter")
    dataflux = writer_settings("dataflux", emulator=True)
    assert dataflux["class"].endswith("GCSDistributedWriter") and dataflux["thread_count"] == 1
    assert (dataflux["part_bytes"], dataflux["part_workers"]) == (32 << 20, 8)
    assert reader_settings("dataflux", emulator=False)["anonymous_credentials"] is False
    with pytest.raises(ValueError, match="writer 'lightning' is unknown"):
        writer_settings("lightning", emulator=True)
    with pytest.raises(ValueError, match="writer 'x' is unknown"):
        SaveJob(None, None, "x", 1)


def test_local_save_root_is_tmpfs_only_with_room(tmp_path, monkeypatch):
    monkeypatch.setattr(arms, "LOCAL_TMPFS", str(tmp_path))
    size = 10 << 20

    def room(free: int, available: int) -> None:
        usage = SimpleNamespace(free=free, total=free, used=0)
        monkeypatch.setattr(arms.shutil, "disk_usage", lambda path: usage)
        monkeypatch.setattr("psutil.virtual_memory", lambda: SimpleNamespace(available=available))

    room(2 * size, 3 * size)
    assert local_save_root(size) == str(tmp_path)
    room(2 * size - 1, 3 * size)
    assert local_save_root(size) is None
    room(2 * size, 3 * size - 1)
    assert local_save_root(size) is None
    assert local_save_root(None) is None  # unknown size: the scratch dir
    monkeypatch.setattr(arms, "LOCAL_TMPFS", str(tmp_path / "absent"))
    room(2 * size, 3 * size)
    assert local_save_root(size) is None


def test_localfs_settings_say_where_it_saved_and_that_it_is_a_reference(tmp_path):
    tmpfs = writer_settings("localfs", emulator=True, local_root="/dev/shm")
    assert tmpfs["class"] == "torch.distributed.checkpoint.FileSystemWriter"
    assert tmpfs["folder"] == "/dev/shm (tmpfs)"
    assert tmpfs["role"].startswith("reference") and "not a peer" in tmpfs["role"]
    assert (tmpfs["single_file_per_rank"], tmpfs["sync_files"], tmpfs["thread_count"]) == (
        True,
        True,
        1,
    )
    scratch = writer_settings("localfs", emulator=False)
    assert scratch["folder"].startswith("job scratch dir below ")
    assert "localfs" in roles.WRITERS and "localfs" not in roles.READERS
    assert "localfs" in roles.REFERENCES and "localfs" not in roles.PEERS
    with pytest.raises(ValueError, match="needs its round's local folder"):
        make_writer("localfs", "bkt", "p", None)
    writer = make_writer("localfs", "bkt", "p", None, folder=str(tmp_path))
    assert type(writer).__name__ == "FileSystemWriter"


def test_read_once_arm_is_a_gcsckpt_reader_with_read_once_and_never_a_writer():
    assert reader_settings(roles.READ_ONCE, emulator=True)["options"] == {"read_once": True}
    reader = arms.make_reader(roles.READ_ONCE, "bkt", "ckpt", "http://127.0.0.1:1")
    assert (reader.read_once, reader.verify) == (True, True)
    candidate = arms.make_reader(roles.CANDIDATE, "bkt", "ckpt", "http://127.0.0.1:1")
    assert (candidate.read_once, candidate.verify) == (False, True)
    unverified = arms.make_reader(roles.UNVERIFIED, "bkt", "ckpt", "http://127.0.0.1:1")
    assert (unverified.read_once, unverified.verify) == (False, False)
    assert roles.READ_ONCE in roles.REFERENCES and roles.READ_ONCE not in roles.PEERS
    assert roles.READ_ONCE not in roles.WRITERS
    with pytest.raises(ValueError, match="writer 'gcsckpt-read-once' is unknown"):
        writer_settings(roles.READ_ONCE, emulator=True)
