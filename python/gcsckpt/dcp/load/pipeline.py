"""The window pipeline: two windows of ranges in flight, bytes consumed as they complete.

In: Windows (from `plan.make_windows`), a `ranges.CheckpointRanges`, a `consume(item_range, data)`
callback and the load's LoadStats. Out: every ItemRange handed to `consume` once all its ranges
are complete, in completion order within a window, with `data` its slot (a 1-D uint8 numpy
view of the window buffer, valid only during the call: a buffered item range's bytes, a direct
TORCH_SAVE item range's archive head and tail; empty for an empty item range; numpy because slicing
a torch tensor costs several times as much per item) or None for a direct RAW item range (the bytes
are already in `item_range.target`). While window k is consumed, window k+1 is being fetched; a
window's buffer is reused for a later one when big enough, so buffer memory stays at about two
windows. A run of BYTE_IO archives packed back to back in the buffer is read as one range
(`window_requests`), its item ranges consumed one by one when it completes. On any error every
outstanding range is cancelled before the error propagates, so no buffer is written after
this returns.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import torch

from gcsckpt.dcp.load.item_ranges import ItemRange, Window
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.stats import LoadStats

# Windows in flight at once: one being consumed, one being fetched.
WINDOWS_IN_FLIGHT = 2


def run_windows(
    windows: Sequence[Window],
    ranges: CheckpointRanges,
    consume: Callable[[ItemRange, np.ndarray | None], None],
    stats: LoadStats,
) -> None:
    """Fetches window after window and calls `consume` for each completed item range.

    Counts into `stats` (adding, so a second call for re-read item ranges adds to the first):
    windows, bytes_needed, wait_s (blocked on bytes), fetch_s (first submit to last
    completion; added only on success).

    Raises:
        RangeReadError: a range failed for good. Anything `consume` raises.
    """
    stats.windows += len(windows)
    pending: deque = deque()  # (window, handle, buffer)
    spare: list[torch.Tensor] = []
    upcoming = iter(windows)
    fetch_start = time.perf_counter()

    def submit_next() -> None:
        window = next(upcoming, None)
        if window is None:
            return
        buffer = next((b for b in spare if b.numel() >= window.buffer_bytes), None)
        if buffer is None:
            spare.clear()  # free a too-small buffer before allocating its replacement
            buffer = torch.empty(window.buffer_bytes, dtype=torch.uint8)
        else:
            spare.remove(buffer)
        host = buffer.numpy()
        requests, owners = window_requests(window, host)
        stats.bytes_needed += sum(r[2] for r in requests)
        parts = [0] * len(window.item_ranges)  # ranges of each item range still outstanding
        for first, end in owners:
            for i in range(first, end):
                parts[i] += 1
        pending.append((window, ranges.submit(requests), buffer, host, owners, parts))

    try:
        for _ in range(WINDOWS_IN_FLIGHT):
            submit_next()
        while pending:
            window, handle, buffer, host, owners, parts = pending[0]
            while True:
                waited = time.perf_counter()
                done = handle.next_completed()
                stats.wait_s += time.perf_counter() - waited
                if not done:
                    break
                for r in done:
                    first, end = owners[r]
                    for i in range(first, end):
                        parts[i] -= 1
                        if parts[i]:
                            continue  # a direct TORCH_SAVE item range waits for all three ranges
                        item_range = window.item_ranges[i]
                        if item_range.slot_bytes == 0 and item_range.target is not None:
                            consume(item_range, None)
                        else:
                            start = max(window.slots[i], 0)  # an empty item range has no slot
                            consume(item_range, host[start : start + item_range.slot_bytes])
            pending.popleft()
            spare.append(buffer)
            submit_next()
        stats.fetch_s += time.perf_counter() - fetch_start
    except BaseException:
        for _, handle, *_ in pending:
            handle.cancel()
        pending.clear()
        raise


def window_requests(window: Window, host) -> tuple[list, list[tuple[int, int]]]:
    """The ranges (path, offset, length, destination) that fill `window`'s buffer `host` (a
    uint8 numpy array) and its direct targets, and for each range the item ranges it serves, as
    (first, end) indices into `window.item_ranges`.

    An item range's pieces (`ItemRange.pieces`) become ranges, except that a piece read into the
    buffer right after the previous range's bytes, in the object and in the buffer, extends that
    range (`plan.make_windows` packs such slots back to back): a run of BYTE_IO archives is one
    range, and a direct TORCH_SAVE item's tail and the next one's head are one range."""
    requests: list = []
    owners: list[tuple[int, int]] = []
    run = None  # (path, object end, buffer end) of the last range when it was read into host
    for i, (item_range, slot) in enumerate(zip(window.item_ranges, window.slots, strict=True)):
        path = item_range.path
        for offset, length, where in item_range.pieces(slot):
            if type(where) is not int or not length:  # into a target, or empty
                requests.append((path, offset, length, host[0:0] if not length else where))
                owners.append((i, i + 1))
                run = None
                continue
            end = where + length
            if run is not None and run == (path, offset, where):
                _, first, _, _ = requests[-1]
                requests[-1] = (
                    path,
                    first,
                    offset + length - first,
                    host[first - offset + where : end],
                )
                owners[-1] = (owners[-1][0], i + 1)
            else:
                requests.append((path, offset, length, host[where:end]))
                owners.append((i, i + 1))
            run = (path, offset + length, end)
    return requests, owners
