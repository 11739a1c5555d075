"""The scaling program's pieces (//bench:scaling) at the tiniest sizes: the exponent fit, the
synthetic 70B-style Metadata, simulated planning, verified real saves and loads on both arms (one
process and two rank processes), and the tables and PNG."""

from __future__ import annotations

import math

import pytest
import torch

from ckptbench.harness.job import RankFailure
from ckptbench.harness.launch import SpawnLauncher
from ckptbench.scaling import scaling_report
from ckptbench.scaling.fit import growth_exponent
from ckptbench.scaling.ranks import RanksJob
from ckptbench.scaling.real import ARMS, assert_same, build_state, measure_real
from ckptbench.scaling.simulated import GCSCKPT, STOCK, measure_simulated
from ckptbench.scaling.synthetic import (
    LLAMA_70B,
    ModelShape,
    expected_entries,
    synthetic_metadata,
)
from gcsckpt.testing import LocalGCS

# 12 parameters: embed (32, 8), q/o (8, 8), k/v (4, 8), gate/up (16, 8), down (8, 16), three
# norms (8,), lm_head (32, 8).
TINY = ModelShape(layers=1, hidden=8, intermediate=16, kv=4, vocab=32)
BUCKET = "scaling-test"


@pytest.fixture(scope="module")
def gcs():
    with LocalGCS() as endpoint:
        endpoint.create_bucket(BUCKET)
        yield endpoint


def test_growth_exponent_recovers_known_exponents():
    x = [10.0, 100.0, 1_000.0, 10_000.0]
    assert growth_exponent(x, [3.0 * v**1.5 for v in x]) == pytest.approx(1.5, abs=1e-9)
    assert growth_exponent(x, [7.0] * 4) == pytest.approx(0.0, abs=1e-9)
    assert growth_exponent(x, [2.0 / v for v in x]) == pytest.approx(-1.0, abs=1e-9)


def test_growth_exponent_rejects_bad_input():
    with pytest.raises(ValueError, match="two or more"):
        growth_exponent([1.0], [1.0])
    with pytest.raises(ValueError, match="> 0"):
        growth_exponent([1.0, 2.0], [0.0, 1.0])


@pytest.mark.parametrize(
    ("ranks", "entries"),
    [
        # 36 sharded tensors x 4 chunks + 12 steps + 12 x 12 param_group values
        (4, 36 * 4 + 12 + 144),
        # k and v (and their moments: 6 tensors) have 4 rows: 4 chunks, the other 30 have 8
        (8, 30 * 8 + 6 * 4 + 12 + 144),
    ],
)
def test_synthetic_metadata_entry_count(ranks, entries):
    metadata = synthetic_metadata(TINY, ranks)
    assert len(metadata.storage_data) == entries == expected_entries(TINY, ranks)
    q = metadata.state_dict_metadata["model.model.layers.0.self_attn.q_proj.weight"]
    assert q.size == torch.Size((8, 8))
    assert sum(math.prod(c.sizes) for c in q.chunks) == 64
    paths = {info.relative_path for info in metadata.storage_data.values()}
    assert paths == {f"__{r}_0.distcp" for r in range(ranks)}


def test_llama_70b_shape_counts():
    assert len(LLAMA_70B.parameters()) == 723
    # 2,169 sharded tensors x 64 chunks (every dim 0 has >= 64 rows) + 723 steps + 8,676 values
    assert expected_entries(LLAMA_70B, 64) == 2169 * 64 + 723 + 8676


def test_simulated_planning_both_arms_same_plan():
    points = measure_simulated(TINY, 4, rank=1)
    assert [p.arm for p in points] == [STOCK, GCSCKPT]
    for p in points:
        assert p.entries == expected_entries(TINY, 4)
        # 36 DTensor shards + 12 steps + 144 BYTE_IO values
        assert p.items == 36 + 12 + 144
        assert p.metadata_bytes > 0
    rows = scaling_report.simulated_rows(points)
    assert {r.arm for r in rows} == {STOCK, GCSCKPT}


def test_assert_same_names_the_differing_value():
    saved = build_state(6, 64)
    other = build_state(6, 64, seed=2)
    assert_same(build_state(6, 64), saved, "here")
    with pytest.raises(AssertionError, match="here: tensor p0 differs"):
        assert_same(other, saved, "here")


def test_real_points_both_arms_verified(gcs):
    rows = []
    for items in (6, 30):
        for arm in ARMS:
            point = measure_real(gcs.endpoint, BUCKET, f"one/{items}/{arm}", arm, items, 4096)
            assert (point.arm, point.items, point.ranks) == (arm, items, 1)
            assert point.metadata_bytes > 0
            rows.append(scaling_report.real_rows(scaling_report.ITEMS, items, [point]))
    table = scaling_report.axis_table(rows, scaling_report.ITEMS)
    assert table.count("| gcsckpt |") == 2 and table.count("| stock |") == 2
    assert {(axis, arm) for axis, arm, _ in scaling_report.exponents(rows)} == {
        (scaling_report.ITEMS, GCSCKPT),
        (scaling_report.ITEMS, STOCK),
    }


def test_ranks_job_two_processes(gcs):
    launcher = SpawnLauncher(timeout_s=300.0)
    for arm in ARMS:
        job = RanksJob(gcs.endpoint, BUCKET, f"ranks/{arm}", arm, 2, 9, 4096)
        points = launcher.run(job)
        failures = [p.message for p in points if isinstance(p, RankFailure)]
        assert not failures  # a rank whose load differed from its save fails here
        assert [(p.arm, p.ranks, p.items) for p in points] == [(arm, 2, 9)] * 2


def test_png_written(tmp_path):
    rows = [
        scaling_report.Row(
            scaling_report.SIMULATED, x, arm, {"decode": x * 1e-3, "plan": 1e-3}, 10, 0, 100
        )
        for x in (64, 256)
        for arm in (GCSCKPT, STOCK)
    ]
    path = scaling_report.write_png(rows, tmp_path / "scaling.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "simulated ranks" in scaling_report.exponent_table(scaling_report.exponents(rows))
