"""One generation per object per load: which version of each object a load reads, fixed up front.

In: the generation `.metadata` was read at, one listing of the checkpoint prefix (name, size,
generation of each object directly below it) and the relative paths a rank reads. Out: `Pins`,
the generation of every data object the load reads (handed to `ranges.CheckpointRanges`, which
sends it on every GET of that object) and its size (for `extents`), or a CheckpointReadError
"object changed during load" before any data GET: a data object newer than `.metadata`
(rewritten after the commit, since our writer and torch's write `.metadata` last) or a
`.metadata` that changed since a rank read it.

Why: a load must never combine bytes of two versions. This relies on generations ordered by
write time across objects: documented per object on GCS, observed across objects, exact on
LocalGCS (one counter). A checkpoint copied object by object loses that order: load it with
`check_commit_order=False`. An endpoint without generations pins nothing; without a listing
each object is pinned at the generation its first read names (`ranges`). The full statement:
docs/design.md, "Integrity guarantees".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from gcsckpt.dcp.load.load_errors import CheckpointReadError, LoadErrors
from gcsckpt.io.objects import ObjectInfo


class Pins(NamedTuple):
    """The versions one load reads (travels to every rank inside its LoadPlan's storage_data).

    metadata_generation: `.metadata`'s generation as the listing showed it (None: unknown).
    objects: relative path -> generation, for each data object whose generation is known.
    sizes: relative path -> size in bytes, for each data object the listing showed.
    """

    metadata_generation: int | None
    objects: dict[str, int]
    sizes: Mapping[str, int] = {}  # noqa: RUF012 (never mutated; a NamedTuple default)

    def only(self, paths: Iterable[str]) -> Pins:
        """These pins restricted to `paths` (what one rank reads)."""
        paths = set(paths)
        objects, sizes = self.objects, self.sizes
        return Pins(
            self.metadata_generation,
            {p: objects[p] for p in paths if p in objects},
            {p: sizes[p] for p in paths if p in sizes},
        )


def pin_generations(
    listing: Iterable[ObjectInfo],
    object_prefix: str,
    metadata_name: str,
    metadata_generation: int | None,
    paths: Iterable[str],
    errors: LoadErrors,
    *,
    check_commit_order: bool = True,
) -> Pins:
    """Pins of the data objects at `paths` from one listing of the checkpoint prefix.

    Args:
        listing: the objects below the prefix (`ObjectStore.list_objects`).
        object_prefix: the prefix their names start with ("" or "dir/"), stripped to get
            relative paths.
        metadata_name: the metadata object's relative name (`.metadata` or `__{r}.metadata`).
        metadata_generation: the generation this rank read `.metadata` at (None: unknown).
        paths: relative paths of the data objects the load reads. One missing from the
            listing is not pinned and has no size (its GET answers 404, reported as a missing
            object).
        check_commit_order: fail on data objects newer than `.metadata` (see module doc).

    Raises:
        CheckpointReadError: "object changed during load" for `.metadata` (the listing shows
            another generation than was read) or for the first data object newer than it.
    """
    listing = [info for info in listing if info.name.startswith(object_prefix)]
    listed = {info.name[len(object_prefix) :]: info.generation for info in listing}
    listed_metadata = listed.get(metadata_name)
    if metadata_generation is not None and (
        metadata_name not in listed  # deleted since it was read
        or listed_metadata not in (None, metadata_generation)  # None: the listing names none
    ):
        raise changed(
            errors,
            metadata_name,
            metadata_generation,
            listed_metadata,
            "replaced after it was read",
        )
    if listed_metadata is None:
        listed_metadata = metadata_generation
    wanted = set(paths)
    objects = {p: listed[p] for p in sorted(wanted) if listed.get(p) is not None}
    if check_commit_order and listed_metadata is not None:
        for path, generation in objects.items():
            if generation > listed_metadata:
                raise changed(
                    errors,
                    path,
                    None,
                    generation,
                    f"was written after {metadata_name} (generation {listed_metadata}); a"
                    " checkpoint copied object by object (gcloud storage cp -r, rsync) is in"
                    " another order: load it with GCSStorageReader(...,"
                    " check_commit_order=False)",
                )
    sizes = {
        path: info.size for info in listing if (path := info.name[len(object_prefix) :]) in wanted
    }
    return Pins(listed_metadata, objects, sizes)


def check_metadata_read(
    pins: Pins, metadata_name: str, read_generation: int | None, errors: LoadErrors
) -> None:
    """Fails when this rank read `.metadata` at another generation than the pinned one.

    Raises:
        CheckpointReadError: "object changed during load" naming both generations.
    """
    pinned = pins.metadata_generation
    if pinned is not None and read_generation is not None and pinned != read_generation:
        raise changed(
            errors, metadata_name, pinned, read_generation, "replaced while ranks read it"
        )


def changed(
    errors: LoadErrors, path: str, pinned: int | None, seen: int | None, when: str
) -> CheckpointReadError:
    """The "object changed during load" error for relative object `path`.

    Args:
        pinned: the generation the load read or pinned (None: `path` was never read).
        seen: the generation found instead (None: the object is gone).
        when: how the change is known, e.g. "was written after .metadata (generation 7)".
    """
    now = f"generation {seen}" if seen is not None else "no object"
    if pinned is None:
        text = f"object changed during load: {now} {when}"
    else:
        text = f"object changed during load: read at generation {pinned}, now {now} ({when})"
    return errors.at(path, 0, 0, text)
