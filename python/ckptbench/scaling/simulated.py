"""One rank's load planning and ``.metadata`` decode at N simulated ranks: gcsckpt's steps
against stock DCP's, on the synthetic 70B checkpoint of ``synthetic`` (no I/O, one process).

gcsckpt: ``.metadata`` as ``GCSStorageWriter`` commits it (``metadata_index.dump_indexed``: the
pickle, the columnar index, the footer); decode is what ``GCSStorageReader.read_metadata`` does
with the bytes it reads (the footer from the object's last ``TAIL_BYTES``, then
``metadata_index_decode.decode_index`` of the section and ``indexed_metadata``'s lazy Metadata; the
pickle is not read); planning is ``GCSLoadPlanner``'s ``set_up_planner`` + ``create_local_plan``
on it (overlaps on the columns), then the reader's ``storage_entries`` and ``plan_item_ranges``
(TORCH_SAVE items: no blob headers, so no request). Stock: ``pickle.loads`` of the pickle (what
FsspecReader/FileSystemReader do with ``.metadata``), ``DefaultLoadPlanner``'s
``set_up_planner`` + ``create_local_plan``. Process CPU seconds of each step, one round per
point (a point at 1,024 ranks is ~2 million storage entries). Figures: docs/measurements.md,
"Scaling".
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
from gcsckpt.dcp.indexed_metadata import indexed_metadata
from gcsckpt.dcp.load.load_errors import LoadErrors
from gcsckpt.dcp.load.metadata_read import TAIL_BYTES
from gcsckpt.dcp.load.plan import plan_item_ranges, storage_entries
from gcsckpt.dcp.metadata_index import FOOTER, dump_indexed, parse_footer
from gcsckpt.dcp.metadata_index_decode import decode_index
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
      metadata_bytes: ``.metadata`` bytes the arm's rank reads: stock the pickle; gcsckpt the
        index section and footer (its object also holds the pickle, ``pickle_bytes``).
      items: ReadItems of the rank's plan.
      decode_s: CPU seconds to decode ``.metadata``.
      plan_s: CPU seconds of the rank's planning (set-up, local plan, gcsckpt's fetch plan).
    """

    arm: str
    ranks: int
    entries: int
    metadata_bytes: int
    items: int
    decode_s: float
    plan_s: float
    pickle_bytes: int = 0

    @property
    def total_s(self) -> float:
        """decode + plan, CPU seconds."""
        return self.decode_s + self.plan_s


def _cpu(fn):
    began = time.process_time()
    value = fn()
    return value, time.process_time() - began


def _stock(payload: memoryview, state: dict) -> tuple[int, float, float]:
    metadata, decode = _cpu(lambda: pickle.loads(payload))
    planner = DefaultLoadPlanner()

    def plan():
        planner.set_up_planner(state, metadata, False)
        return planner.create_local_plan()

    local, plan_s = _cpu(plan)
    return len(local.items), decode, plan_s


def _read_index(data: bytes, source: str):
    """What the reader does with the bytes it GETs: the footer from the tail, the section."""
    footer = parse_footer(data[-TAIL_BYTES:], source=source)
    start = footer.section_offset
    section = memoryview(data)[start : start + footer.section_length]
    return indexed_metadata(decode_index(section, footer, source=source))


def _gcsckpt(data: bytes, state: dict, rank: int) -> tuple[int, float, float]:
    source = "gs://scaling/sim/.metadata (generation 1)"
    metadata, decode = _cpu(lambda: _read_index(data, source))
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


def measure_simulated(
    shape: ModelShape, ranks: int, rank: int = 1, arms: tuple[str, ...] = (STOCK, GCSCKPT)
) -> list[SimulatedPoint]:
    """The arms' decode and planning for rank ``rank`` of ``ranks`` (in ``arms``' order, each on
    its own decoded copy). Joins and leaves a fake process group.

    Raises:
      ValueError: ``rank`` is not below ``ranks``, or an arm is unknown.
    """
    if not 0 <= rank < ranks:
        raise ValueError(f"rank {rank} is not in a world of {ranks}")
    if not set(arms) <= {STOCK, GCSCKPT}:
        raise ValueError(f"unknown arms {arms}")
    metadata = synthetic_metadata(shape, ranks)
    entries = len(metadata.storage_data)
    data = dump_indexed(metadata)  # the pickle, then the index: one buffer for both arms
    del metadata
    footer = parse_footer(data, source="synthetic")
    pickle_bytes = footer.section_offset
    read = {STOCK: pickle_bytes, GCSCKPT: footer.section_length + FOOTER.size}
    join_fake_world(rank, ranks)
    try:
        state = rank_state_dict(shape, rank, ranks)
        run = {
            STOCK: lambda: _stock(memoryview(data)[:pickle_bytes], state),
            GCSCKPT: lambda: _gcsckpt(data, state, rank),
        }
        points = []
        for arm in arms:
            gc.collect()
            items, decode, plan_s = run[arm]()
            points.append(
                SimulatedPoint(arm, ranks, entries, read[arm], items, decode, plan_s, pickle_bytes)
            )
        return points
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()
