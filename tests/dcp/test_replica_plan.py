"""replica_plan.assign: every shared range gets one owner among its holders, every receiver one
copy, each rank's unshared ranges stay its own, and owners carry similar bytes."""

from __future__ import annotations

import numpy as np

from gcsckpt.dcp.load.item_ranges import ALIGN
from gcsckpt.dcp.load.replica_plan import assign
from gcsckpt.io.defaults import CHUNK_BYTES

MIB = 1 << 20


def _table():
    """8 ranks as HSDP dpr2dp4: rank r and r + 4 read shard r % 4 (40 ranges of 1 MiB each in
    object r % 4), every rank reads 10 small ranges of object 9, rank 5 alone reads one more."""
    shards = [[(s, i * MIB, MIB, 0) for i in range(40)] for s in range(4)]
    common = [(9, i * 100, 100, 0) for i in range(10)]
    table = [shards[r % 4] + common for r in range(8)]
    table[5] = table[5] + [(9, 5000, 300, 0)]
    return [np.array(t, dtype=np.int64) for t in table]


def test_each_shared_range_has_one_owner_and_every_receiver_one_copy():
    table = _table()
    plans = [assign(table, rank, 256 * MIB) for rank in range(8)]
    rounds = plans[0].rounds

    def shape(plan):
        return [[(p.owner, p.receivers, p.ids.tolist(), p.slots, p.size) for p in r] for r in plan]

    assert all(shape(p.rounds) == shape(rounds) for p in plans[1:])  # same on every rank
    assert [len(p.unshared) for p in plans] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert plans[5].unshared.tolist() == [50]  # its own range, fetched by itself
    copies: dict[tuple[int, int], int] = {}  # (range id, rank) -> times delivered
    owned_bytes = [0] * 8
    for number, parcels in enumerate(rounds):
        assert len({p.owner for p in parcels}) == len(parcels)  # one parcel per owner a round
        for parcel in parcels:
            assert parcel.owner not in parcel.receivers
            for i, slot in zip(parcel.ids.tolist(), parcel.slots, strict=True):
                assert slot % ALIGN == 0 and slot < parcel.size
                holders = [r for r in range(8) if plans[r].position[i] >= 0]
                assert sorted((parcel.owner, *parcel.receivers)) == holders
                for r in (parcel.owner, *parcel.receivers):
                    copies[(i, r)] = copies.get((i, r), 0) + 1
            owned_bytes[parcel.owner] += parcel.size
        assert number < 8
    # Every (range, holder) pair once: shards by their 2 replicas, object 9's by all 8.
    assert len(copies) == 4 * 40 * 2 + 10 * 8 and set(copies.values()) == {1}
    # Runs of up to one GET's bytes go to the least-loaded holder: the replicas split shards.
    shard_bytes = 40 * MIB
    for r in range(4):
        assert abs(owned_bytes[r] - owned_bytes[r + 4]) <= CHUNK_BYTES + 10 * ALIGN
        assert owned_bytes[r] + owned_bytes[r + 4] >= shard_bytes


def test_no_shared_range_means_no_round():
    table = [np.array([(r, 0, 10, 0), (r, 10, 10, 0)], dtype=np.int64) for r in range(3)]
    plan = assign(table, 1, 256 * MIB)
    assert plan.rounds == [] and plan.unshared.tolist() == [0, 1]
