"""gcsckpt.dcp.load.regions: the contiguous run of a saved block that a requested chunk is."""

from __future__ import annotations

import pytest
import torch

from gcsckpt.dcp.load.regions import contiguous_region


@pytest.mark.parametrize(
    ("sizes", "offsets", "lengths"),
    [
        ((6, 4), (0, 0), (6, 4)),
        ((6, 4), (2, 0), (3, 4)),
        ((6, 4), (2, 1), (1, 2)),
        ((6, 4), (2, 1), (2, 2)),
        ((5, 3, 2), (1, 1, 0), (1, 2, 2)),
        ((5, 3, 2), (1, 0, 0), (2, 2, 2)),
        ((4,), (1,), (0,)),
        ((), (), ()),
    ],
)
def test_contiguous_region_matches_brute_force(sizes, offsets, lengths):
    block = torch.arange(max(1, torch.Size(sizes).numel())).reshape(sizes)
    region = block
    for d, (o, n) in enumerate(zip(offsets, lengths, strict=True)):
        region = region.narrow(d, o, n)
    wanted = region.reshape(-1).tolist()
    found = contiguous_region(sizes, offsets, lengths)
    flat = block.reshape(-1).tolist()
    is_run = wanted == flat[wanted[0] : wanted[0] + len(wanted)] if wanted else True
    if found is None:
        assert not is_run
    else:
        first, count = found
        assert count == len(wanted) and flat[first : first + count] == wanted
