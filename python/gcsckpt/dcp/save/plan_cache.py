"""GCSSavePlanner: torch's DefaultSavePlanner with its plan cache on, counted, dtype-checked.

Saves 2..N of one training job have the same layout, so their plans are the same: with
`enable_plan_caching=True` torch keeps each rank's local plan, the global plan and the Metadata
of the first save (class-level, keyed by the planner class), and a later save whose local plans
all compare equal sends empty plans through the gather/scatter and reuses the cached ones. A new
or removed FQN, or a changed shape or chunk, makes a fresh plan. torch's comparison ignores the
dtype, so this planner also treats a changed dtype as a new layout (the cached Metadata would
describe the old one). `plans_reused` counts the saves that reused a cached plan on this rank.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner


def _dtypes(plan: SavePlan) -> list:
    return [i.tensor_data.properties.dtype if i.tensor_data else None for i in plan.items]


class GCSSavePlanner(DefaultSavePlanner):
    """DefaultSavePlanner(enable_plan_caching=True, ...) that also re-plans on a dtype change.

    Use one per training job (any instance shares the class-level cache):
    `dcp.save(sd, storage_writer=GCSStorageWriter(...), planner=GCSSavePlanner())`. Any
    StorageWriter works; GCSStorageWriter names each save's objects itself, so reused plans
    never reuse another save's object names.

    Args:
        *args, **kwargs: DefaultSavePlanner's (flatten_state_dict, flatten_sharded_tensors,
            dedup_replicated_tensors, dedup_save_to_lowest_rank); enable_plan_caching is on
            unless passed as False.

    Attributes:
        plans_reused: saves on this rank that reused the cached local plan (int).
        local_plan_reused: whether the last `create_local_plan` reused it (bool).
    """

    plans_reused = 0  # class-level: one count per process, like torch's cache

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("enable_plan_caching", True)
        super().__init__(*args, **kwargs)
        self.local_plan_reused = False

    def create_local_plan(self) -> SavePlan:
        """The local plan, or the empty "unchanged" plan when it equals the cached one."""
        plan = super().create_local_plan()
        self.local_plan_reused = self._enable_plan_caching and not plan.usable
        if self.local_plan_reused:
            cached = SavePlanner._cached_save_plan[self._cached_plans_key]
            if _dtypes(cached) != _dtypes(self.plan):  # torch's comparison ignores dtypes
                # Sent as a changed plan: the coordinator merges it and makes new Metadata.
                self._pending_local_plan = self.plan
                self.local_plan_reused = False
                return self.plan
            type(self).plans_reused += 1
        return plan
