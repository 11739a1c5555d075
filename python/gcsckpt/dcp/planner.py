"""GCSLoadPlanner: torch's DefaultLoadPlanner with cheaper BYTE_IO items and compact plans.

A training checkpoint saved with a flattened optimizer state dict holds one BYTE_IO item per
parameter and param_group key (`param_groups.<FQN>.lr`, `.betas`, ...): most items per rank in
the scaled-OLMoE case (docs/measurements.md, "Stock path"). Each is a `torch.save` archive of a
float, tuple or bool, and `DefaultLoadPlanner.load_bytes` pays `torch.load`'s zip reader and
unpickler set-up for each, up to a second of CPU per rank (docs/measurements.md, "Per-item costs
on the load path"). torch writes `data.pkl` as the archive's first record, so this planner
unpickles it straight from the first local header when it names no globals outside a few builtin
containers and no tensor storages. Anything else goes to `DefaultLoadPlanner.load_bytes`
unchanged, so results equal the default planner's.

The same few values recur for every parameter (`lr`, `betas`, `eps`, ...), and `torch.save`
writes equal values as equal bytes, so each planner keeps the values it decoded keyed by their
archive's bytes and decodes each distinct byte string once per load (8,877 BYTE_IO items per
rank, a handful of distinct strings, in the scaled-OLMoE fsdp case). Only values built from
immutable builtins (None, bool, int, float, complex, str, bytes, and tuples/frozensets of those)
are kept, so one object may be handed to several keys safely; lists, dicts, sets and anything
else are decoded anew for each item. The cache is bounded: at most `DECODED_CACHE_ENTRIES`
archives of at most `DECODED_CACHE_KEY_BYTES` each (16 MiB of keys at most, ~1.3 KiB
each in practice); it lives with the planner and is emptied at each `set_up_planner`.

Planning is torch's too, with two per-entry costs taken out: a BYTE_IO ReadItem shares one
MetadataIndex and one Size (torch builds two and three), and `set_up_planner` flattens the
state dict once, taking torch's extra pass for nested ShardedTensors only when one is there.
Plans, flattened state and mappings equal torch's (tests/dcp/test_planner.py).

On a Metadata read from `.metadata`'s columnar index (`gcsckpt.dcp.indexed_metadata`), a tensor
or DTensor entry's items come from the columns: its local chunks against all saved chunks of
the tensor in one numpy comparison (torch: one Python pair test per saved chunk, 2,169 x N per
rank of a 70B FSDP checkpoint at N ranks), no saved chunk made as an object; equal to torch's
items in value and order (tests/dcp/test_metadata_index.py).
"""

from __future__ import annotations

import builtins
import codecs
import dataclasses
import io
import pickle
from collections import OrderedDict
from typing import Any

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _init_state_dict,
    create_default_local_load_plan,
)
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
from torch.distributed.checkpoint.planner_helpers import _create_chunk_list
from torch.distributed.tensor import DTensor

from gcsckpt.dcp.indexed_metadata import IndexedColumns, index_of
from gcsckpt.dcp.torch_save_view import first_record

# torch.save pickles with protocol 2, which names the builtins module "__builtin__".
_BUILTINS = {
    (module, name): getattr(builtins, name)
    for module in ("builtins", "__builtin__")
    for name in ("set", "frozenset", "complex", "bytearray", "slice", "range")
}
_BUILTINS[("collections", "OrderedDict")] = OrderedDict
_BUILTINS[("_codecs", "encode")] = codecs.encode  # protocol 2 spells bytes as encode(str, latin1)


_MISSING = object()
_ZERO = torch.Size((0,))  # a BYTE_IO item's offsets and lengths (immutable, shared)


class _NotPlain(Exception):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles builtin values only (no storages, no other globals)."""

    def find_class(self, module: str, name: str) -> Any:
        found = _BUILTINS.get((module, name))
        if found is None:
            raise _NotPlain
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise _NotPlain


class GCSLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner with cheaper BYTE_IO decoding and (optionally) compact plans.

    Same results as `torch.distributed.checkpoint.DefaultLoadPlanner`; use it with any
    StorageReader: `dcp.load(sd, storage_reader=..., planner=GCSLoadPlanner())`.

    - `load_bytes` decodes plain-Python BYTE_IO values without `torch.load`; values
      that are not plain builtins (tensors inside BYTE_IO, custom classes) take
      torch's `torch.load(weights_only=False)` path exactly as the default planner does.
    - compact_plans=True (default): the default global load plan changes nothing, yet DCP
      pickles every rank's ReadItems to the coordinator and back (about twelve thousand per
      rank in the 8-rank scaled-OLMoE case: seconds of CPU). This planner sends an empty item
      list instead and restores its own items in `finish_plan`. Turn it off when a StorageReader or
      a subclass must see or rewrite the items in `prepare_local_plan`/`prepare_global_plan`
      (GCSStorageReader and torch's FileSystemReader do not need to).

    Args:
        *args, **kwargs: DefaultLoadPlanner's (flatten_state_dict, flatten_sharded_tensors,
            allow_partial_load).
        compact_plans: see above.
    """

    def __init__(self, *args: Any, compact_plans: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compact_plans = compact_plans
        self._local_plan: LoadPlan | None = None
        self._decoded: dict[bytes, Any] = {}  # archive bytes -> immutable value (module doc)

    def set_up_planner(
        self, state_dict: dict, metadata: Metadata | None = None, is_coordinator: bool = False
    ) -> None:
        """DefaultLoadPlanner.set_up_planner, with this planner's decoded-value cache emptied.

        The same state as torch's: torch first rebuilds the whole state dict to flatten nested
        ShardedTensors (~1 us per entry), which changes nothing when it holds none, so the
        flattened dict is checked for ShardedTensors instead and only then is torch's path
        taken."""
        self._decoded = {}
        if not (self.flatten_sharded_tensors and self.flatten_state_dict):
            super().set_up_planner(state_dict, metadata, is_coordinator)
            return
        _init_state_dict(state_dict)
        flat, mappings = flatten_state_dict(state_dict)
        if any(isinstance(value, ShardedTensor) for value in flat.values()):
            super().set_up_planner(state_dict, metadata, is_coordinator)
            return
        self.original_state_dict = state_dict
        self.state_dict, self.mappings = flat, mappings
        self.metadata = metadata
        self.is_coordinator = is_coordinator

    def create_local_plan(self) -> LoadPlan:
        """The default local plan, or (compact_plans) a stand-in without items.

        Raises:
            ValueError: the saved chunks of a tensor this rank reads do not cover it exactly
                (see `_check_coverage`).
        """
        plan = self._default_local_plan()
        self._check_coverage(plan)
        if not self.compact_plans:
            return plan
        self._local_plan = plan
        return dataclasses.replace(plan, items=[], planner_data=_ITEMS_KEPT_LOCALLY)

    def _default_local_plan(self) -> LoadPlan:
        """`DefaultLoadPlanner.create_local_plan`'s plan, equal item for item, built with one
        shared MetadataIndex and Size per BYTE_IO item (torch makes two and three); tensor
        entries go through torch's own function one by one, in the state dict's order. A
        flattened state dict that lacks keys of the checkpoint (torch's check for a pre-2.4
        checkpoint) takes torch's path whole."""
        metadata = self.metadata
        if metadata is None:
            return super().create_local_plan()
        saved = metadata.state_dict_metadata
        state_dict = self.state_dict
        if self.flatten_state_dict and not saved.keys() <= state_dict.keys():
            return super().create_local_plan()
        strict = not self.allow_partial_load
        items: list[ReadItem] = []
        byte_io, zero = LoadItemType.BYTE_IO, _ZERO
        columns = index_of(metadata)
        chunk_lists: dict = {}  # DTensor (shape, mesh, placements) -> its local chunks
        for fqn, obj in state_dict.items():
            if columns is None:
                is_bytes = type(saved.get(fqn)) is BytesStorageMetadata
            else:  # an indexed `.metadata`: no tensor entry is made (module doc)
                row = columns.row(fqn)
                is_bytes = row is not None and columns.is_bytes(row)
                if row is not None and not is_bytes and isinstance(obj, torch.Tensor):
                    found = _indexed_items(columns, fqn, row, obj, chunk_lists)
                    if found is not None:
                        items.extend(found)
                        continue
            if is_bytes and not isinstance(obj, DTensor):
                index = MetadataIndex(fqn)
                items.append(ReadItem(byte_io, index, zero, index, zero, zero))
            else:  # tensors, DTensors and missing keys: torch's own checks and read items
                items.extend(create_default_local_load_plan({fqn: obj}, metadata, strict).items)
        return LoadPlan(items)

    def _check_coverage(self, plan: LoadPlan) -> None:
        """Every tensor the plan reads is read whole and once: its read items' elements sum to
        its local tensor's. Chunks that leave part of a tensor out or cover a part twice (a
        damaged or crafted `.metadata`; torch's planner takes both and leaves the rest of the
        tensor as it was) fail here, before any byte is read.

        Raises:
            ValueError: names the FQN and both element counts.
        """
        read: dict[str, int] = {}
        byte_io = LoadItemType.BYTE_IO
        for item in plan.items:
            if item.type is not byte_io:
                fqn = item.dest_index.fqn
                read[fqn] = read.get(fqn, 0) + item.lengths.numel()
        for fqn, count in read.items():
            obj = self.state_dict.get(fqn)
            local = obj.to_local() if isinstance(obj, DTensor) else obj
            if type(local) is torch.Tensor and count != local.numel():
                raise ValueError(
                    f"FQN {fqn!r}: the checkpoint's saved chunks cover {count} elements of this "
                    f"rank's {local.numel()} (chunks missing or overlapping in .metadata)"
                )

    def finish_plan(self, central_plan: LoadPlan) -> LoadPlan:
        """The central plan, with this rank's own items put back if they were held back."""
        kept = self._local_plan
        if kept is None or central_plan.planner_data != _ITEMS_KEPT_LOCALLY or central_plan.items:
            return super().finish_plan(central_plan)
        self._local_plan = None
        return dataclasses.replace(
            kept, storage_data=central_plan.storage_data, planner_data=kept.planner_data
        )

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        """Sets the BYTE_IO value `read_item` names (see DefaultLoadPlanner.load_bytes); an
        archive whose bytes equal one decoded before in this load reuses that (immutable)
        value."""
        key = value.getvalue()
        decoded = self._decoded.get(key, _MISSING)
        if decoded is _MISSING:
            found, decoded = self._plain_value(value)
            if not found:
                value.seek(0)
                super().load_bytes(read_item, value)
                return
            cache = self._decoded
            if (
                len(cache) < DECODED_CACHE_ENTRIES
                and len(key) <= DECODED_CACHE_KEY_BYTES
                and _immutable(decoded)
            ):
                cache[key] = decoded
        if self.flatten_state_dict:
            _set_flat(self.original_state_dict, self.mappings[read_item.dest_index.fqn], decoded)
        else:
            self.state_dict[read_item.dest_index.fqn] = decoded

    def _plain_value(self, value: io.BytesIO) -> tuple[bool, Any]:
        """(True, value) for an archive whose pickle holds only builtins, else (False, None).

        torch writes `data.pkl` as the archive's first record and a pickle ends at its STOP
        opcode, so it is unpickled straight from the first local header (no zip directory).
        """
        data = value.getbuffer()
        try:
            name, start = first_record(data)
            if not name.endswith("/data.pkl"):
                return False, None
            return True, _PlainUnpickler(io.BytesIO(data[start:])).load()
        except Exception:  # not plain (or not an archive): torch.load decides and explains
            return False, None
        finally:
            data.release()


def _indexed_items(
    columns: IndexedColumns, fqn: str, row: int, obj: torch.Tensor, chunk_lists: dict
) -> list | None:
    """`create_default_local_load_plan({fqn: obj}, ...)`'s items for a tensor or DTensor `obj`
    saved as FQN row `row` of an indexed `.metadata`, overlaps computed on the columns; None
    where torch's own path must decide (local chunks of another rank than the saved tensor's).

    A plain DTensor's local chunk is a function of its global shape, mesh and placements
    (torch's `compute_local_shape_and_global_offset`), the same for a parameter
    and its optimizer moments and across layers: `chunk_lists` keeps one per such key.

    Raises:
        ValueError: torch's "Size mismatch" when the saved and current global sizes differ.
    """
    saved_size = columns.size(row)
    if saved_size != obj.size():
        raise ValueError(
            f"Size mismatch between saved {saved_size} and current: {obj.size()} for {fqn}",
        )
    if isinstance(obj, DTensor) and obj.device_mesh.get_coordinate() is None:
        return []
    if type(obj) is DTensor and type(obj._local_tensor) is torch.Tensor:
        key = (obj.shape, obj.device_mesh, tuple(obj.placements))
        local = chunk_lists.get(key)
        if local is None:
            local = chunk_lists[key] = _create_chunk_list(obj)
    else:
        local = _create_chunk_list(obj)
    return columns.read_items(fqn, row, local)


def _set_flat(root: dict, path: tuple, value: Any) -> None:
    """`set_element(root, path, value)`, short-cut for the common two-level string path."""
    if len(path) == 2 and type(path[1]) is str:
        container = root.get(path[0])
        if type(container) is dict:
            container[path[1]] = value
            return
    set_element(root, path, value)


# Bounds of the per-planner cache of decoded BYTE_IO values (entries, bytes per key).
DECODED_CACHE_ENTRIES = 4096
DECODED_CACHE_KEY_BYTES = 4 << 10

_IMMUTABLE_LEAVES = (type(None), bool, int, float, complex, str, bytes)


def _immutable(value: Any) -> bool:
    """True when `value` and everything inside it is an immutable builtin (safe to share)."""
    kind = type(value)
    if kind in _IMMUTABLE_LEAVES:
        return True
    if kind is tuple or kind is frozenset:
        return all(_immutable(v) for v in value)
    return False


_ITEMS_KEPT_LOCALLY = "gcsckpt.dcp.GCSLoadPlanner: items kept on each rank"
