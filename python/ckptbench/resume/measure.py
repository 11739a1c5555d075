"""Cold-restart rounds: arms interleaved per round, each restart on freshly spawned rank
processes, one row per arm and round; and the table of them.

The clock starts in this process right before the ranks are spawned and every phase ends at a
barrier (``rank.restart_rank``); a row's phase seconds are rank 0's stamps minus the previous
one. ``prepare_checkpoint`` leaves a checkpoint a restart can find (and, optionally, a newer
interrupted save beside it that it must skip, and each rank's copy in a node-local tier for the
``gcsckpt-local`` arm).
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from ckptbench.harness.job import RankFailure
from ckptbench.harness.launch import JobError, SpawnLauncher
from ckptbench.harness.rounds import interleave
from ckptbench.publish.markdown import markdown_table
from ckptbench.resume import rank
from ckptbench.resume.listing import split_url
from ckptbench.resume.restart_jobs import RestartJob, SaveStateJob

# gcsckpt from GCS, gcsckpt's manager from the node-local tier, the stock FsspecReader over gcsfs
READERS = ("gcsckpt", rank.LOCAL_ARM, "fsspec")
PHASES = ("start_s", "build_s", "find_s", "load_s", "first_step_s")


@dataclasses.dataclass(frozen=True)
class RestartSpec:
    """What is restarted: ``model`` (a model spec, e.g. ``olmoe_1b_7b_0924:scaled``) under FSDP2
    (``fully_shard`` per decoder layer, dp_shard over every rank) on ``world_size`` gloo CPU
    ranks; ``timeout_s`` bounds each job and its collectives, seconds."""

    model: str = "olmoe_1b_7b_0924:scaled"
    world_size: int = 2
    timeout_s: float = 1800.0


def _run(spec: RestartSpec, job: SaveStateJob | RestartJob) -> list[Any]:
    """Every rank's result of ``job`` on fresh ranks started with "spawn" (every rank a new
    interpreter, as after a job's restart: no forkserver preload).

    Raises:
      JobError: a rank raised (the message names it and the error) or the job timed out.
    """
    gathered = SpawnLauncher(timeout_s=spec.timeout_s, start_method="spawn").run(job)
    failed = [g.message for g in gathered if isinstance(g, RankFailure)]
    if failed:
        raise JobError(f"{job.label}: {'; '.join(failed)}")
    return gathered


def prepare_checkpoint(
    spec: RestartSpec,
    endpoint: str | None,
    base_url: str,
    step: int,
    interrupted: int | None,
    local_dir: str | None = None,
) -> str:
    """Saves the state of `spec` (seeded, GCSStorageWriter) as ``<base_url>/step-<step>`` and,
    when `interrupted` is given, plants ``step-<interrupted>`` as a save killed mid-upload (one
    data object, no ``.metadata``). With `local_dir` the save goes through
    ``GCSCheckpointer(local_dir=local_dir)`` (``rank.save_rank``): the same objects, and each
    rank's copy in the node-local tier, as the training job would have left them.

    Returns:
      The first step on the saved state, one ``rank.FirstStep`` per rank: what every restart
      must give (``expected`` of measure_cold_restart).

    Raises:
      JobError: a rank failed (the message names it and the error).
      ValueError: `interrupted` is not newer than `step`.
    """
    if interrupted is not None and interrupted <= step:
        raise ValueError(f"interrupted step {interrupted} must be newer than step {step}")
    url = f"{base_url}/step-{step}"
    firsts = _run(spec, SaveStateJob(spec.model, spec.world_size, url, endpoint, local_dir))
    if interrupted is not None:
        from gcsckpt.io import ObjectStore

        bucket, prefix = split_url(base_url)
        with ObjectStore(endpoint) as store:
            name = f"{prefix}/step-{interrupted}/__0_0_0.distcp".lstrip("/")
            store.upload(bucket, name, b"a data object whose save never committed")
    return firsts


def _digest(firsts: list[rank.FirstStep]) -> str:
    """One sha256 hex over every rank's state digest, in rank order."""
    return hashlib.sha256(" ".join(f.digest for f in firsts).encode()).hexdigest()


def _row(reader: str, index: int, spec: RestartSpec, base_url: str, began: float, ranks) -> dict:
    lead = ranks[0]
    stamps = [began, lead.entered, lead.built, lead.found, lead.loaded, lead.stepped]
    row: dict[str, Any] = {"reader": reader, "round": index + 1, "model": spec.model}
    row.update(strategy="fsdp", world_size=spec.world_size, base_url=base_url, step=lead.step)
    row.update({phase: stamps[i + 1] - stamps[i] for i, phase in enumerate(PHASES)})
    row["total_s"] = lead.stepped - began
    row["loss_hex"] = lead.first.loss_hex
    row["state_digest"] = _digest([r.first for r in ranks])
    row["tensor_bytes"] = sum(r.expected_bytes for r in ranks)
    # The local-tier arm's loader takes no planner (committed_bytes None): its state digest
    # after the first step checks every tensor, and every rank must have read the node's copy.
    row["all_tensors_loaded"] = all(
        r.committed_bytes is None or r.committed_bytes == r.expected_bytes for r in ranks
    )
    sources = sorted({r.source for r in ranks})
    row["source"] = "/".join(sources)
    row["from_expected_source"] = sources == (["local"] if reader == rank.LOCAL_ARM else ["gcs"])
    return row


def measure_cold_restart(
    endpoint: str | None,
    base_url: str,
    spec: RestartSpec = RestartSpec(),
    *,
    rounds: int = 1,
    readers: tuple[str, ...] | None = None,
    expected: list[rank.FirstStep] | None = None,
    local_dir: str | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Cold restarts from the newest complete ``step-N`` under `base_url`, arms interleaved
    (round 1 of every arm, then round 2, ...), each on fresh spawned rank processes.

    Args:
      endpoint: emulator URL (``http://127.0.0.1:PORT``), or None for real GCS.
      base_url: ``gs://bucket/prefix`` holding ``step-N`` checkpoints of `spec`'s state.
      spec: model and ranks (the checkpoint's layout: see RestartSpec).
      rounds: restarts per arm (>= 1).
      readers: arms, of READERS; None: every arm (without ``gcsckpt-local`` when `local_dir`
        is None).
      expected: the first step the restarts must give, per rank (``prepare_checkpoint``'s
        answer); None: they must agree with each other.
      on_row: called with each row as its restart ends (progress), before ``verified`` is set.
      local_dir: the node-local tier the ``gcsckpt-local`` arm restarts from (filled by
        ``prepare_checkpoint(local_dir=)``).

    Returns:
      One dict per restart: reader, round, model, strategy, world_size, base_url, step (loaded;
      None when none was complete), start_s (spawn until every rank runs, group joined),
      build_s, find_s (listing), load_s (``dcp.load`` + ``set_state_dict``), first_step_s,
      total_s (their sum: spawn to first step done), seconds; loss_hex (the first step's);
      state_digest (every rank's state after it); tensor_bytes (all ranks); all_tensors_loaded;
      source ("gcs", or "local" where the local-tier arm read the node's copy);
      from_expected_source; verified (loss and state as expected, every tensor loaded, from
      the arm's own source).

    Raises:
      ValueError: rounds < 1, an unknown reader, or gcsckpt-local without local_dir.
      JobError: a rank failed (the message names it and the error).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if readers is None:
        readers = tuple(r for r in READERS if local_dir is not None or r != rank.LOCAL_ARM)
    unknown = [r for r in readers if r not in READERS]
    if unknown:
        raise ValueError(f"readers {unknown} are unknown; known: {', '.join(READERS)}")
    if rank.LOCAL_ARM in readers and local_dir is None:
        raise ValueError(f"the {rank.LOCAL_ARM} arm needs local_dir")
    rows = []

    def restart(reader: str, index: int) -> bool:
        job = RestartJob(reader, spec.model, spec.world_size, base_url, endpoint, local_dir)
        began = time.time()
        rows.append(_row(reader, index, spec, base_url, began, _run(spec, job)))
        if on_row is not None:
            on_row(rows[-1])
        return True

    interleave(dict.fromkeys(readers, rounds), restart)
    want = (rows[0]["loss_hex"], rows[0]["state_digest"])
    if expected is not None:
        want = (expected[0].loss_hex, _digest(expected))
    for row in rows:
        same = (row["loss_hex"], row["state_digest"]) == want
        row["verified"] = same and row["all_tensors_loaded"] and row["from_expected_source"]
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table: one line per restart, then per arm the mean of each phase, and
    gcsckpt's speed-up over stock (stock mean / gcsckpt mean) when both ran, and the local
    tier's over both."""
    head = ["reader", "round", *PHASES, "total_s", "step", "source", "verified"]
    body = []
    for row in rows:
        cells = [row["reader"], str(row["round"])]
        cells += [f"{row[k]:.2f}" for k in (*PHASES, "total_s")]
        cells += [str(row["step"]), row.get("source", "gcs"), "yes" if row["verified"] else "NO"]
        body.append(cells)
    means = {}
    for reader in dict.fromkeys(r["reader"] for r in rows):
        mine = [r for r in rows if r["reader"] == reader]
        means[reader] = {k: statistics.fmean(r[k] for r in mine) for k in (*PHASES, "total_s")}
        cells = [f"{reader} mean", str(len(mine))] + [
            f"{means[reader][k]:.2f}" for k in means[reader]
        ]
        body.append(cells + ["", "", ""])
    lines = [markdown_table(head, body)]
    if "gcsckpt" in means and "fsspec" in means:
        ours, stock = means["gcsckpt"], means["fsspec"]
        lines.append(
            f"\nresume to first step: gcsckpt {stock['total_s'] / ours['total_s']:.1f}x faster"
            f" than stock (load phase {stock['load_s'] / ours['load_s']:.1f}x)"
        )
    local = means.get(rank.LOCAL_ARM)
    for other in ("gcsckpt", "fsspec") if local else ():
        if other in means:
            lines.append(
                f"resume to first step from the node-local tier: {rank.LOCAL_ARM}"
                f" {means[other]['total_s'] / local['total_s']:.1f}x faster than {other}"
                f" (load phase, its listing included,"
                f" {means[other]['load_s'] / local['load_s']:.1f}x)"
            )
    return "\n".join(lines)
