"""gcsckpt.dcp.load.plan: fetches grouped into windows of bounded buffer bytes."""

from __future__ import annotations

from gcsckpt.dcp.load.fetch import ALIGN, Fetch, FetchKind
from gcsckpt.dcp.load.plan import make_windows


def test_windows_bound_buffer_bytes_and_align_slots():
    lengths = [100, 5000, 3, 70000, 64, 200000, 1]
    fetches = [Fetch("o", i * 1000, n, None, FetchKind.TORCH_SAVE) for i, n in enumerate(lengths)]
    windows = make_windows(fetches, 80000)
    assert [f for w in windows for f in w.fetches] == fetches
    for window in windows:
        assert window.buffer_bytes <= 80000 or len(window.fetches) == 1
        for f, slot in zip(window.fetches, window.slots, strict=True):
            assert slot % ALIGN == 0 and slot + f.length <= window.buffer_bytes
