"""The counting load planners (worker.counting_planner)."""

from __future__ import annotations

import io

import pytest
import torch


@pytest.mark.parametrize(
    "reader, planner_class",
    [("fsspec", "CountingLoadPlanner"), ("gcsckpt", "CountingGCSLoadPlanner")],
)
def test_counting_planner_counts_committed_bytes(reader, planner_class):
    from ckptbench.worker.counting_planner import counting_planner_for

    seen = []
    planner = counting_planner_for(reader, progress=lambda done, total: seen.append((done, total)))
    assert type(planner).__name__ == planner_class
    planner.read_items = 2
    planner.commit_tensor(None, torch.zeros(3, 4, dtype=torch.bfloat16))
    planner.state_dict, planner.flatten_state_dict = {}, False
    read_item = type("Item", (), {"dest_index": type("I", (), {"fqn": "lr"})()})()
    buffer = io.BytesIO()
    torch.save(0.5, buffer)
    buffer.seek(0)
    planner.load_bytes(read_item, buffer)
    assert (planner.committed_items, planner.committed_tensor_bytes) == (2, 24)
    assert planner.state_dict["lr"] == 0.5
    assert seen[-1] == (2, 2)
