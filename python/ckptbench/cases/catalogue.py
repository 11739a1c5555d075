"""Benchmark cases: what a load case is, its name, validation, and the YAML catalogue.

A case names a model, a parallel strategy and its sizes. Names are written as the gcsfs
subsystem benchmark's seed writes them, so result rows land beside its rows in one table:
``load-<model slug>-<strategy, '_' -> '-'>[-pp<P>dpr<R>dp<D>tp<T>ep<E>]-ws<N>-<bucket type>``
(only non-unit sizes; none for ``fsdp``), e.g.
``load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16-reg``.
The bucket type is the run's (``BUCKET_TYPES``: ``reg``, ``zon``, ``hns`` from a real bucket's
metadata, ``local`` for the embedded endpoint); the catalogue and the objects' prefixes use the
name without it (``Case.base_name``). Names before this scheme (strategy with ``_``, no bucket
type: ``Case.legacy_name``) are still accepted by ``--cases``, with a deprecation warning.

The catalogue holds one baseline and one-factor variants tagged with a sweep axis (``strategy``,
``model``), and resharded loads (axis ``reshard``): a case with ``saved_from`` loads the
checkpoint saved under that other layout (same model), named ``<name>-from-<saved layout>``,
e.g. ``load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-from-fsdp-ws8``. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ckptbench.workloads.models.configs import (
    ModelSpecError,
    config_dict,
    is_moe,
    parse_model_spec,
    with_scale,
)
from ckptbench.workloads.parallel.dims import SIZE_NAMES, ParallelDims
from ckptbench.workloads.parallel.strategies import LayoutError

AXES = ("baseline", "strategy", "model", "reshard")
DEFAULT_MAX_WORLD_SIZE = 16
CATALOGUE_PATH = Path(__file__).parent / "catalogue.yaml"

_SIZE_TOKENS = (  # name token, case field; in name order
    ("pp", "pipeline_parallel_size"),
    ("dpr", "data_parallel_replicate_size"),
    ("dp", "data_parallel_size"),
    ("tp", "tensor_parallel_size"),
    ("ep", "expert_parallel_size"),
)
_BUCKET_KIND = re.compile(r"^[a-z0-9_]+$")

# Bucket types in case names: regional (flat namespace), zonal, hierarchical namespace, and the
# embedded local endpoint (no real bucket behind it).
BUCKET_TYPES = ("reg", "zon", "hns", "local")


class CaseError(ValueError):
    """A case or catalogue entry is invalid; the message names the case and the field."""


@dataclass(frozen=True)
class SavedLayout:
    """The layout a resharded case's checkpoint was saved under (the case's model, other sizes).

    Attributes:
      strategy, world_size and the mesh sizes: as in :class:`Case` (the YAML's ``saved_from``).
    """

    strategy: str
    world_size: int
    data_parallel_size: int = 1
    data_parallel_replicate_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    expert_parallel_size: int = 1


@dataclass(frozen=True)
class Case:
    """One load case.

    Attributes:
      model: model spec (``llama_3_1_8b``, ``olmoe_1b_7b_0924:scaled``, a config.json path or
        ``gs://`` URI), see ``ckptbench.workloads.models.configs``.
      strategy: one of ``ckptbench.workloads.parallel.strategies.STRATEGY_DIMS``.
      world_size: ranks (processes, one per device).
      data_parallel_size, data_parallel_replicate_size, tensor_parallel_size,
        pipeline_parallel_size, expert_parallel_size: the mesh sizes as the YAML spells them
        (``parallel.dims.SIZE_NAMES``); checked and typed by :attr:`parallel_dims`.
      rounds: timed load rounds. axis: sweep axis (``AXES``).
      bucket_kind: the bucket type the case runs on (``BUCKET_TYPES``; the runner sets the run's),
        the name's last part; ``""``: none yet (catalogue entries).
      saved_from: for a resharded load (axis ``reshard``), the layout the checkpoint was saved
        under; None: saved under the case's own layout.
    """

    model: str
    strategy: str
    world_size: int
    data_parallel_size: int = 1
    data_parallel_replicate_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    expert_parallel_size: int = 1
    rounds: int = 3
    axis: str = "baseline"
    bucket_kind: str = ""
    saved_from: SavedLayout | None = None

    @property
    def model_slug(self) -> str:
        """The model part of the name (scale-independent: scaled runs keep the names)."""
        return parse_model_spec(self.model).key

    @property
    def parallel_dims(self) -> ParallelDims:
        """The case's layout as ``ckptbench.workloads.parallel`` takes it.

        Raises:
          LayoutError: the sizes do not fit the strategy (see ``ParallelDims``).
        """
        return ParallelDims(
            strategy=self.strategy,
            world_size=self.world_size,
            **{dim: getattr(self, field) for dim, field in SIZE_NAMES.items()},
        )

    def _name_parts(self, strategy: str) -> list[str]:
        parts = ["load", self.model_slug, strategy]
        if self.strategy != "fsdp":
            sizes = "".join(
                f"{token}{getattr(self, field)}"
                for token, field in _SIZE_TOKENS
                if getattr(self, field) != 1
            )
            if sizes:
                parts.append(sizes)
        parts.append(f"ws{self.world_size}")
        if self.saved_from is not None:
            parts += ["from", self.saved_layout]
        return parts

    @property
    def saved_layout(self) -> str | None:
        """For a resharded load, the saving layout as the name spells it after ``-from-``
        (``fsdp-ws8``, ``ep-dp8ep8-ws8``); None when saved under the case's own layout."""
        if self.saved_from is None:
            return None
        saved = self.saved_case
        return "-".join(saved._name_parts(saved.strategy.replace("_", "-"))[2:])

    @property
    def saved_case(self) -> Case:
        """The case whose checkpoint this one loads: itself, or for a resharded load the same
        model under ``saved_from`` (its ``base_name`` names the objects, so the catalogue's
        same-layout case and every resharded load from it share one saved checkpoint)."""
        if self.saved_from is None:
            return self
        return dataclasses.replace(self, saved_from=None, **dataclasses.asdict(self.saved_from))

    @property
    def base_name(self) -> str:
        """The name without the bucket type (the catalogue's ``name``; a case's objects are
        those of ``saved_case.base_name``)."""
        return "-".join(self._name_parts(self.strategy.replace("_", "-")))

    @property
    def name(self) -> str:
        """The case name (see the module docstring): ``base_name-<bucket type>`` once set."""
        return f"{self.base_name}-{self.bucket_kind}" if self.bucket_kind else self.base_name

    @property
    def legacy_name(self) -> str:
        """The name before the seed's scheme (strategy with ``_``, no bucket type); deprecated."""
        return "-".join(self._name_parts(self.strategy))


def _label(case: Case) -> str:
    try:
        return case.name
    except Exception:  # a broken spec must not hide the real error behind the label
        return f"{case.model}/{case.strategy}"


def validate_case(case: Case, max_world_size: int = DEFAULT_MAX_WORLD_SIZE) -> Case:
    """Checks a case; returns it unchanged.

    Raises:
      CaseError: unknown model spec or strategy; sizes that do not match the strategy (exactly
        its dims non-unit, product == world_size, expert_parallel_size == data_parallel_size
        for ``ep`` and 1 otherwise); ``ep`` on a dense shipped model; world_size above
        ``max_world_size``; rounds < 1; unknown axis; bad bucket kind; a ``saved_from``
        that is invalid (as a case), equals the case's own layout, or sits on another axis
        than ``reshard`` (and a ``reshard`` case without one).
    """
    label = _label(case)
    try:
        spec = parse_model_spec(case.model)
    except ModelSpecError as err:
        raise CaseError(f"case {label}: model: {err}") from err
    try:
        _ = case.parallel_dims  # its constructor checks the sizes against the strategy
    except LayoutError as err:
        raise CaseError(f"case {label}: {err}") from err
    if case.world_size > max_world_size:
        raise CaseError(
            f"case {label}: world_size {case.world_size} exceeds the maximum {max_world_size}"
        )
    if case.strategy == "ep" and spec.source is None and not is_moe(config_dict(spec)):
        raise CaseError(f"case {label}: strategy 'ep' needs an MoE model, {spec.key} is dense")
    if not isinstance(case.rounds, int) or isinstance(case.rounds, bool) or case.rounds < 1:
        raise CaseError(f"case {label}: rounds must be a positive integer, got {case.rounds!r}")
    if case.axis not in AXES:
        raise CaseError(f"case {label}: axis {case.axis!r} is unknown; known: {', '.join(AXES)}")
    if case.bucket_kind and not _BUCKET_KIND.match(case.bucket_kind):
        raise CaseError(f"case {label}: bucket_kind {case.bucket_kind!r} must match [a-z0-9_]+")
    if (case.saved_from is not None) != (case.axis == "reshard"):
        raise CaseError(
            f"case {label}: saved_from is set exactly on the reshard axis (axis {case.axis!r}, "
            f"saved_from {case.saved_from!r})"
        )
    if case.saved_from is not None:
        saved = case.saved_case
        try:
            validate_case(dataclasses.replace(saved, axis="baseline"), max_world_size)
        except CaseError as err:
            raise CaseError(f"case {label}: saved_from: {err}") from err
        if saved.parallel_dims == dataclasses.replace(case, saved_from=None).parallel_dims:
            raise CaseError(f"case {label}: saved_from is the case's own layout")
    return case


def with_model_scale(case: Case, scale: str) -> Case:
    """The case with its shipped model switched to ``scale`` (``full``, ``scaled``, ``tiny``).

    The name does not change; record the scale next to results.

    Raises:
      CaseError: unknown scale, or a custom config asked for a non-full scale.
    """
    try:
        return dataclasses.replace(case, model=with_scale(case.model, scale))
    except ModelSpecError as err:
        raise CaseError(f"case {_label(case)}: {err}") from err


_CASE_KEYS = {f.name for f in dataclasses.fields(Case)} | {"name"}
_TOP_KEYS = {"max_world_size", "defaults", "cases"}


@dataclass(frozen=True)
class Catalogue:
    """Validated cases, in file order, and the world-size ceiling they were checked against."""

    cases: tuple[Case, ...]
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE

    @property
    def baseline(self) -> Case:
        """The one case on the ``baseline`` axis."""
        return next(c for c in self.cases if c.axis == "baseline")

    def get(self, name: str) -> Case:
        """The case called ``name``. Raises: CaseError (lists the known names)."""
        for case in self.cases:
            if case.name == name:
                return case
        raise CaseError(f"no case named {name!r}; known: {', '.join(c.name for c in self.cases)}")

    def select(self, axes: Iterable[str] | None = None) -> list[Case]:
        """Cases on the given axes plus, always, the baseline (see :func:`select_cases`)."""
        return select_cases(self.cases, axes)


def select_cases(cases: Iterable[Case], axes: Iterable[str] | None = None) -> list[Case]:
    """Cases whose axis is in ``axes``, always including baseline cases; all when ``None``.

    Raises:
      CaseError: an axis not in ``AXES``.
    """
    cases = list(cases)
    if axes is None:
        return cases
    wanted = set(axes)
    unknown = sorted(wanted - set(AXES))
    if unknown:
        raise CaseError(f"unknown sweep axes {unknown}; known: {', '.join(AXES)}")
    return [c for c in cases if c.axis == "baseline" or c.axis in wanted]


def _positive_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CaseError(f"{what} must be a positive integer, got {value!r}")
    return value


def parse_catalogue(
    data: Any, *, source: str = "<catalogue>", model_scale: str | None = None
) -> Catalogue:
    """Builds and validates a catalogue from parsed YAML.

    Layout: ``{max_world_size: int, defaults: {field: value}, cases: [{field: value}, ...]}``;
    case fields are :class:`Case`'s plus an optional ``name`` that must equal the derived name.
    ``model_scale`` switches every shipped model to that scale (one switch for the catalogue).

    Raises:
      CaseError: unknown keys, a missing field, an invalid case, a stated name that differs
        from the derived one, duplicate names, or not exactly one baseline case.
    """
    if not isinstance(data, Mapping):
        raise CaseError(f"{source}: top level must be a mapping")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise CaseError(f"{source}: unknown keys {unknown}; known: {sorted(_TOP_KEYS)}")
    max_ws = _positive_int(
        data.get("max_world_size", DEFAULT_MAX_WORLD_SIZE), f"{source}: max_world_size"
    )
    defaults = data.get("defaults") or {}
    entries = data.get("cases")
    if not isinstance(defaults, Mapping):
        raise CaseError(f"{source}: defaults must be a mapping")
    if not isinstance(entries, list) or not entries:
        raise CaseError(f"{source}: cases must be a non-empty list")
    cases: list[Case] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{source}: cases[{index}]"
        if not isinstance(entry, Mapping):
            raise CaseError(f"{where} must be a mapping")
        fields = {**defaults, **entry}
        unknown = sorted(set(fields) - _CASE_KEYS)
        if unknown:
            raise CaseError(f"{where}: unknown keys {unknown}; known: {sorted(_CASE_KEYS)}")
        stated = fields.pop("name", None)
        try:
            if isinstance(fields.get("saved_from"), Mapping):
                fields["saved_from"] = SavedLayout(**fields["saved_from"])
            case = Case(**fields)
        except TypeError as err:
            raise CaseError(f"{where}: {err}") from err
        if model_scale is not None:
            case = with_model_scale(case, model_scale)
        validate_case(case, max_ws)
        if stated is not None and stated != case.name:
            raise CaseError(f"{where}: name {stated!r} does not match its fields ({case.name!r})")
        if case.name in seen:
            raise CaseError(f"{where}: duplicate case name {case.name!r}")
        seen.add(case.name)
        cases.append(case)
    baselines = [c.name for c in cases if c.axis == "baseline"]
    if len(baselines) != 1:
        raise CaseError(f"{source}: needs exactly one baseline case, found {baselines}")
    return Catalogue(tuple(cases), max_ws)


def load_catalogue(path: str | Path | None = None, *, model_scale: str | None = None) -> Catalogue:
    """Reads and validates a catalogue YAML file (default: the shipped ``catalogue.yaml``).

    Raises:
      CaseError: unreadable file, invalid YAML or an invalid catalogue (see parse_catalogue).
    """
    path = Path(path) if path is not None else CATALOGUE_PATH
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise CaseError(f"cannot read catalogue {path}: {err}") from err
    return parse_catalogue(data, source=str(path), model_scale=model_scale)
