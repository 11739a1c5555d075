"""examples/train_fsdp.py as two torchrun nodes on loopback (`--nnodes=2 --rdzv-backend=c10d`,
2 ranks each): one node SIGKILLed while a save's uploads are in flight, both restarted, and the
resumed run prints the losses of an uninterrupted 4-rank run, bit for bit (float.hex).

Both nodes run on this machine against one endpoint the test keeps running (GCS outlives the
job); a FaultProxy holds the answers to step-8's uploads of every rank but rank 0, so the kill
lands while that save is in flight and after rank 0's data objects have landed.
"""

from __future__ import annotations

from train_runs import (
    BUCKET,
    PREFIX,
    RESUME_LINE,
    SAVE_EVERY,
    STEPS,
    WHERE,
    Launch,
    command,
    data_objects,
    losses,
    rank_env,
    run,
    steps,
    wait_until,
)

from gcsckpt.testing import Fault, FaultProxy, LocalGCS
from gcsckpt.testing.ports import free_port

STALLED = 2 * SAVE_EVERY


def _nodes(env: dict[str, str]) -> list[Launch]:
    """Starts the two nodes: the first hosts the rendezvous store, on a fresh port."""
    port = free_port()
    return [Launch(command(WHERE, node=(host, port)), env) for host in (1, 0)]


def _both_lines(nodes: list[Launch]) -> list[str]:
    return [line for node in nodes for line in list(node.lines)]


def test_one_node_killed_mid_save_then_both_restarted_resume_the_same_curve(tmp_path):
    embedded = tmp_path / "embedded"
    reference = losses(run(command([f"--local_dir={embedded}"], ranks=4), rank_env()))
    assert sorted(reference) == list(range(1, STEPS + 1))

    stall = Fault(
        kind="stall",
        stall_s=300.0,
        count=None,
        media_only=False,
        object_glob=f"{PREFIX}/step-{STALLED}/__[123]_*",
    )
    with LocalGCS(data_dir=str(tmp_path / "objects")) as gcs:
        gcs.create_bucket(BUCKET)
        with FaultProxy(gcs.endpoint, [stall]) as proxy:
            nodes = _nodes(rank_env({"STORAGE_EMULATOR_HOST": proxy.endpoint}))
            try:
                wait_until(
                    lambda: (
                        STEPS in losses(_both_lines(nodes))
                        and proxy.injected_per_fault[0] >= 1
                        and bool(data_objects(gcs, STALLED))
                    ),
                    nodes,
                    f"trained to step {STEPS} with step-{STALLED}'s uploads in flight",
                )
                nodes[1].kill()  # the node that does not host the store: the whole tree
                nodes[0].wait(timeout_s=60)  # its ranks lose their peers; else killed below
            finally:
                for node in nodes:
                    node.kill()
        assert losses(_both_lines(nodes)) == reference  # the curve up to the kill
        landed = data_objects(gcs, STALLED)
        assert landed and all(n.split("/")[-1].startswith("__0_") for n in landed), landed
        assert steps(gcs) == ([SAVE_EVERY], [STALLED])  # the save never got its .metadata

        restarted = _nodes(rank_env(gcs.env()))
        statuses = [node.wait(timeout_s=600) for node in restarted]
        lines = _both_lines(restarted)
        for node in restarted:
            node.kill()
        assert statuses == [0, 0], "\n".join(node.output() for node in restarted)
        matches = [m for m in map(RESUME_LINE.match, lines) if m]
        assert len(matches) == 1, lines[:20]
        assert matches[0].groups() == (str(SAVE_EVERY), str(SAVE_EVERY), f"step-{STALLED}")
        after = losses(lines)
        assert sorted(after) == list(range(SAVE_EVERY + 1, STEPS + 1))
        assert after == {s: reference[s] for s in after}  # bitwise: float.hex of every loss
        assert steps(gcs) == ([SAVE_EVERY, STALLED, STEPS], [])
