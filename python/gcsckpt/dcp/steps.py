"""A run's checkpoints: the `step-N` folders under a root, which are complete, and their deletion.

A run keeps each checkpoint under `gs://bucket/run/step-N/` (`step_url`). One listing of
`run/step-` (`ObjectStore.list_objects`) gives every step's objects; a step is **committed** when
its `.metadata` exists (our writer and torch's upload it last) and **complete** when, in
addition, every object its `.metadata` names (decoded by the restricted unpickler,
`metadata_codec`) is present and at least as long as the end of its last recorded item, so a
truncated `.distcp` makes its step incomplete even though `.metadata` exists. Only `step-N/`
folders directly below the root count: `gs://b/run2` and `gs://b/run/sub/step-N` are other runs.

Deleting a step (`delete_step`) removes `.metadata` first, so a step cut short while being deleted
never lists as committed, then every other object of the folder. `unnamed_data_objects` finds the
`.distcp` objects no committed `.metadata` names (what failed or killed saves leave behind).

Used by `GCSCheckpointer` (steps, load, retention), the command line (`python -m gcsckpt`) and the
benchmark's cold restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gcsckpt.dcp.metadata_codec import UnsafeMetadataError, load_metadata
from gcsckpt.dcp.paths import METADATA_NAME, CheckpointLocation, parse_checkpoint_id
from gcsckpt.io.objects import ObjectInfo, ObjectStore

STEP_FOLDER = "step-"
_STEP = re.compile(r"^step-(\d+)/(.+)$")
DATA_SUFFIX = ".distcp"


@dataclass(frozen=True)
class StepInfo:
    """One `step-N` folder of a run.

    Attributes:
        step: N.
        url: `gs://bucket/run/step-N`.
        objects: the folder's objects (ObjectInfo: name, size in bytes, generation, updated).
        committed: its `.metadata` exists.
        complete: committed, and every object `.metadata` names is present with its size.
        problem: why it is not complete ("" when it is), naming the object at fault.
        named: relative paths `.metadata` names (empty when not committed or unreadable).
    """

    step: int
    url: str
    objects: tuple[ObjectInfo, ...]
    committed: bool
    complete: bool
    problem: str = ""
    named: frozenset[str] = field(default_factory=frozenset)

    @property
    def bytes(self) -> int:
        """Bytes stored in the folder (every object)."""
        return sum(info.size for info in self.objects)

    @property
    def updated(self) -> float | None:
        """The newest object's last write, seconds since the epoch (None: not reported)."""
        times = [info.updated for info in self.objects if info.updated is not None]
        return max(times) if times else None


def parse_root(root: str) -> CheckpointLocation:
    """The run's root `gs://bucket[/prefix]` (the one gs:// parser, `paths.parse_checkpoint_id`).

    Raises:
        ValueError: not a valid gs:// URL; the message quotes it.
    """
    return parse_checkpoint_id(root)


def step_url(root: str | CheckpointLocation, step: int) -> str:
    """`gs://bucket/run/step-N` of step `step` (a non-negative int) under `root`.

    Raises:
        ValueError: a negative or non-int step, or a bad root.
    """
    if type(step) is not int or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    location = parse_root(root) if isinstance(root, str) else root
    return location.url(f"{STEP_FOLDER}{step}")


def _folder_prefix(location: CheckpointLocation) -> str:
    return f"{location.prefix}/" if location.prefix else ""


def group_by_step(names: Iterable[str], prefix: str) -> dict[int, list[str]]:
    """{N: relative names inside `step-N/`} of the object names directly below `prefix`'s
    `step-N/` folders; other names are ignored.

    Args:
        names: object names (`<prefix>/step-<N>/<object>`).
        prefix: the run's folder, no leading or trailing slash ("" for the bucket's top).
    """
    head = f"{prefix}/" if prefix else ""
    found: dict[int, list[str]] = {}
    for name in names:
        match = _STEP.match(name[len(head) :]) if name.startswith(head) else None
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(2))
    return found


def committed_steps(names: Iterable[str], prefix: str) -> tuple[list[int], list[int]]:
    """(committed, uncommitted) step numbers, ascending, from object names alone (no reads):
    committed when `step-N/.metadata` is among them. For listings made with another client
    (e.g. gcsfs); `list_steps` also checks every object `.metadata` names.
    """
    found = group_by_step(names, prefix)
    committed = sorted(s for s, rel in found.items() if METADATA_NAME in rel)
    return committed, sorted(s for s in found if s not in committed)


def check_step(
    store: ObjectStore, location: CheckpointLocation, step: int, objects: list[ObjectInfo]
) -> StepInfo:
    """Reads step `step`'s `.metadata` (if listed) and checks the objects it names.

    Args:
        objects: the step folder's objects, from one listing.

    Never raises for a bad step: an unreadable `.metadata` or a missing or short object makes
    it incomplete, with `problem` naming the object. Raises what `ObjectStore.read` raises for
    an endpoint failure (ObjectStoreError).
    """
    url = step_url(location, step)
    folder = f"{_folder_prefix(location)}{STEP_FOLDER}{step}/"
    sizes = {info.name[len(folder) :]: info.size for info in objects}
    base = dict(step=step, url=url, objects=tuple(objects))
    if METADATA_NAME not in sizes:
        return StepInfo(**base, committed=False, complete=False, problem="no .metadata")
    source = f"{url}/{METADATA_NAME}"
    try:
        data = store.read(location.bucket, folder + METADATA_NAME).data
    except FileNotFoundError:  # deleted since the listing
        return StepInfo(**base, committed=False, complete=False, problem="no .metadata")
    try:
        metadata = load_metadata(data, source=source)
    except (ValueError, UnsafeMetadataError) as exc:
        return StepInfo(**base, committed=True, complete=False, problem=str(exc))
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    named = frozenset(needed)
    for path in sorted(needed):
        if path not in sizes:
            problem = f"{url}/{path} is missing (named by {METADATA_NAME})"
            return StepInfo(**base, committed=True, complete=False, problem=problem, named=named)
        if sizes[path] < needed[path]:
            problem = (
                f"{url}/{path} holds {sizes[path]} bytes, {METADATA_NAME} records"
                f" {needed[path]} (truncated)"
            )
            return StepInfo(**base, committed=True, complete=False, problem=problem, named=named)
    return StepInfo(**base, committed=True, complete=True, named=named)


def list_steps(store: ObjectStore, root: str | CheckpointLocation) -> list[StepInfo]:
    """Every `step-N` folder under `root`, newest first, each checked (`check_step`): one LIST,
    then one GET of each committed step's `.metadata`.

    Raises:
        ValueError: a bad root. ObjectStoreError / FileNotFoundError (no such bucket): the
            listing or a read failed.
    """
    location = parse_root(root) if isinstance(root, str) else root
    head = _folder_prefix(location)
    listing = store.list_objects(location.bucket, f"{head}{STEP_FOLDER}")
    per_step: dict[int, list[ObjectInfo]] = {}
    for info in listing:
        match = _STEP.match(info.name[len(head) :])
        if match:
            per_step.setdefault(int(match.group(1)), []).append(info)
    return [
        check_step(store, location, step, per_step[step]) for step in sorted(per_step, reverse=True)
    ]


def complete_steps(store: ObjectStore, root: str | CheckpointLocation) -> list[int]:
    """The complete steps under `root`, newest first (see `list_steps`)."""
    return [info.step for info in list_steps(store, root) if info.complete]


def delete_step(store: ObjectStore, info: StepInfo) -> int:
    """Deletes step `info.step`: `.metadata` first (so it never lists as committed again), then
    every other object of the folder as listed. Objects already gone are fine.

    Returns:
        the objects deleted.

    Raises:
        ObjectStoreError: a delete failed (the message names the object); what was deleted
            before stays deleted, and a later call finishes the job.
    """
    location = parse_root(info.url)
    bucket = location.bucket
    metadata = location.object_name(METADATA_NAME)
    names = [obj.name for obj in info.objects]
    if metadata in names:
        store.delete(bucket, metadata)
    rest = [name for name in names if name != metadata]
    for name in rest:
        store.delete(bucket, name)
    return len(names)


def retention_plan(
    steps: list[StepInfo],
    *,
    keep_latest: int | None,
    keep_every: int | None,
    protected: Iterable[int] = (),
) -> list[StepInfo]:
    """The steps to delete, newest first: every step older than the newest complete one that is
    neither among the `keep_latest` newest complete steps, nor a multiple of `keep_every`, nor
    `protected` (being written or loaded). Nothing newer than the newest complete step is ever
    deleted (it may be a save in flight), and nothing at all without a complete step.

    Args:
        steps: `list_steps`' answer. keep_latest: K >= 1, or None (keep every step).
        keep_every: M >= 1: steps with N % M == 0 are kept for good; None: none.
    """
    if keep_latest is None:
        return []
    complete = [info.step for info in steps if info.complete]
    if not complete:
        return []
    keep = set(complete[:keep_latest]) | set(protected)
    newest = complete[0]
    return [
        info
        for info in steps
        if info.step < newest
        and info.step not in keep
        and not (keep_every and info.step % keep_every == 0 and info.complete)
    ]


def unnamed_data_objects(steps: list[StepInfo]) -> list[ObjectInfo]:
    """`.distcp` objects of committed steps that their `.metadata` does not name, and those of
    uncommitted steps older than the newest committed one (what failed saves leave behind).
    Uncommitted steps newer than every committed one may be saves in flight: never listed."""
    committed = [info.step for info in steps if info.committed]
    newest = max(committed) if committed else None
    found = []
    for info in steps:
        if not info.committed and (newest is None or info.step > newest):
            continue
        if info.committed and not info.named and not info.complete:
            continue  # unreadable .metadata: what it names is unknown, keep everything
        folder = parse_root(info.url).object_name("")
        for obj in info.objects:
            rel = obj.name[len(folder) :]
            if rel.endswith(DATA_SUFFIX) and rel not in info.named:
                found.append(obj)
    return found
