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
    SAVE_EVERY,
    STEPS,
    WHERE,
    Launch,
    check_interrupted,
    check_resumed,
    command,
    hold_uploads,
    losses,
    rank_env,
    run,
    wait_mid_save,
)

from gcsckpt.testing import FaultProxy, LocalGCS
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

    with LocalGCS(data_dir=str(tmp_path / "objects")) as gcs:
        gcs.create_bucket(BUCKET)
        with FaultProxy(gcs.endpoint, [hold_uploads(STALLED, "[123]")]) as proxy:
            nodes = _nodes(rank_env({"STORAGE_EMULATOR_HOST": proxy.endpoint}))
            try:
                wait_mid_save(nodes, proxy, gcs, STALLED)
                nodes[1].kill()  # the node that does not host the store: the whole tree
                nodes[0].wait(timeout_s=60)  # its ranks lose their peers; else killed below
            finally:
                for node in nodes:
                    node.kill()
        assert losses(_both_lines(nodes)) == reference  # the curve up to the kill
        check_interrupted(gcs, STALLED)  # the save never got its .metadata

        restarted = _nodes(rank_env(gcs.env()))
        statuses = [node.wait(timeout_s=600) for node in restarted]
        for node in restarted:
            node.kill()
        assert statuses == [0, 0], "\n".join(node.output() for node in restarted)
        check_resumed(_both_lines(restarted), gcs, reference, STALLED)
