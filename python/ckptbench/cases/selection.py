"""Which cases a run loads: catalogue, sweep axes, name globs, world-size override, model scale."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import warnings
from collections.abc import Sequence

from ckptbench.cases.catalogue import (
    BUCKET_TYPES,
    Case,
    CaseError,
    load_catalogue,
    validate_case,
)
from ckptbench.workloads.parallel.dims import SIZE_NAMES
from ckptbench.workloads.parallel.strategies import STRATEGY_DIMS


def override_world_size(case: Case, world_size: int) -> Case:
    """The case resized to ``world_size`` ranks; its name follows (e.g. ``-ws4``).

    At one rank, every size is 1 (the whole model on one device). Otherwise the ``dp_shard``
    size absorbs the change when the strategy has one (EP follows it), and a strategy with a
    single other dim (``tp``, ``pp``) sets that dim to ``world_size``. A resharded load is
    resized in its load layout only (its ``saved_from`` stays).

    Raises:
      CaseError: the other dims do not divide ``world_size``, the strategy has several dims and
        no ``dp_shard``, or the resized case is invalid.
    """
    dims = STRATEGY_DIMS[case.strategy]
    if world_size < 1:
        raise CaseError(f"--world_size_override must be >= 1, got {world_size}")
    if world_size == 1:  # one rank holds the whole model (e.g. a single GPU)
        changes = {field: 1 for field in SIZE_NAMES.values()}
    elif "dp_shard" in dims:
        others = math.prod(getattr(case, SIZE_NAMES[d]) for d in dims if d != "dp_shard")
        if world_size % others or world_size // others < 2:
            raise CaseError(
                f"case {case.name}: world size {world_size} is not a multiple >= 2 of its other "
                f"parallel sizes ({others})"
            )
        changes = {"data_parallel_size": world_size // others}
        if case.strategy == "ep":
            changes["expert_parallel_size"] = world_size // others
    elif len(dims) == 1:
        changes = {SIZE_NAMES[dims[0]]: world_size}
    else:
        raise CaseError(f"case {case.name}: cannot resize strategy {case.strategy!r}")
    resized = dataclasses.replace(case, world_size=world_size, **changes)
    # A resharded load keeps its saving layout (the checkpoint it reads).
    return validate_case(resized, max_world_size=max(world_size, resized.saved_case.world_size))


def _matching(cases: Sequence[Case], pattern: str) -> list[Case]:
    """The cases ``pattern`` selects: by name or base name, else (deprecated) by legacy name.

    Raises:
      CaseError: the pattern matches no case (the message lists the names there are).
    """
    hits = [
        c
        for c in cases
        if fnmatch.fnmatchcase(c.name, pattern) or fnmatch.fnmatchcase(c.base_name, pattern)
    ]
    if hits:
        return hits
    hits = [c for c in cases if fnmatch.fnmatchcase(c.legacy_name, pattern)]
    if not hits:
        raise CaseError(
            f"--cases {pattern!r} matches no case on the selected axes; "
            f"cases there: {', '.join(c.name for c in cases)}"
        )
    warnings.warn(
        f"--cases {pattern!r} uses the old case names (strategy with '_', no bucket type), "
        f"which are deprecated; it selects {', '.join(c.name for c in hits)}",
        FutureWarning,
        stacklevel=3,
    )
    return hits


def select_run_cases(
    catalogue_path: str | None,
    *,
    patterns: Sequence[str] = (),
    axes: Sequence[str] | None = None,
    model_scale: str = "scaled",
    world_size_override: int | None = None,
    bucket_type: str = "",
) -> list[Case]:
    """The run's cases, in catalogue order, named for the run's bucket type.

    Args:
      catalogue_path: YAML catalogue; None for the shipped one.
      patterns: case names or shell globs (``load-olmoe*``), matched against the catalogue's
        names (before any world-size override), with or without the bucket type; empty: every
        case on the axes. A pattern that matches only old-style names (``Case.legacy_name``)
        selects those cases and warns (FutureWarning) with their new names.
      axes: sweep axes (the baseline case is always on them, see ``cases.select_cases``);
        None: all axes.
      model_scale: ``full``, ``scaled`` or ``tiny`` for every shipped model.
      world_size_override: resize every selected case to this many ranks.
      bucket_type: the run's bucket type (``catalogue.BUCKET_TYPES``), the names' last part;
        ``""``: names without it.

    Raises:
      CaseError: an invalid catalogue, axis or override, or a pattern that matches no case on
        the selected axes (the message lists the names there are).
    """
    catalogue = load_catalogue(catalogue_path, model_scale=model_scale)
    chosen = catalogue.select(axes)
    if bucket_type:
        if bucket_type not in BUCKET_TYPES:
            raise CaseError(f"bucket type {bucket_type!r} is unknown; known: {BUCKET_TYPES}")
        chosen = [dataclasses.replace(c, bucket_kind=bucket_type) for c in chosen]
    if patterns:
        picked: set[str] = set()
        for pattern in patterns:
            picked.update(c.name for c in _matching(chosen, pattern))
        chosen = [c for c in chosen if c.name in picked]
    if world_size_override is not None:
        chosen = [override_world_size(c, world_size_override) for c in chosen]
    return chosen
