"""The commit of a DCP save on GCS (`finish`): `.metadata` uploaded last, the clean-up around it.

`complete_metadata` fills in torch's Metadata from every rank's WriteResults (the `_StorageInfo`
of each item, and the block checksum records that rode on them: `gcsckpt.dcp.checksums`).

A save is a checkpoint once its `.metadata` is committed (`SaveObjects.commit`), by
`ObjectStore.upload` with a precondition (the package's one upload-if-absent, which also tells a
retried attempt that landed from another save's object): create-if-absent when not
overwriting, so of two racing saves exactly one wins; replace-at-the-generation-read when
overwriting, after which the objects the replaced `.metadata` named are deleted. A refused or
failed commit deletes this save's objects (best effort), unless its `.metadata` may have landed
and may name them.
"""

from __future__ import annotations

import warnings

from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.storage import WriteResult

from gcsckpt.dcp import checksums
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.io.objects import ObjectStore, ObjectStoreError

# Tries to replace `.metadata` when overwriting while other saves keep replacing it.
_COMMIT_TRIES = 5


class CheckpointExistsError(RuntimeError, FileExistsError):
    """A save was refused because the checkpoint exists and overwrite=False.

    A RuntimeError with torch's wording ("Checkpoint already exists", as FileSystemWriter
    raises it) and a FileExistsError naming the `.metadata` object.
    """


def complete_metadata(
    metadata: Metadata, results: list[list[WriteResult]], storage_meta: StorageMeta
) -> list[str]:
    """Fills in `metadata` (in place) as torch's FileSystemWriter does before it commits it: the
    DCP version, each item's plain `_StorageInfo`, `storage_meta`, and on it the block checksum
    records carried by the results (`checksums.attach`; none when the save computed none).

    Args:
        results: each rank's WriteResults (`write_data`'s), as DCP gathers them.

    Returns:
        the relative paths of the save's data objects, sorted (what a failed commit deletes).
    """
    metadata.version = CURRENT_DCP_VERSION
    storage_data, records = {}, {}
    for rank_results in results:
        for result in rank_results:
            info, record = checksums.strip(result.storage_data)
            storage_data[result.index] = info
            if record is not None:
                records[info.relative_path] = record
    metadata.storage_data = storage_data
    metadata.storage_meta = storage_meta
    if records:
        checksums.attach(storage_meta, records)
    return sorted({info.relative_path for info in storage_data.values()})


class SaveObjects:
    """One save's objects below a checkpoint: its commit and the deletion of objects.

    Args:
        store: the ObjectStore of every request. location: the checkpoint.
    """

    def __init__(self, store: ObjectStore, location: CheckpointLocation) -> None:
        self.store = store
        self.location = location

    def commit(
        self, name: str, body: bytes, *, overwrite: bool, ours: list[str], save_id: str
    ) -> None:
        """Uploads `body` as the checkpoint's metadata object `name` (e.g. `.metadata`).

        Args:
            overwrite: False: create-if-absent; True: replace it, then delete the objects the
                replaced one named (those not in `ours`).
            ours: relative paths of this save's objects (deleted if the commit fails and its
                metadata did not land). save_id: named in the refusal.

        Raises:
            CheckpointExistsError: overwrite=False and another save committed first (this
                save's objects are deleted, best effort). ObjectStoreError (or the error of
                the failed request): the commit failed; a note says what became of `ours`.
        """
        loc, object_name = self.location, self.location.object_name(name)
        try:
            if overwrite:
                replaced = self._replace(object_name, body)
            else:
                self.store.upload(loc.bucket, object_name, body, if_generation_match=0)
                replaced = []
        except FileExistsError:
            raise CheckpointExistsError(
                f"Checkpoint already exists and overwrite=False: {loc.url(name)} was committed "
                f"by another save while this one (save_id {save_id}) ran; " + self.discard(ours)
            ) from None
        except BaseException as exc:
            # A failed conditional upload says whether it landed; for any other failure, ask.
            if hasattr(exc, "landed"):
                landed = exc.landed
            else:
                landed = self.store.landed(loc.bucket, object_name, body)
            if landed is False:
                exc.add_note(self.discard(ours))
            elif landed is None:
                # The upload may have committed: deleting the objects could leave a
                # `.metadata` that names deleted objects.
                exc.add_note(
                    f"could not tell whether {loc.url(name)} landed, so this save's "
                    f"{len(ours)} object(s) were kept"
                )
            raise
        self._delete_stale([path for path in replaced if path not in set(ours)])

    def _replace(self, object_name: str, body: bytes) -> list[str]:
        """Uploads `body` over `object_name` at the generation just read; returns the relative
        paths the replaced metadata named ([] if none, or if it cannot be decoded)."""
        bucket, store = self.location.bucket, self.store
        for _ in range(_COMMIT_TRIES):
            info = store.stat(bucket, object_name)
            previous: list[str] = []
            if info is not None:
                where = f"gs://{bucket}/{object_name}"
                try:
                    old = store.read(bucket, object_name, generation=info.generation)
                    previous = sorted(
                        {
                            i.relative_path
                            for i in load_metadata(old.data, source=where).storage_data.values()
                        }
                    )
                except FileNotFoundError:
                    continue  # replaced or deleted meanwhile: look again
                except ValueError as e:  # undecodable (UnsafeMetadataError is one)
                    warnings.warn(
                        f"overwrite: cannot list the previous checkpoint's objects ({e}); they "
                        "are kept",
                        stacklevel=4,
                    )
            precondition = 0 if info is None else info.generation
            try:
                store.upload(bucket, object_name, body, if_generation_match=precondition)
            except FileExistsError:
                continue  # another save committed between our read and our upload
            return previous
        raise ObjectStoreError(
            f"overwrite of gs://{bucket}/{object_name}: other saves replaced it "
            f"{_COMMIT_TRIES} times while this one tried"
        )

    def _delete(self, relative_paths: list[str]) -> list[str]:
        """Deletes objects below the checkpoint, best effort; returns the failures."""
        loc, failed = self.location, []
        for path in relative_paths:
            try:
                self.store.delete(loc.bucket, loc.object_name(path))
            except OSError as e:
                failed.append(f"{loc.url(path)} ({e})")
        return failed

    def discard(self, relative_paths: list[str]) -> str:
        """Deletes this save's objects (relative paths), best effort; returns what happened,
        for the note on the save's error."""
        failed = self._delete(relative_paths)
        if not failed:
            return f"deleted this save's objects ({len(relative_paths)} name(s), best effort)"
        return (
            f"deleted {len(relative_paths) - len(failed)} of this save's {len(relative_paths)} "
            f"object name(s); could not delete: {'; '.join(failed)}"
        )

    def _delete_stale(self, relative_paths: list[str]) -> None:
        """Deletes the replaced checkpoint's objects; warns about any left behind."""
        failed = self._delete(relative_paths)
        if failed:
            warnings.warn(
                f"overwrite: {len(failed)} object(s) of the previous checkpoint were not "
                f"deleted: {'; '.join(failed)}",
                stacklevel=4,
            )
