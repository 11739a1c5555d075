"""The window pipeline: two windows of ranges in flight, bytes consumed as they complete.

In: Windows (from `plan.make_windows`), a `ranges.CheckpointRanges`, a `consume(fetch, data)`
callback and the load's LoadStats. Out: every Fetch handed to `consume` once all its ranges
are complete, in completion order within a window, with `data` its slot (a 1-D uint8 CPU
tensor view of the window buffer, valid only during the call: a buffered fetch's bytes, a
direct TORCH_SAVE fetch's archive head and tail; empty for an empty fetch) or None for a direct
RAW fetch (the bytes are already in `fetch.target`). While window k is consumed, window k+1 is
being fetched; a window's buffer is reused for a later one when big enough, so buffer memory
stays at about two windows. On any error every outstanding range is cancelled before the error
propagates, so no buffer is written after this returns.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import torch

from gcsckpt.dcp.load.fetch import Fetch, Window
from gcsckpt.dcp.load.ranges import CheckpointRanges
from gcsckpt.dcp.load.stats import LoadStats

# Windows in flight at once: one being consumed, one being fetched.
WINDOWS_IN_FLIGHT = 2


def run_windows(
    windows: Sequence[Window],
    ranges: CheckpointRanges,
    consume: Callable[[Fetch, torch.Tensor | None], None],
    stats: LoadStats,
) -> None:
    """Fetches window after window and calls `consume` for each completed fetch.

    Counts into `stats` (adding, so a second call for re-read fetches adds to the first):
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
        requests: list = []
        owners: list[int] = []  # request index -> fetch index
        for i, (fetch, slot) in enumerate(zip(window.fetches, window.slots, strict=True)):
            fetch.parts(host[slot : slot + fetch.slot_bytes], requests)
            owners.extend([i] * (len(requests) - len(owners)))
        stats.bytes_needed += sum(r[2] for r in requests)
        parts = [0] * len(window.fetches)  # ranges of each fetch still outstanding
        for i in owners:
            parts[i] += 1
        pending.append((window, ranges.submit(requests), buffer, owners, parts))

    try:
        for _ in range(WINDOWS_IN_FLIGHT):
            submit_next()
        while pending:
            window, handle, buffer, owners, parts = pending[0]
            while True:
                waited = time.perf_counter()
                done = handle.next_completed()
                stats.wait_s += time.perf_counter() - waited
                if not done:
                    break
                for r in done:
                    i = owners[r]
                    parts[i] -= 1
                    if parts[i]:
                        continue  # a direct TORCH_SAVE fetch waits for all three ranges
                    fetch = window.fetches[i]
                    if fetch.slot_bytes == 0 and fetch.target is not None:
                        consume(fetch, None)
                    else:
                        start = max(window.slots[i], 0)  # an empty fetch has no slot
                        consume(fetch, buffer[start : start + fetch.slot_bytes])
            pending.popleft()
            spare.append(buffer)
            submit_next()
        stats.fetch_s += time.perf_counter() - fetch_start
    except BaseException:
        for _, handle, *_ in pending:
            handle.cancel()
        pending.clear()
        raise
