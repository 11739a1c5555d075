"""The window pipeline: two windows of ranges in flight, bytes consumed as they complete.

In: Windows (from `plan.make_windows`), a `ranges.CheckpointRanges`, a `consume(fetch, data)`
callback and the load's LoadStats. Out: every Fetch handed to `consume` once, in completion
order within a window, with `data` its bytes (a 1-D uint8 CPU tensor view of the window buffer,
valid only during the call; empty for an empty fetch) or None for a direct fetch (the bytes are
already in `fetch.target`). While window k is consumed, window k+1 is being fetched; a
window's buffer is reused for a later one when big enough, so buffer memory stays at about two
windows. On any error every outstanding range is cancelled before the error propagates, so no
buffer is written after this returns.
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

    Counts into `stats`: windows, bytes_needed, wait_s (blocked on bytes), fetch_s (first
    submit to last completion; set only on success).

    Raises:
        RangeReadError: a range failed for good. Anything `consume` raises.
    """
    stats.windows = len(windows)
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
        requests = []
        for fetch, slot in zip(window.fetches, window.slots, strict=True):
            if fetch.target is not None:
                dest = fetch.target.reshape(-1).view(torch.uint8).numpy()
            else:
                dest = host[slot : slot + fetch.length]
            requests.append((fetch.path, fetch.offset, fetch.length, dest))
        stats.bytes_needed += sum(f.length for f in window.fetches)
        pending.append((window, ranges.submit(requests), buffer))

    try:
        for _ in range(WINDOWS_IN_FLIGHT):
            submit_next()
        while pending:
            window, handle, buffer = pending[0]
            while True:
                waited = time.perf_counter()
                done = handle.next_completed()
                stats.wait_s += time.perf_counter() - waited
                if not done:
                    break
                for i in done:
                    fetch = window.fetches[i]
                    if fetch.target is not None:
                        consume(fetch, None)
                    else:
                        start = max(window.slots[i], 0)  # an empty fetch has no slot
                        consume(fetch, buffer[start : start + fetch.length])
            pending.popleft()
            spare.append(buffer)
            submit_next()
        stats.fetch_s = time.perf_counter() - fetch_start
    except BaseException:
        for _, handle, _ in pending:
            handle.cancel()
        pending.clear()
        raise
