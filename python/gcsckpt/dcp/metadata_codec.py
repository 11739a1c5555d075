"""Loading a DCP `.metadata` pickle without letting it run code, then checking its shape.

`.metadata` is a plain pickle of `torch.distributed.checkpoint.metadata.Metadata` (torch 2.13
`FileSystemWriter.finish`). `pickle.load` on it would import and call anything the file names, so
the unpickler here resolves only an allow-list of globals: DCP's metadata dataclasses, the
filesystem `_StorageInfo`, torch dtypes/layouts/memory formats/`Size`, builtin containers and
`pathlib` paths (torch's `FileSystemWriter` records its checkpoint id as a `PosixPath`).
"""

from __future__ import annotations

import io
import pathlib
import pickle
from collections import OrderedDict
from typing import Any

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import _StorageInfo

from gcsckpt.dcp.paths import check_relative_path


class UnsafeMetadataError(pickle.UnpicklingError):
    """`.metadata` names a global outside the allow-list, or is not a DCP Metadata."""


def _layout_by_name(name: str) -> torch.layout:
    # Stands in for torch.serialization._get_layout, which pickled layouts reduce to.
    layout = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(layout, torch.layout):
        raise UnsafeMetadataError(f"unknown torch layout {name!r}")
    return layout


def _enum_member(cls: Any, name: str) -> Any:
    # Stands in for builtins.getattr, which Python >= 3.11 pickles Enum members through.
    if cls is not dcp_metadata._MEM_FORMAT_ENCODING or name not in cls.__members__:
        raise UnsafeMetadataError(f"getattr({cls!r}, {name!r}) is not allowed in DCP metadata")
    return cls[name]


_ALLOWED: dict[tuple[str, str], Any] = {
    **{
        ("torch.distributed.checkpoint.metadata", cls.__name__): cls
        for cls in (
            dcp_metadata.Metadata,
            dcp_metadata.MetadataIndex,
            dcp_metadata.TensorStorageMetadata,
            dcp_metadata.BytesStorageMetadata,
            dcp_metadata.ChunkStorageMetadata,
            dcp_metadata.TensorProperties,
            dcp_metadata.StorageMeta,
            dcp_metadata._MEM_FORMAT_ENCODING,
        )
    },
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): _layout_by_name,
    ("builtins", "getattr"): _enum_member,
    ("collections", "OrderedDict"): OrderedDict,
    **{("builtins", c.__name__): c for c in (dict, list, tuple, set, frozenset, complex)},
    **{
        ("pathlib", c.__name__): c
        for c in (pathlib.PurePosixPath, pathlib.PosixPath, pathlib.PureWindowsPath)
    },
}


class _MetadataUnpickler(pickle.Unpickler):
    """C unpickler whose only way to reach a Python global is the allow-list above."""

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == "torch":
            value = getattr(torch, name, None)
            if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return value
        raise UnsafeMetadataError(f"global {module}.{name} is not allowed in DCP metadata")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeMetadataError("persistent ids are not allowed in DCP metadata")


def load_metadata(data: bytes | memoryview, *, source: str) -> dcp_metadata.Metadata:
    """Unpickles and checks a DCP `.metadata` payload.

    Args:
        data: the whole `.metadata` object (bytes).
        source: where it came from (e.g. `gs://b/p/.metadata`), used in every error.

    Returns:
        the Metadata; every `storage_data` value is a `_StorageInfo` with a safe relative path
        and non-negative int `offset`/`length`.

    Raises:
        UnsafeMetadataError: a global outside the allow-list, or a payload that is not Metadata.
        ValueError: malformed pickle, unsafe relative path, or bad offsets/lengths; the message
            starts with `source` and names the FQN at fault.
    """
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except UnsafeMetadataError as e:
        raise UnsafeMetadataError(f"{source}: {e}") from None
    except Exception as e:  # truncated/corrupt pickles raise many types
        raise ValueError(f"{source}: not a readable DCP metadata pickle ({e!r})") from e
    if not isinstance(metadata, dcp_metadata.Metadata):
        raise UnsafeMetadataError(f"{source}: holds {type(metadata).__name__}, not DCP Metadata")
    _check_state_dict_metadata(metadata, source)
    _check_storage_data(metadata, source)
    return metadata


def _check_state_dict_metadata(metadata: dcp_metadata.Metadata, source: str) -> None:
    sdm = metadata.state_dict_metadata
    if not isinstance(sdm, dict):
        raise ValueError(f"{source}: state_dict_metadata is {type(sdm).__name__}, not dict")
    for fqn, entry in sdm.items():
        if isinstance(entry, dcp_metadata.BytesStorageMetadata):
            continue
        if not isinstance(entry, dcp_metadata.TensorStorageMetadata):
            raise ValueError(f"{source}: FQN {fqn!r} has metadata of type {type(entry).__name__}")
        if not isinstance(entry.properties.dtype, torch.dtype):
            raise ValueError(f"{source}: FQN {fqn!r} has no torch dtype")


def _check_storage_data(metadata: dcp_metadata.Metadata, source: str) -> None:
    storage_data = metadata.storage_data
    if not isinstance(storage_data, dict):
        raise ValueError(f"{source}: storage_data is {type(storage_data).__name__}, not dict")
    checked_paths: set[str] = set()
    for index, info in storage_data.items():
        if type(info) is not _StorageInfo or not isinstance(index, dcp_metadata.MetadataIndex):
            raise ValueError(f"{source}: storage_data entry {index!r} -> {info!r} is malformed")
        path = info.relative_path
        if path not in checked_paths:
            check_relative_path(path, where=f"{source} (FQN {index.fqn!r})")
            checked_paths.add(path)
        offset, length = info.offset, info.length
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 0:
            raise ValueError(
                f"{source}: FQN {index.fqn!r} in {path!r} has offset={offset!r} length={length!r}"
            )
        descriptors = getattr(info, "transform_descriptors", None)
        if descriptors is not None and not all(isinstance(d, str) for d in descriptors):
            raise ValueError(f"{source}: FQN {index.fqn!r} has bad transform_descriptors")


def dump_metadata(metadata: dcp_metadata.Metadata) -> bytes:
    """Pickles Metadata exactly as torch's FileSystemWriter does (default pickle protocol)."""
    return pickle.dumps(metadata)
