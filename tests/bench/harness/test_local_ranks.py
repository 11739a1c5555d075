"""The one rank launcher (ckptbench.harness.local_ranks): results by rank, errors naming it."""

import pytest

from ckptbench.harness.local_ranks import LocalRanks, RankError, backend_for, run_ranks
from tests.bench.harness import rank_steps


def test_results_come_back_in_rank_order_from_one_gloo_group():
    results = run_ranks(rank_steps.rank_sum, 3, 10)
    # 10 * (1 + 2 + 3) = 60 on every rank; ranks run with one intra-op thread.
    assert results == [(0, 3, 60, "1"), (1, 3, 60, "1"), (2, 3, 60, "1")]


def test_a_raising_rank_is_named_with_its_traceback():
    with pytest.raises(RankError, match="rank 1 failed") as caught:
        run_ranks(rank_steps.fail_on_rank_one, 2)
    assert caught.value.rank == 1
    assert "ValueError: rank 1 refuses" in caught.value.traceback


def test_the_wall_clock_limit_kills_the_ranks():
    ranks = LocalRanks(timeout_s=30.0)
    with pytest.raises(RankError, match="no result after 2 s on 2 ranks") as caught:
        ranks.run(rank_steps.sleep_forever, 2, wall_limit_s=2.0)
    assert caught.value.rank is None and caught.value.traceback is None


def test_ranks_put_to_the_launcher_queue_and_polls_drain_it():
    ranks = LocalRanks()
    queue = ranks.queue(100)
    seen = []

    def drain():
        while not queue.empty():
            seen.append(queue.get())

    assert ranks.run(rank_steps.put_progress, 2, queue, on_poll=drain) == [0, 1]
    drain()
    queue.close()
    assert sorted(seen) == [(0, "hello"), (1, "hello")]


def test_backend_follows_the_device():
    assert (backend_for("cpu"), backend_for("cuda")) == ("gloo", "nccl")
