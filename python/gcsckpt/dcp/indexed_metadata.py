"""A DCP Metadata read from `.metadata`'s columnar index (`metadata_index`), built lazily.

`indexed_metadata(columns)` returns a torch `Metadata` whose `state_dict_metadata` and
`storage_data` are read-only Mappings over the columns: an entry's `TensorStorageMetadata`,
`MetadataIndex` or `_StorageInfo` is made when it is asked for (and kept), so torch's
DefaultLoadPlanner and every other reader of Metadata work unchanged, at about the pickle's
cost per entry they touch and none for the others. Pickling or copying a view gives a plain
dict (all entries made).

gcsckpt's own load path asks the columns directly (`index_of(metadata)`): `read_items` makes
the ReadItems torch's `create_read_items_for_chunk_list` makes (equal, in its order), finding
the saved chunks that meet a local chunk by one numpy comparison where torch compares chunk
objects pair by pair; `storage_row`, `chunk_of` and `relative_paths` answer by row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from gcsckpt.dcp.metadata_index import KIND_BYTES, MetadataColumns


class IndexedColumns:
    """Lookups over a decoded index (`metadata_index.MetadataColumns`); see module doc."""

    def __init__(self, columns: MetadataColumns) -> None:
        self.columns = columns
        a = columns.arrays
        self._kind = a["fqn_kind"]
        self._ndim = a["fqn_ndim"].tolist()
        self._chunks = a["fqn_chunks"].tolist()
        self._chunk_start = columns.chunk_start.tolist()
        self._dims_start = columns.dims_start.tolist()
        self._size_start = columns.size_start.tolist()
        # Chunk boxes may be stored as int32 (`metadata_index`): sums are taken in int64.
        self._offsets, self._sizes = a["chunk_offsets"], a["chunk_sizes"]
        self._chunk_storage, self._fqn_storage = a["chunk_storage"], a["fqn_storage"]
        self._size = a["size"]

    # -- per FQN -------------------------------------------------------------------------------
    def row(self, fqn: str) -> int | None:
        """The FQN's row, None if the checkpoint has no such FQN."""
        return self.columns.fqn_row.get(fqn)

    def is_bytes(self, row: int) -> bool:
        """True when FQN row `row` is a BYTE_IO entry."""
        return bool(self._kind[row] == KIND_BYTES)

    def size(self, row: int) -> torch.Size:
        """The global size of tensor row `row`."""
        start = self._size_start[row]
        return torch.Size(self._size[start : start + self._ndim[row]].tolist())

    def dtype(self, row: int) -> torch.dtype:
        """The dtype of tensor row `row`."""
        return self.columns.dtypes[int(self.columns.arrays["fqn_dtype"][row])]

    def boxes(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, sizes) of tensor row `row`'s saved chunks: int64 arrays (chunks, ndim)."""
        start, count, d = self._dims_start[row], self._chunks[row], self._ndim[row]
        end = start + count * d
        return (
            self._offsets[start:end].astype(np.int64).reshape(count, d),
            self._sizes[start:end].astype(np.int64).reshape(count, d),
        )

    def storage_metadata(self, row: int) -> TensorStorageMetadata | BytesStorageMetadata:
        """The entry of state_dict_metadata at FQN row `row`, made anew."""
        if self._kind[row] == KIND_BYTES:
            return BytesStorageMetadata()
        c = self.columns
        a = c.arrays
        flags = int(a["fqn_flags"][row])
        props = TensorProperties(
            dtype=c.dtypes[int(a["fqn_dtype"][row])],
            layout=c.layouts[int(a["fqn_layout"][row])],
            requires_grad=bool(flags & 1),
            memory_format=c.memory_formats[int(a["fqn_memory_format"][row])],
            pin_memory=bool(flags & 2),
        )
        offsets, sizes = self.boxes(row)
        size = torch.Size
        chunks = [
            ChunkStorageMetadata(offsets=size(o), sizes=size(s))
            for o, s in zip(offsets.tolist(), sizes.tolist(), strict=True)
        ]
        return TensorStorageMetadata(properties=props, size=self.size(row), chunks=chunks)

    # -- storage -------------------------------------------------------------------------------
    def _chunk_position(self, row: int, offset: Sequence[int], hint: int | None) -> int:
        """The position among row `row`'s chunks of the one at `offset`, -1 if none."""
        count, d = self._chunks[row], self._ndim[row]
        if len(offset) != d:
            return -1
        start = self._dims_start[row]
        if hint is not None and 0 <= hint < count:
            at = start + hint * d
            if self._offsets[at : at + d].tolist() == list(offset):
                return hint
        offsets, _ = self.boxes(row)
        found = np.flatnonzero((offsets == np.asarray(offset, np.int64)).all(axis=1))
        return int(found[0]) if found.size else -1

    def storage_row(self, index: MetadataIndex) -> int:
        """The storage row of `index` (as storage_data[index] finds it), -1 if none."""
        row = self.columns.fqn_row.get(index.fqn)
        if row is None:
            return -1
        if index.offset is None:
            return int(self._fqn_storage[row])
        position = self._chunk_position(row, index.offset, index.index)
        if position < 0:
            return -1
        return int(self._chunk_storage[self._chunk_start[row] + position])

    def storage_info(self, srow: int) -> _StorageInfo:
        """The `_StorageInfo` of storage row `srow`, made anew."""
        c = self.columns
        a = c.arrays
        info = _StorageInfo(
            c.paths[int(a["st_path"][srow])], int(a["st_offset"][srow]), int(a["st_length"][srow])
        )
        desc = int(a["st_descriptors"][srow])
        if desc >= 0:
            value = c.descriptors[desc]
            info.transform_descriptors = list(value) if type(value) is list else value
        return info

    def storage_key(self, srow: int) -> MetadataIndex:
        """The MetadataIndex key of storage row `srow`, made anew."""
        a = self.columns.arrays
        fqn_row = int(a["st_fqn"][srow])
        fqn = self.columns.fqns[fqn_row]
        index = None if a["st_flags"][srow] & 1 else int(a["st_index"][srow])
        chunk = int(a["st_chunk"][srow])
        if chunk < 0:
            return MetadataIndex(fqn, None, index)
        d = self._ndim[fqn_row]
        at = self._dims_start[fqn_row] + (chunk - self._chunk_start[fqn_row]) * d
        return MetadataIndex(fqn, torch.Size(self._offsets[at : at + d].tolist()), index)

    def storage_rows(self) -> int:
        """Number of storage entries."""
        return int(self.columns.arrays["st_fqn"].size)

    def relative_paths(self) -> set[str]:
        """Relative paths of every data object the checkpoint names."""
        used = np.unique(self.columns.arrays["st_path"])
        return {self.columns.paths[i] for i in used.tolist()}

    def chunk_of(self, index: MetadataIndex) -> tuple[ChunkStorageMetadata, torch.dtype]:
        """The saved chunk `index` names and its tensor's dtype (as `regions.chunk_of`).

        Raises:
            ValueError: the FQN is no tensor, or has no chunk at the index's offsets.
        """
        row = self.columns.fqn_row.get(index.fqn)
        if row is None or self._kind[row] == KIND_BYTES:
            raise ValueError(f"FQN {index.fqn!r} has no tensor metadata")
        position = (
            -1 if index.offset is None else self._chunk_position(row, index.offset, index.index)
        )
        if position < 0:
            raise ValueError(
                f"FQN {index.fqn!r} has no chunk at offsets {tuple(index.offset or ())}"
            )
        d = self._ndim[row]
        at = self._dims_start[row] + position * d
        size = torch.Size
        chunk = ChunkStorageMetadata(
            offsets=size(self._offsets[at : at + d].tolist()),
            sizes=size(self._sizes[at : at + d].tolist()),
        )
        return chunk, self.dtype(row)

    # -- planning ------------------------------------------------------------------------------
    def read_items(
        self, fqn: str, row: int, local_chunks: Sequence[ChunkStorageMetadata]
    ) -> list[ReadItem] | None:
        """torch's `create_read_items_for_chunk_list(fqn, metadata[fqn], local_chunks)`, equal
        item for item and in order, or None when the local chunks' rank differs from the saved
        tensor's (the caller then takes torch's path, which decides what that means).

        torch sweeps the chunks along the dimension of largest extent and, for each local chunk
        (by start along it), emits the overlapping saved chunks by (end along it, position).
        Here the saved chunks that overlap a local one along dimension 0 are found by one numpy
        comparison over the column of starts and ends (O(saved chunks) in C, not Python), the
        few found are tested in every dimension, and the sweep dimension is computed only where
        an order depends on it (several local chunks, or several matches).
        """
        if not local_chunks:
            return []
        count, d = self._chunks[row], self._ndim[row]
        if count == 0:
            return []
        if any(len(c.offsets) != d or len(c.sizes) != d for c in local_chunks):
            return None
        start = self._dims_start[row]
        offsets = self._offsets[start : start + count * d]
        sizes = self._sizes[start : start + count * d]
        local_off = [list(c.offsets) for c in local_chunks]
        local_size = [list(c.sizes) for c in local_chunks]
        found_sweep: list[int] = []

        def sweep() -> int:
            if not found_sweep:
                best, dim_at = 0, 0
                for dim in range(d):
                    saved = offsets[dim::d].astype(np.int64) + sizes[dim::d]
                    extent = max(
                        int(saved.max()),
                        *(o[dim] + z[dim] for o, z in zip(local_off, local_size, strict=True)),
                    )
                    if extent > best:
                        best, dim_at = extent, dim
                found_sweep.append(dim_at)
            return found_sweep[0]

        if d == 0 or len(local_chunks) == 1:
            local_order: Sequence[int] = range(len(local_chunks))
        else:
            dim = sweep() if d > 1 else 0
            local_order = sorted(range(len(local_chunks)), key=lambda i: local_off[i][dim])
        if d:
            starts = offsets[0::d].astype(np.int64)
            ends = starts + sizes[0::d]
        items: list[ReadItem] = []
        for local_idx in local_order:
            cur_off, cur_size = local_off[local_idx], local_size[local_idx]
            if d:
                hit = (starts < cur_off[0] + cur_size[0]) & (ends > cur_off[0])
                candidates = np.flatnonzero(hit).tolist()
            else:
                candidates = list(range(count))
            matches = []
            for k in candidates:
                so = offsets[k * d : (k + 1) * d].tolist()
                ss = sizes[k * d : (k + 1) * d].tolist()
                if all(
                    c < o + z and o < c + n
                    for c, n, o, z in zip(cur_off, cur_size, so, ss, strict=True)
                ):
                    matches.append((k, so, ss))
            if len(matches) > 1 and d:
                dim = sweep() if d > 1 else 0
                matches.sort(key=lambda m: (m[1][dim] + m[2][dim], m[0]))
            chunk = local_chunks[local_idx]
            dest_index = MetadataIndex(fqn, chunk.offsets, local_idx)
            items.extend(
                _read_item(fqn, dest_index, k, so, ss, cur_off, cur_size) for k, so, ss in matches
            )
        return items


def _read_item(fqn, dest_index, storage_idx, saved_off, saved_size, cur_off, cur_size):
    """torch's ReadItem for the overlap of saved chunk `storage_idx` (offsets, sizes) and the
    local chunk (offsets, sizes) `dest_index` names (`_shards_get_overlap_region_wrt_saved_tensor`
    per dimension)."""
    storage_offsets, dest_offsets, lengths = [], [], []
    for so, co, ss, cs in zip(saved_off, cur_off, saved_size, cur_size, strict=True):
        lengths.append(min(so + ss, co + cs) - max(co, so))
        if so > co:
            storage_offsets.append(0)
            dest_offsets.append(so - co)
        else:
            storage_offsets.append(co - so)
            dest_offsets.append(0)
    size = torch.Size
    return ReadItem(
        type=LoadItemType.TENSOR,
        dest_index=dest_index,
        dest_offsets=size(dest_offsets),
        storage_index=MetadataIndex(fqn, size(saved_off), storage_idx),
        storage_offsets=size(storage_offsets),
        lengths=size(lengths),
    )


class _StateDictView(Mapping):
    """`state_dict_metadata` over the columns: FQN -> entry, made on first access."""

    def __init__(self, columns: IndexedColumns) -> None:
        self._columns = columns
        self._made: dict[str, Any] = {}

    def __getitem__(self, fqn: str) -> Any:
        made = self._made.get(fqn)
        if made is None:
            row = self._columns.row(fqn) if type(fqn) is str else None
            if row is None:
                raise KeyError(fqn)
            made = self._made[fqn] = self._columns.storage_metadata(row)
        return made

    def __contains__(self, fqn: object) -> bool:
        return type(fqn) is str and fqn in self._columns.columns.fqn_row

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns.columns.fqns)

    def __len__(self) -> int:
        return len(self._columns.columns.fqns)

    def __reduce__(self):
        return dict, (list(self.items()),)

    def __repr__(self) -> str:
        return f"<state_dict_metadata over a .metadata index: {len(self)} FQNs>"


class _StorageView(Mapping):
    """`storage_data` over the columns: MetadataIndex -> `_StorageInfo`, made on access."""

    def __init__(self, columns: IndexedColumns) -> None:
        self.columns = columns
        self._made: dict[int, _StorageInfo] = {}

    def row_info(self, srow: int) -> _StorageInfo:
        """The `_StorageInfo` of storage row `srow` (made once)."""
        made = self._made.get(srow)
        if made is None:
            made = self._made[srow] = self.columns.storage_info(srow)
        return made

    def __getitem__(self, index: Any) -> _StorageInfo:
        srow = self.columns.storage_row(index) if isinstance(index, MetadataIndex) else -1
        if srow < 0:
            raise KeyError(index)
        return self.row_info(srow)

    def __contains__(self, index: object) -> bool:
        return isinstance(index, MetadataIndex) and self.columns.storage_row(index) >= 0

    def __iter__(self) -> Iterator[MetadataIndex]:
        key = self.columns.storage_key
        return (key(srow) for srow in range(self.columns.storage_rows()))

    def items(self):
        """(key, value) pairs in the saved order (keys and values made as they go)."""
        key, info = self.columns.storage_key, self.row_info
        return [(key(s), info(s)) for s in range(self.columns.storage_rows())]

    def values(self):
        """Values in the saved order (each made as it goes)."""
        return [self.row_info(s) for s in range(self.columns.storage_rows())]

    def __len__(self) -> int:
        return self.columns.storage_rows()

    def __reduce__(self):
        return dict, (self.items(),)

    def __repr__(self) -> str:
        return f"<storage_data over a .metadata index: {len(self)} entries>"


def indexed_metadata(columns: MetadataColumns) -> Metadata:
    """A Metadata over `columns` (module doc): the lazy views, and planner_data, storage_meta
    and version from the index."""
    indexed = IndexedColumns(columns)
    extra = columns.extra
    return Metadata(
        state_dict_metadata=_StateDictView(indexed),
        planner_data=extra.planner_data,
        storage_data=_StorageView(indexed),
        storage_meta=extra.storage_meta,
        version=extra.version,
    )


def index_of(metadata: Any) -> IndexedColumns | None:
    """The columns behind an `indexed_metadata` Metadata (None for any other Metadata, or
    when its storage_data or state_dict_metadata was replaced)."""
    storage = getattr(metadata, "storage_data", None)
    sdm = getattr(metadata, "state_dict_metadata", None)
    if type(storage) is _StorageView and type(sdm) is _StateDictView:
        if sdm._columns is storage.columns:
            return storage.columns
    return None


def storage_of(storage_data: Any) -> IndexedColumns | None:
    """The columns behind an indexed `storage_data` Mapping, None for a dict."""
    return storage_data.columns if type(storage_data) is _StorageView else None
