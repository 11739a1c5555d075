"""Each byte read once per job: a range several ranks need is fetched by one and sent to the rest.

In: each rank's ItemRanges (from `plan.plan_item_ranges`), the load's process group and buffer
budget. Out: every ItemRange of every rank handed to its `consume` once, as `pipeline.run_windows`
does, with each distinct range fetched from storage by one rank only (its owner).
Why: under HSDP (dp_replicate > 1) every replica's LoadPlan names the same ReadItems, so each
range was fetched once per replica (storage bytes = replicas x checkpoint bytes).
How: the ranks all-gather the key of each item range (object, offset, length, occurrence); each
computes the same assignment from them (`replica_plan.assign`): every range held by more than one
rank gets one owner. Owners fetch and decode as before; each round every owner sends one parcel
(ranges with one set of receivers) by isend/irecv, and receivers decode it with their own
ItemRanges. Before each exchange the ranks all-gather their status, so a rank's failure fails every
rank's load (CheckpointReadError naming that rank and its objects) and no rank waits on bytes that
will not come; nothing is committed from bytes that did not arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from gcsckpt.dcp.load.item_ranges import ALIGN, ItemRange
from gcsckpt.dcp.load.load_errors import CheckpointReadError, LoadErrors
from gcsckpt.dcp.load.pipeline import run_windows
from gcsckpt.dcp.load.plan import make_windows
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.replica_plan import Parcel, assign, range_keys
from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.io.errors import RangeReadError

Consume = Callable[[ItemRange, "torch.Tensor | None"], None]


class SharedReads(NamedTuple):
    """What `prepare_global_plan` puts in every rank's LoadPlan.storage_data when ranges are
    shared: the pins the plan would carry anyway and the number of plans (ranks) of the load."""

    pins: object
    ranks: int


class ReplicaExchange:
    """One rank's side of a load whose shared ranges are read once (see module doc).

    Args:
        group: the process group of the load (None: the default group); gloo sends CPU tensors,
            NCCL CUDA tensors of the current device.
        paths: the checkpoint's data objects (relative paths; the same on every rank).
        budget_bytes: buffer memory (bytes): two windows of a quarter each, and one
            round's parcels (the one sent, those received) in the other half.
        errors: this rank's LoadErrors. stats: the load's LoadStats (peer_bytes_in/out and
            exchange_s grow).
    """

    def __init__(
        self,
        group,
        paths: Sequence[str],
        budget_bytes: int,
        errors: LoadErrors,
        stats: LoadStats,
    ) -> None:
        self.group = group
        self.path_index = {path: i for i, path in enumerate(sorted(set(paths)))}
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.budget = max(4 * ALIGN, budget_bytes)
        self.window_bytes = self.budget // 4  # two in flight: half the budget
        self.errors = errors
        self.stats = stats
        self.started = False
        cuda = dist.get_backend(group) == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else None

    def abandon(self, error: BaseException) -> None:
        """Joins the first collective with a failure, so peers fail too instead of waiting.
        No-op once `run` has started."""
        if not self.started:
            self.started = True
            try:
                self._gather_counts(-1, error)
            except CheckpointReadError:
                pass  # the caller raises `error` itself

    def run(
        self, item_ranges: Sequence[ItemRange], ranges: CheckpointRanges, consume: Consume
    ) -> None:
        """Reads this rank's share of the ranges and exchanges the rest (see module doc).

        Raises:
            CheckpointReadError: this rank's read or decode failed, or another rank's did (then
                naming that rank and the objects it failed on). RangeReadError is converted.
        """
        self.started = True
        try:
            keys = range_keys(item_ranges, self.path_index)
        except Exception as e:
            self._gather_counts(-1, e)  # the peers fail too; raises this rank's error
            raise
        counts = self._gather_counts(len(keys), None)
        plan = assign(self._gather_keys(keys, counts), self.rank, self.budget)
        # range id -> this rank's ItemRange of it, buffered so its bytes can be sent (None: a range
        # only other ranks read); unshared item ranges keep their direct targets
        mine = [_buffered(item_ranges[i]) if i >= 0 else None for i in plan.position.tolist()]
        unshared = [item_ranges[i] for i in plan.unshared.tolist()]
        fetched = {f.path for f in unshared}
        for parcels in plan.rounds:
            for parcel in parcels:
                if parcel.owner == self.rank:
                    fetched.update(mine[i].path for i in parcel.ids.tolist())
        self.stats.objects = len(fetched)  # objects this rank reads from storage
        failure: BaseException | None = None
        if not plan.rounds:  # nothing shared: no collective after the key gather
            self._read_own(None, unshared, mine, ranges, consume)
            return
        for number, parcels in enumerate(plan.rounds):
            outgoing = next((p for p in parcels if p.owner == self.rank), None)
            send = None
            if failure is None:
                try:  # round 0 fetches the unshared ranges too, in the same GETs
                    extra = unshared if number == 0 else []
                    send = self._read_own(outgoing, extra, mine, ranges, consume)
                except Exception as e:
                    failure = e
            self._check(failure)
            incoming = [p for p in parcels if self.rank in p.receivers]
            received = self._exchange(number, outgoing, send, incoming)
            try:
                if failure is None:
                    for parcel, buffer in zip(incoming, received, strict=True):
                        self._consume_parcel(parcel, buffer, mine, consume)
            except Exception as e:
                failure = e
        if failure is not None:
            raise self._as_load_error(failure)

    # -- collectives ------------------------------------------------------------------------------
    def _gather_counts(self, count: int, error: BaseException | None) -> list[int]:
        local = torch.tensor([count], dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local, group=self.group)
        counts = [int(t.item()) for t in gathered]
        if min(counts) < 0:
            self._raise_failed(error)
        return counts

    def _gather_keys(self, keys: np.ndarray, counts: list[int]) -> list[np.ndarray]:
        """Every rank's item range keys ([n, 4] int64), in that rank's item range order."""
        local = torch.zeros((max(counts), 4), dtype=torch.int64)
        local[: len(keys)] = torch.from_numpy(keys)
        local = local.to(self.device) if self.device is not None else local
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local, group=self.group)
        return [t[:n].cpu().numpy() for t, n in zip(gathered, counts, strict=True)]

    def _check(self, failure: BaseException | None) -> None:
        """All-gathers each rank's status; raises on every rank when any rank failed."""
        flag = torch.tensor([failure is not None], dtype=torch.int64, device=self.device)
        flags = [torch.empty_like(flag) for _ in range(self.world)]
        dist.all_gather(flags, flag, group=self.group)
        if any(int(f.item()) for f in flags):
            self._raise_failed(failure)

    def _raise_failed(self, error: BaseException | None) -> None:
        """Every rank learns who failed and why (one all_gather_object); raises this rank's
        own error if it failed, else the first failed rank's failures under this rank's name."""
        own = None if error is None else self._as_load_error(error)
        info = None if own is None else (own.rank, own.failures, str(own))
        infos = [None] * self.world
        dist.all_gather_object(infos, info, group=self.group)
        if own is not None:
            raise own
        rank, failures, text = next(i for i in infos if i is not None)
        raise CheckpointReadError(
            self.rank,
            failures,
            summary=f"rank {rank}, which reads ranges for other ranks, failed"
            + ("" if failures else f": {text}"),
        )

    def _exchange(self, number: int, outgoing, send, incoming: list[Parcel]) -> list:
        """Sends this rank's parcel of round `number`, receives the parcels meant for it, as one
        `batch_isend_irecv` (NCCL deadlocks on separate sends and receives between a pair of
        ranks that both send; gloo takes either)."""
        began = time.perf_counter()
        ops, received = [], []
        if outgoing is not None and outgoing.size:
            for peer in outgoing.receivers:
                ops.append(dist.P2POp(dist.isend, send, self._global(peer), self.group, number))
            self.stats.peer_bytes_out += outgoing.size * len(outgoing.receivers)
        for parcel in incoming:
            buffer = torch.empty(parcel.size, dtype=torch.uint8, device=self.device)
            if parcel.size:
                source = self._global(parcel.owner)
                ops.append(dist.P2POp(dist.irecv, buffer, source, self.group, number))
            received.append(buffer)
            self.stats.peer_bytes_in += parcel.size
        for work in dist.batch_isend_irecv(ops) if ops else ():
            work.wait()
        self.stats.exchange_s += time.perf_counter() - began
        return [b.cpu() for b in received]

    def _global(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    # -- local work -------------------------------------------------------------------------------
    def _read_own(self, parcel: Parcel | None, extra: list[ItemRange], mine: list, ranges, consume):
        """Reads and decodes an owned parcel (None: none) and the `extra` ItemRanges in one
        pass (object order, so their ranges share GETs); returns the parcel's bytes laid out at
        its slots (None without a parcel)."""
        slot_of: dict[int, int] = {}
        item_ranges = list(extra)
        if parcel is not None:
            for i, slot in zip(parcel.ids.tolist(), parcel.slots, strict=True):
                slot_of[id(mine[i])] = slot
                item_ranges.append(mine[i])
            item_ranges.sort(key=ItemRange.where)
        send = torch.empty(parcel.size if parcel else 0, dtype=torch.uint8)
        send_host = send.numpy()

        def keep(item_range: ItemRange, data) -> None:
            consume(item_range, data)
            start = slot_of.get(id(item_range), -1)
            if start >= 0:  # a shared item range: buffered, `data` (numpy uint8) holds its bytes
                send_host[start : start + item_range.length] = data

        windows = make_windows(item_ranges, self.window_bytes)
        run_windows(windows, ranges, keep if slot_of else consume, self.stats)
        if parcel is None:
            return None
        return send.to(self.device) if self.device is not None else send

    def _consume_parcel(self, parcel: Parcel, buffer: torch.Tensor, mine: list, consume) -> None:
        """Decodes a received parcel with this rank's own ItemRanges (bytes into their targets)."""
        host = buffer.numpy()  # slots as numpy views, as `pipeline.run_windows` gives them
        for i, slot in zip(parcel.ids.tolist(), parcel.slots, strict=True):
            start = max(slot, 0)  # an empty range has no slot
            consume(mine[i], host[start : start + mine[i].length])

    def _as_load_error(self, error: BaseException) -> CheckpointReadError:
        if isinstance(error, CheckpointReadError):
            return error
        if isinstance(error, RangeReadError):
            return self.errors.from_range_error(error)
        summary = f"{type(error).__name__}: {error}"
        return CheckpointReadError(self.rank, [], summary=summary)


def exchange_for(
    group, ranks: int, paths: Sequence[str], budget: int, errors: LoadErrors, stats: LoadStats
) -> ReplicaExchange | None:
    """The exchange of a load shared by `ranks` ranks over `group` (None: the default group),
    or None when this process is not in such a group (every rank then decides the same, from
    the same plan and group). `paths`, `budget`, ...: as `ReplicaExchange`'s."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    if dist.get_world_size(group) != ranks:
        return None
    return ReplicaExchange(group, paths, budget, errors, stats)


def _buffered(item_range: ItemRange) -> ItemRange:
    """`item_range` with its whole range read into a window slot (not straight into its target), so
    the bytes can be sent as they are; the decoder then copies them into the target."""
    if item_range.target is None:
        return item_range
    return item_range._replace(target=None, archive=None, skip=0)
