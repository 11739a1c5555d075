"""Who fetches which range when several ranks read it: the same answer on every rank.

In: every rank's item range keys (object index, offset, length, occurrence), all-gathered by
`replicas.ReplicaExchange`. Out: an Assignment for one rank: its item ranges no other rank reads,
its item range of each range id, and the rounds of Parcels (owner, receivers, ranges, slots).
Why here: pure computation (numpy over all ranks' keys, no process group), so it is the same on
every rank by construction and testable without ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gcsckpt.dcp.load.item_ranges import ALIGN, ItemRange
from gcsckpt.io.defaults import CHUNK_BYTES


class Parcel(NamedTuple):
    """Ranges one owner sends to one set of receivers in one round: their range ids (see
    `assign`) in the owner's item range order, 64-byte aligned slots in the parcel buffer (-1 for
    an empty range) and the buffer's size (bytes)."""

    owner: int
    receivers: tuple[int, ...]
    ids: np.ndarray
    slots: list[int]
    size: int


class Assignment(NamedTuple):
    """One rank's view of the job's assignment: indexes of its item ranges no other rank needs, its
    item range index of every range id (-1: not its), and the rounds (each a list of Parcels, at
    most one per owner) every rank runs in step."""

    unshared: np.ndarray
    position: np.ndarray
    rounds: list[list[Parcel]]


def assign(table: Sequence[np.ndarray], rank: int, budget: int) -> Assignment:
    """The same assignment on every rank from all ranks' range keys ([n, 4] int64: object
    index, offset, length, occurrence), one array per rank in its item range order.

    Distinct ranges are walked in (object, offset) order; a range held by several ranks goes to
    the owner of the range before it while that owner holds it and its run is under
    CHUNK_BYTES (so owners' ranges stay contiguous and few GETs read through other owners'
    bytes), else to the holder with the fewest bytes so far (unshared bytes counted). Each
    owner's ranges are cut into parcels of about budget / (2 (1 + most owners sending to one
    rank)) bytes, one parcel per set of receivers.
    """
    world = len(table)
    sizes = [len(t) for t in table]
    keys = np.concatenate(table) if sum(sizes) else np.zeros((0, 4), dtype=np.int64)
    ranks = np.repeat(np.arange(world), sizes)
    positions = np.concatenate([np.arange(n) for n in sizes])
    order = np.lexsort((ranks, keys[:, 3], keys[:, 2], keys[:, 1], keys[:, 0]))
    keys, ranks, positions = keys[order], ranks[order], positions[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(first)
    uid = np.cumsum(first) - 1  # range id of each (rank, item range)
    holders = np.diff(np.append(starts, len(keys)))
    lengths = keys[starts, 2]
    words = -(-world // 62)  # holder sets as bitmasks of 62 ranks a word
    masks = np.stack(
        [
            np.bitwise_or.reduceat(
                np.where(ranks // 62 == w, np.left_shift(1, ranks % 62), 0), starts
            )
            if len(starts)
            else np.zeros(0, dtype=np.int64)
            for w in range(words)
        ],
        axis=1,
    )
    position = np.full(len(starts), -1, dtype=np.int64)
    mine = ranks == rank
    position[uid[mine]] = positions[mine]
    load = np.bincount(ranks, weights=np.where(holders[uid] == 1, lengths[uid], 0), minlength=world)
    owner = np.full(len(starts), -1, dtype=np.int64)
    shared = np.flatnonzero(holders > 1)
    # Segments: consecutive shared ranges of one holder set.
    cut = np.ones(len(shared), dtype=bool)
    cut[1:] = np.any(masks[shared[1:]] != masks[shared[:-1]], axis=1) | (
        shared[1:] != shared[:-1] + 1
    )
    bounds = np.append(np.flatnonzero(cut), len(shared))
    current, run = -1, 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        segment = shared[a:b]
        members = _members(masks[segment[0]])
        ends = np.cumsum(lengths[segment])
        done = 0
        while done < len(segment):
            if current not in members or run >= CHUNK_BYTES:
                current = min(members, key=lambda h: (load[h], h))
                run = 0
            before = ends[done - 1] if done else 0
            stop = int(np.searchsorted(ends, before + (CHUNK_BYTES - run), side="left")) + 1
            stop = min(max(stop, done + 1), len(segment))
            size = int(ends[stop - 1] - before)
            owner[segment[done:stop]] = current
            load[current] += size
            run += size
            done = stop
    return Assignment(
        np.sort(positions[mine & (holders[uid] == 1)]),
        position,
        _rounds(owner, masks, lengths, uid, ranks, positions, world, budget),
    )


def _members(mask: np.ndarray) -> list[int]:
    """The ranks of a holder-set bitmask (62 ranks a word)."""
    return [
        62 * w + bit for w, word in enumerate(mask.tolist()) for bit in range(62) if word >> bit & 1
    ]


def _rounds(owner, masks, lengths, uid, ranks, positions, world, budget) -> list[list[Parcel]]:
    """Each owner's ranges (in its item range order) grouped by receivers and cut into parcels;
    round j holds the j-th parcel of every owner."""
    senders: list[set[int]] = [set() for _ in range(world)]
    groups: dict[int, dict[tuple, np.ndarray]] = {}
    for o in range(world):
        owned = (ranks == o) & (owner[uid] == o)
        ids = uid[owned][np.argsort(positions[owned], kind="stable")]
        if not len(ids):
            continue
        rows = masks[ids]
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        by: dict[tuple, np.ndarray] = {}
        for g in range(len(distinct)):
            receivers = tuple(h for h in _members(distinct[g]) if h != o)
            by[receivers] = ids[inverse == g]
            for h in receivers:
                senders[h].add(o)
        groups[o] = by
    fan_in = max((len(s) for s in senders), default=0)
    limit = max(ALIGN, budget // (2 * (1 + fan_in)))
    rounds: list[list[Parcel]] = []
    for o, by in groups.items():
        number = 0
        for receivers, ids in by.items():
            for parcel in _cut(o, receivers, ids, lengths[ids], limit):
                if number == len(rounds):
                    rounds.append([])
                rounds[number].append(parcel)
                number += 1
    return rounds


def _cut(owner: int, receivers: tuple, ids, lengths, limit: int) -> list[Parcel]:
    """Parcels of consecutive ranges whose 64-byte aligned slots fill about `limit` bytes (a
    range starts the parcel it falls in); an empty range takes no slot (-1)."""
    need = -(-lengths // ALIGN) * ALIGN
    offsets = np.cumsum(need) - need
    index = offsets // limit
    parcels = []
    for number in np.unique(index):
        chosen = index == number
        slots = offsets[chosen] - offsets[chosen][0]
        size = int(slots[-1] + need[chosen][-1])
        slots = np.where(need[chosen] > 0, slots, -1)
        parcels.append(Parcel(owner, receivers, ids[chosen], slots.tolist(), size))
    return parcels


def range_keys(item_ranges: Sequence[ItemRange], path_index: dict[str, int]) -> np.ndarray:
    """[n, 4] int64 per item range: object index (`path_index`), offset, length, and how many
    earlier item ranges of this rank had the same range, so equal ranges of two ranks match."""
    seen: dict[tuple, int] = {}
    rows = []
    for item_range in item_ranges:
        where = item_range.where()
        k = seen.get(where, 0)
        seen[where] = k + 1
        rows.append((path_index[where[0]], where[1], where[2], k))
    return np.array(rows, dtype=np.int64).reshape(-1, 4)
