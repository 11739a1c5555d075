"""DCP load planners that count what a load delivered, whatever the StorageReader.

``CountingLoadPlanner`` is torch's ``DefaultLoadPlanner`` (the stock path, used with the stock
FsspecReader); ``CountingGCSLoadPlanner`` is gcsckpt's ``GCSLoadPlanner`` (the gcsckpt path).
``counting_planner_for(reader)`` picks the one each reader's users would run.

Both readers (GCSStorageReader and the stock FsspecReader) hand every tensor item to
``commit_tensor`` and every BYTE_IO item to ``load_bytes``, so counting there gives the same
numbers for both: the rank's read items, the bytes those items occupy in storage (from
``.metadata``), and the tensor bytes actually committed into the state dict, which the runner
checks against the bytes the state dict needs.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem

from ckptbench.roles import CANDIDATES
from gcsckpt.dcp import GCSLoadPlanner

ProgressFn = Callable[[float, float | None], None]

_REPORT_INTERVAL_S = 0.5  # progress messages per rank at most twice a second


class _LoadCounters:
    """Per-load counters mixed into a load planner (one instance per load, as DCP expects).

    Attributes (valid after ``dcp.load`` returns):
      read_items: ReadItems in this rank's final plan (tensor and BYTE_IO).
      bytes_items: BYTE_IO items among them.
      storage_bytes_needed: bytes the plan's items occupy in the checkpoint's objects, from the
        ``.metadata`` storage index (``_StorageInfo.length``); None when the metadata has no
        storage index.
      committed_items: items delivered (``commit_tensor`` + ``load_bytes`` calls).
      committed_tensor_bytes: ``numel * element_size`` summed over committed tensor targets.

    Args:
      progress: optional ``progress(completed_items, total_items)``, called at most every 0.5 s
        and once when the last item is committed.
    """

    def __init__(self, progress: ProgressFn | None = None) -> None:
        super().__init__()
        self._progress = progress
        self._last_report = 0.0
        self.read_items = 0
        self.bytes_items = 0
        self.storage_bytes_needed: int | None = None
        self.committed_items = 0
        self.committed_tensor_bytes = 0

    def finish_plan(self, new_plan: LoadPlan) -> LoadPlan:
        """Records the rank's final plan (after the global step), then returns it unchanged."""
        plan = super().finish_plan(new_plan)
        items: list[ReadItem] = list(plan.items)
        self.read_items = len(items)
        self.bytes_items = sum(1 for item in items if item.type == LoadItemType.BYTE_IO)
        storage = getattr(self.metadata, "storage_data", None)
        if storage:
            self.storage_bytes_needed = sum(storage[item.storage_index].length for item in items)
        self._report(force=True)
        return plan

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        """Counts the committed target's bytes (``tensor`` is the narrowed destination)."""
        super().commit_tensor(read_item, tensor)
        self.committed_items += 1
        self.committed_tensor_bytes += tensor.numel() * tensor.element_size()
        self._report()

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        """Stores the BYTE_IO value as the default planner does, and counts it."""
        super().load_bytes(read_item, value)
        self.committed_items += 1
        self._report()

    def _report(self, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        done = self.committed_items >= self.read_items
        if force or done or now - self._last_report >= _REPORT_INTERVAL_S:
            self._last_report = now
            self._progress(self.committed_items, self.read_items or None)


class CountingLoadPlanner(_LoadCounters, DefaultLoadPlanner):
    """torch's ``DefaultLoadPlanner`` with the counters of ``_LoadCounters``."""


class CountingGCSLoadPlanner(_LoadCounters, GCSLoadPlanner):
    """gcsckpt's ``GCSLoadPlanner`` with the counters of ``_LoadCounters``."""


def counting_planner_for(reader: str, progress: ProgressFn | None = None) -> _LoadCounters:
    """The counting planner for ``reader`` ("gcsckpt" or "fsspec"): each reader runs with the
    planner its users would use, so the comparison is product path against stock path."""
    if reader in CANDIDATES:
        return CountingGCSLoadPlanner(progress=progress)
    return CountingLoadPlanner(progress=progress)
