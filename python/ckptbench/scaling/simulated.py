"""One rank's load planning and ``.metadata`` decode at N simulated ranks: gcsckpt's steps
against stock DCP's, on the synthetic 70B checkpoint of ``synthetic`` (no I/O, one process).

gcsckpt: ``metadata_codec.load_metadata`` (allow-listed unpickle and checks), ``GCSLoadPlanner``'s
``set_up_planner`` + ``create_local_plan``, then the reader's ``storage_entries`` and
``plan_item_ranges`` (TORCH_SAVE items: no blob headers, so no request). Stock: ``pickle.loads``
(what FsspecReader/FileSystemReader do with ``.metadata``), ``DefaultLoadPlanner``'s
``set_up_planner`` + ``create_local_plan``. Process CPU seconds of each step, one round per point (a
point at 1,024 ranks is ~2 million storage entries).
"""

from __future__ import annotations

import dataclasses
import gc
import pickle
import time

from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from ckptbench.scaling.synthetic import (
    ModelShape,
    join_fake_world,
    rank_state_dict,
    synthetic_metadata,
)
from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.plan import plan_item_ranges, storage_entries
from gcsckpt.dcp.metadata_codec import dump_metadata, load_metadata
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.dcp.planner import GCSLoadPlanner

GCSCKPT, STOCK = "gcsckpt", "stock"


@dataclasses.dataclass(frozen=True)
class SimulatedPoint:
    """One arm at one simulated world size.

    Attributes:
      arm: ``gcsckpt`` or ``stock``.
      ranks: simulated world size.
      entries: storage entries in ``.metadata``.
      metadata_bytes: size of the pickled ``.metadata``.
      items: ReadItems of the rank's plan.
      decode_s: CPU seconds to decode ``.metadata``.
      plan_s: CPU seconds of the rank's planning (set-up, local plan, gcsckpt's item-range plan).
    """

    arm: str
    ranks: int
    entries: int
    metadata_bytes: int
    items: int
    decode_s: float
    plan_s: float

    @property
    def total_s(self) -> float:
        """decode + plan, CPU seconds."""
        return self.decode_s + self.plan_s


def _cpu(fn):
    began = time.process_time()
    value = fn()
    return value, time.process_time() - began


def _stock(payload: bytes, state: dict) -> tuple[int, float, float]:
    metadata, decode = _cpu(lambda: pickle.loads(payload))
    planner = DefaultLoadPlanner()

    def plan():
        planner.set_up_planner(state, metadata, False)
        return planner.create_local_plan()

    local, plan_s = _cpu(plan)
    return len(local.items), decode, plan_s


def _gcsckpt(payload: bytes, state: dict, rank: int) -> tuple[int, float, float]:
    source = "gs://scaling/sim/.metadata"
    metadata, decode = _cpu(lambda: load_metadata(payload, source=source))
    planner = GCSLoadPlanner(compact_plans=False)  # the same plan, returned whole
    errors = LoadErrors(CheckpointLocation("scaling", "sim"), rank)

    def plan():
        planner.set_up_planner(state, metadata, False)
        items = planner.create_local_plan().items
        infos = storage_entries(items, metadata.storage_data, errors)
        plan_item_ranges(items, metadata, planner.resolve_tensor, None, errors, infos)
        return items

    items, plan_s = _cpu(plan)
    return len(items), decode, plan_s


def measure_simulated(shape: ModelShape, ranks: int, rank: int = 1) -> list[SimulatedPoint]:
    """Both arms' decode and planning for rank ``rank`` of ``ranks`` (stock first, then gcsckpt,
    each on its own decoded copy). Joins and leaves a fake process group.

    Raises:
      ValueError: ``rank`` is not below ``ranks``.
    """
    if not 0 <= rank < ranks:
        raise ValueError(f"rank {rank} is not in a world of {ranks}")
    metadata = synthetic_metadata(shape, ranks)
    entries = len(metadata.storage_data)
    payload = dump_metadata(metadata)
    del metadata
    join_fake_world(rank, ranks)
    try:
        state = rank_state_dict(shape, rank, ranks)
        points = []
        for arm, run in ((STOCK, lambda: _stock(payload, state)),
                         (GCSCKPT, lambda: _gcsckpt(payload, state, rank))):  # fmt: skip
            gc.collect()
            items, decode, plan_s = run()
            points.append(SimulatedPoint(arm, ranks, entries, len(payload), items, decode, plan_s))
        return points
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()
