"""gcsckpt.dcp.load.plan: item ranges grouped into windows of bounded buffer bytes; runs of
BYTE_IO archives packed and read as one range (`pipeline.window_requests`)."""

from __future__ import annotations

import numpy as np

from gcsckpt.dcp.load.item_ranges import ALIGN, ItemRange, ItemRangeKind
from gcsckpt.dcp.load.pipeline import window_requests
from gcsckpt.dcp.load.plan import make_windows


def test_windows_bound_buffer_bytes_and_align_slots():
    lengths = [100, 5000, 3, 70000, 64, 200000, 1]
    item_ranges = [
        ItemRange("o", i * 1000, n, None, ItemRangeKind.TORCH_SAVE) for i, n in enumerate(lengths)
    ]
    windows = make_windows(item_ranges, 80000)
    assert [f for w in windows for f in w.item_ranges] == item_ranges
    for window in windows:
        assert window.buffer_bytes <= 80000 or len(window.item_ranges) == 1
        for f, slot in zip(window.item_ranges, window.slots, strict=True):
            assert slot % ALIGN == 0 and slot + f.length <= window.buffer_bytes


def test_byte_io_runs_pack_into_one_range_each():
    b = ItemRangeKind.BYTES
    item_ranges = [
        ItemRange("o", 0, 100, None, b),
        ItemRange("o", 100, 30, None, b),  # follows: packed, same range
        ItemRange("o", 130, 7, None, b),
        ItemRange("o", 200, 9, None, b),  # a gap in the object: new range, aligned slot
        ItemRange("o", 209, 5, None, ItemRangeKind.TORCH_SAVE),  # not BYTES: aligned, own range
        ItemRange("o", 214, 11, None, b),
        ItemRange("p", 225, 3, None, b),  # another object: new range
    ]
    (window,) = make_windows(item_ranges, 1 << 20)
    assert window.slots == (0, 100, 130, 192, 256, 320, 384)
    assert window.buffer_bytes == 448
    host = np.arange(window.buffer_bytes, dtype=np.uint8)
    requests, owners = window_requests(window, host)
    assert [r[:3] for r in requests] == [
        ("o", 0, 137),
        ("o", 200, 9),
        ("o", 209, 5),
        ("o", 214, 11),
        ("p", 225, 3),
    ]
    assert owners == [(0, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
    assert [int(r[3][0]) for r in requests] == [0, 192, 0, 64, 128]  # uint8 slots 256, 320, 384
    assert [r[3].size for r in requests] == [137, 9, 5, 11, 3]


def test_packed_windows_stay_within_their_budget():
    item_ranges = [ItemRange("o", i * 50, 50, None, ItemRangeKind.BYTES) for i in range(40)]
    windows = make_windows(item_ranges, 640)
    assert [f for w in windows for f in w.item_ranges] == item_ranges
    assert all(w.buffer_bytes <= 640 for w in windows) and len(windows) == 4


class _Template:
    head_len, tail_len = 10, 6


def test_direct_archive_tail_and_next_head_are_one_range():
    import torch

    targets = [torch.zeros(4, dtype=torch.int32) for _ in range(3)]
    # Three archives of 60 bytes back to back, each: head 10, storage at +20 (16 bytes), tail 6.
    item_ranges = [
        ItemRange(
            "o", 60 * i, 60, None, ItemRangeKind.TORCH_SAVE, target=t, archive=_Template(), skip=10
        )
        for i, t in enumerate(targets)
    ]
    (window,) = make_windows(item_ranges, 1 << 20)
    assert window.slots == (0, 16, 32)  # packed: head + tail, 16 bytes each
    host = np.arange(window.buffer_bytes, dtype=np.uint8)
    requests, owners = window_requests(window, host)
    assert [r[:3] for r in requests] == [
        ("o", 0, 10),  # first head
        ("o", 20, 16),  # storage -> target 0
        ("o", 54, 16),  # tail 0 + head 1
        ("o", 80, 16),
        ("o", 114, 16),  # tail 1 + head 2
        ("o", 140, 16),
        ("o", 174, 6),  # last tail
    ]
    assert owners == [(0, 1), (0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (2, 3)]
    # Buffer positions: slot i holds head i at 16 i and tail i at 16 i + 10.
    assert [int(r[3][0]) for r in requests if r[3].base is host] == [0, 10, 26, 42]
