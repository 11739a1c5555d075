"""The tiny benchmark run the runner end-to-end tests start from: tiny OLMoE fsdp + ep pair at
world size 2 against a local endpoint; saving its checkpoints without timed rounds."""

from __future__ import annotations

import contextlib
import io
from typing import TYPE_CHECKING

from ckptbench.runner.config import RunConfig
from gcsckpt.dcp.metadata_index import FOOTER, parse_footer

if TYPE_CHECKING:
    from ckptbench.runner.manifest import SetupManifest
    from gcsckpt.testing import LocalGCS

# Names without the bucket type: the cases' object prefixes.
FSDP_BASE = "load-olmoe_1b_7b_0924-fsdp-ws2"
EP_BASE = "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2"
# Case names on the emulator's bucket (regional metadata: "-reg").
FSDP = f"{FSDP_BASE}-reg"
EP = f"{EP_BASE}-reg"


def tiny_run_config(endpoint: str, bucket_url: str, output_dir, **changes) -> RunConfig:
    """RunConfig for the tiny pair under `bucket_url` (gs://...); `changes` override fields."""
    fields = dict(
        cases=("load-olmoe_1b_7b_0924-*",),
        sweep_axes=("model", "strategy"),
        bucket=bucket_url,
        endpoint=endpoint,
        world_size_override=2,
        model_scale="tiny",
        output_dir=str(output_dir),
        job_timeout_s=300.0,
        # No download ceiling unless a test asks (test_runner_reshard checks it): its 3 default
        # rounds each read a 256 MiB object from the endpoint, and no other test reads it.
        download_ceiling_rounds=0,
    )
    fields.update(changes)
    return RunConfig(**fields)


class NoDisplay:
    """A progress display that shows nothing (the runner's ``ProgressDisplay`` interface)."""

    def phase(self, name, total=None):
        return contextlib.nullcontext()

    def drain(self, queue):
        return 0


def save_checkpoints(config: RunConfig) -> dict[str, SetupManifest]:
    """Saves (or reuses) the checkpoint of every case ``config`` selects through the runner's own
    setup step, with no timed round; case name -> its setup manifest.

    Raises:
      SetupError: a rank failed to save, or a save left no ``.metadata``.
    """
    # Imported here: ranks on the dataflux arm's venv import this module for interpreter_facts,
    # and that venv has no matplotlib (the runner's publishers import it).
    from ckptbench.harness.launch import SpawnLauncher
    from ckptbench.runner.case_run import CaseRun
    from ckptbench.runner.storage import BenchStorage

    with BenchStorage(config.bucket, config.endpoint) as storage:
        launcher = SpawnLauncher(timeout_s=config.job_timeout_s)
        run = CaseRun(config, storage, launcher, NoDisplay(), io.StringIO())
        return {
            case.name: run.ensure_checkpoint(case, storage.for_case(case.base_name))
            for case in config.selected_cases()
        }


def interpreter_facts(rank: int) -> tuple[int, str, str, str]:
    """Rank-side: (rank, interpreter, google-cloud-storage version, _gcsio's module file), for
    the test that the dataflux arm's ranks run on its own venv with the repository's tree."""
    import sys

    from google.cloud import storage

    from gcsckpt.io.extension import _gcsio

    return rank, sys.executable, storage.__version__, _gcsio.__file__


def index_bytes(gcs: LocalGCS, bucket: str, prefix: str) -> int:
    """Bytes of the index section and footer that gcsckpt's writer appends to `.metadata`
    (other writers do not), in the one gcsckpt-written checkpoint under `prefix`.

    Raises:
        AssertionError: no such checkpoint, or several of different index sizes.
    """
    found = set()
    for blob in gcs.storage_client().list_blobs(bucket, prefix=prefix):
        if blob.name.endswith("/.metadata"):
            tail = blob.download_as_bytes(start=blob.size - FOOTER.size)
            footer = parse_footer(tail, source=blob.name)
            if footer is not None:
                found.add(footer.section_length + FOOTER.size)
    assert len(found) == 1, found
    return found.pop()
