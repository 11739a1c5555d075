"""The command line (`python -m gcsckpt`: ls, rm, gc, verify) on a local endpoint: tables and
JSON, dry runs by default, deletions with --yes; verify's byte counts, a byte flipped on disk
(exit 1 naming object and byte range), stock checkpoints reported unverified. Commands run
`gcsckpt.cli.main` in this process (stdout, stderr and exit status as a program's: `__main__`
is `sys.exit(main())`); one test runs `python -m gcsckpt` as a child process, as a user does,
which spares the other runs a Python + torch start each."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from disk_faults import flip_on_disk
from torch.distributed.checkpoint import FileSystemWriter

from gcsckpt.cli import main
from gcsckpt.dcp import GCSCheckpointer
from gcsckpt.dcp.checksums import records_of
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

BUCKET = "cli-runs"
ROOT = f"gs://{BUCKET}/run"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        ckpt = GCSCheckpointer("sync", root=ROOT, endpoint=endpoint.endpoint)
        for step in (1, 2, 3):
            ckpt.save({"w": torch.full((1000,), float(step))}, step=step)
        ckpt.close()
        store = ObjectStore(endpoint.endpoint)
        # a failed save's leftovers: a step without .metadata, and an unnamed object in step-2
        store.upload(BUCKET, "run/step-0/__0_00000000000000aa_0.distcp", b"x" * 100)
        store.upload(BUCKET, "run/step-2/__0_00000000000000bb_0.distcp", b"y" * 50)
        yield endpoint


def _cli(gcs, *args: str) -> subprocess.CompletedProcess:
    """`gcsckpt *args --endpoint ...` in this process: exit status, stdout, stderr."""
    argv = [*args, "--endpoint", gcs.endpoint]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _program(gcs, *args: str) -> subprocess.CompletedProcess:
    """`python -m gcsckpt *args --endpoint ...` as a child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run(
        [sys.executable, "-m", "gcsckpt", *args, "--endpoint", gcs.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _names(gcs) -> list[str]:
    return sorted(ObjectStore(gcs.endpoint).list(BUCKET, "run/"))


def test_ls_table_and_json(gcs):
    table = _cli(gcs, "ls", ROOT)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["step", "bytes", "objects", "complete", "age", "problem"]
    assert [line.split()[0] for line in lines[1:]] == ["step-3", "step-2", "step-1", "step-0"]
    assert lines[-1].split()[1:4] == ["100", "1", "no"] and "no .metadata" in lines[-1]
    listed = json.loads(_cli(gcs, "ls", ROOT, "--json").stdout)
    steps = {row["step"]: row for row in listed["steps"]}
    assert [row["step"] for row in listed["steps"]] == [3, 2, 1, 0]
    assert steps[2]["objects"] == 3 and steps[2]["complete"] is True
    assert steps[0]["complete"] is False and steps[0]["bytes"] == 100


def test_gc_dry_run_then_yes(gcs):
    dry = json.loads(_cli(gcs, "gc", ROOT, "--min-age-s", "0", "--json").stdout)
    urls = sorted(row["url"] for row in dry["objects"])
    assert dry["dry_run"] is True and urls == [
        f"gs://{BUCKET}/run/step-0/__0_00000000000000aa_0.distcp",
        f"gs://{BUCKET}/run/step-2/__0_00000000000000bb_0.distcp",
    ]
    assert len(_names(gcs)) == 8  # nothing deleted
    young = _cli(gcs, "gc", ROOT)  # default --min-age-s 3600: a save may be in flight
    assert young.stdout.startswith("would delete (dry run; --yes deletes): 0 data object(s)")
    done = _cli(gcs, "gc", ROOT, "--min-age-s", "0", "--yes")
    assert done.returncode == 0 and done.stdout.startswith("deleted: 2 data object(s), 150 bytes")
    # (exact names: a saved object's random id may itself end in "aa" or "bb")
    assert not {
        "run/step-0/__0_00000000000000aa_0.distcp",
        "run/step-2/__0_00000000000000bb_0.distcp",
    } & set(_names(gcs))


def test_rm_keep_latest_dry_run_then_yes(gcs):
    dry = _cli(gcs, "rm", ROOT, "--keep-latest", "1")
    assert dry.stdout.splitlines()[0] == (
        f"would delete (dry run; --yes deletes): 2 step(s) under {ROOT}"
    )
    assert any(n.startswith("run/step-1/") for n in _names(gcs))
    done = _cli(gcs, "rm", ROOT, "--keep-latest", "1", "--yes")
    assert done.returncode == 0, done.stderr
    assert {n.split("/")[1] for n in _names(gcs)} == {"step-3"}


def test_errors_name_the_bucket_and_exit_1(gcs):
    missing = _program(gcs, "ls", "gs://no-such-bucket-here/run")
    assert missing.returncode == 1 and "gs://no-such-bucket-here/run/step-" in missing.stderr
    bad = _cli(gcs, "ls", "s3://x/y")
    assert bad.returncode == 1 and "'s3://x/y'" in bad.stderr


def _save_step(gcs, root: str, step: int) -> dict[str, int]:
    """Saves a 2.4 MB step with GCSCheckpointer; returns {data object name: size}."""
    ckpt = GCSCheckpointer("sync", root=root, endpoint=gcs.endpoint)
    ckpt.save({"w": torch.arange(600_000, dtype=torch.float32), "b": torch.ones(10)}, step=step)
    ckpt.close()
    prefix = f"{root.split('/', 3)[3]}/step-{step}/"
    infos = ObjectStore(gcs.endpoint).list_objects(BUCKET, prefix)
    return {i.name: i.size for i in infos if i.name.endswith(".distcp")}


def test_verify_a_good_step_table_and_json(gcs):
    data = _save_step(gcs, f"gs://{BUCKET}/verify-good", 7)
    url = f"gs://{BUCKET}/verify-good/step-7"
    table = _cli(gcs, "verify", url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["object", "generation", "bytes", "verified", "mismatches", "status"]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert {f"verify-good/step-7/{p}": int(r[2]) for p, r in rows.items()} == data
    assert all(r[3] == r[2] and r[4:] == ["0", "ok"] for r in rows.values())
    total = sum(data.values())
    assert lines[-1] == (
        f"{url}: {len(data)} object(s), {total} bytes verified, 0 bytes unverified (0 object(s)"
        " saved without checksums), 0 mismatch(es): OK"
    )
    found = json.loads(_cli(gcs, "verify", url, "--json").stdout)
    assert found["ok"] is True and found["url"] == url
    assert found["bytes_verified"] == total and found["bytes_unverified"] == 0
    assert {o["path"]: (o["status"], o["bytes_verified"]) for o in found["objects"]} == {
        name.rsplit("/", 1)[1]: ("ok", size) for name, size in data.items()
    }


def test_verify_a_flipped_byte_exits_1_naming_object_and_range(gcs):
    data = _save_step(gcs, f"gs://{BUCKET}/verify-bad", 8)
    name = max(data, key=data.get)
    metadata = load_metadata(gcs.get(BUCKET, "verify-bad/step-8/.metadata"), source="t")
    size, starts, _ = records_of(metadata)[name.rsplit("/", 1)[1]]
    starts = np.frombuffer(starts, dtype="<u8").astype(int).tolist()
    first, end = starts[-1], size  # the object's last block
    flip_on_disk(gcs, BUCKET, name, end - 1)
    url = f"gs://{BUCKET}/verify-bad/step-8"
    done = _cli(gcs, "verify", url)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].endswith("1 mismatch(es): FAILED")
    assert f"gs://{BUCKET}/{name} bytes={first}-{end - 1} (generation " in done.stderr
    assert "CRC-32C mismatch, expected 0x" in done.stderr
    found = json.loads(_cli(gcs, "verify", url, "--json").stdout)
    (bad,) = [o for o in found["objects"] if o["status"] != "ok"]
    assert found["ok"] is False and bad["status"] == "mismatch"
    (mismatch,) = bad["mismatches"]
    assert mismatch["url"] == f"gs://{BUCKET}/{name}"
    assert (mismatch["offset"], mismatch["length"]) == (first, end - first)
    assert mismatch["generation"] == bad["generation"] is not None
    assert bad["bytes_verified"] == size - (end - first)


def test_verify_a_stock_checkpoint_reports_it_unverified(gcs, tmp_path):
    dcp.save({"w": torch.ones(1000)}, storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    total = 0
    for path in tmp_path.iterdir():
        gcs.put(BUCKET, f"stock/step-1/{path.name}", path.read_bytes())
        total += path.stat().st_size if path.name.endswith(".distcp") else 0
    done = _cli(gcs, "verify", f"gs://{BUCKET}/stock/step-1", "--json")
    found = json.loads(done.stdout)
    assert done.returncode == 0 and found["ok"] is True
    assert found["bytes_verified"] == 0 and found["bytes_unverified"] == total > 0
    assert {o["status"] for o in found["objects"]} == {"unverified"}


def test_verify_a_missing_step_exits_1_naming_it(gcs):
    done = _cli(gcs, "verify", f"gs://{BUCKET}/run/step-99")
    assert done.returncode == 1
    assert f"gs://{BUCKET}/run/step-99/.metadata does not exist" in done.stderr
