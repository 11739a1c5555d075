"""Each TORCH_SAVE archive of a save: the bytes `torch.save(tensor, stream)` writes, no call.

Why: DCP's TORCH_SAVE format is one `torch.save` zip archive per tensor item, and torch's loop
(`_write_item`) calls `torch.save` for each: 60-240 us an item (a pickler, a C++ zip writer, ~40
small `stream.write` calls), ~1,600 items a rank in the ep benchmark. Everything in such an archive
but the tensor's storage bytes is fixed by (dtype, shape, strides, storage offset, storage bytes,
requires_grad), except the CRC-32 of the storage record and the serialization id derived from it.
So `ArchiveWriter` builds that fixed part once per layout (a template), and per item computes one
CRC-32 of the storage (`zlib.crc32`, GIL released, ~6 GB/s) and writes three buffers: the head,
the storage itself (a memoryview of the tensor's memory, which `SegmentedStream` sends by
reference) and the patched tail. Figures (us per item, torch.save vs ours):
docs/measurements.md, "Archives without torch.save".

The archive, as torch 2.13 writes it to a stream (facts of the zip format, PKWARE APPNOTE 6.3,
and of torch's record layout): records `archive/data.pkl` (protocol-2 pickle of
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())`,
`_rebuild_tensor_v3` with an UntypedStorage and the dtype for the newer dtypes; the storage is a
persistent id `("storage", <type>, "0", "cpu", numel)`), `.format_version` ("1"),
`.storage_alignment` ("64"), `byteorder`, `data/0` (the whole storage, even of a view),
`version` ("3\\n") and `.data/serialization_id`; each record stored (no compression) behind a
local header whose extra field "FB" pads its data to a multiple of the storage alignment, followed
by a data descriptor (CRC-32, sizes); then the central directory, a zip64 end record and locator,
and the end record. The serialization id is 40 digits: 20 of a hash of the record names (fixed
for our records; read once from a probe `torch.save`) and 20 of `hash_combine` (c10's) over the
CRC-32s of the non-empty records before it, so the output equals torch's byte for byte.

The layout is checked once per process and storage alignment against `torch.save` of probe
tensors; on any difference (another torch version) every archive goes through `torch.save`.
Tensors this path does not model (subclasses, Python attributes, backward hooks, quantized,
sparse or nested tensors, dtypes without a storage type, archives of 4 GiB or more (zip64
records), `torch.serialization.skip_data`, CRC-32 turned off) also go through `torch.save`.

One job: emulating `torch.save`'s archive byte for byte (the zip records, the pickle, the
templates, the writer and the probe that checks them are one model of one format, so they stay
in one module over 400 lines).
"""

from __future__ import annotations

import io
import logging
import pickle
import struct
import sys
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

logger = logging.getLogger(__name__)

_PREFIX = "archive/"  # torch's archive name when it writes to a stream
_LOCAL = struct.Struct("<IHHHHHIIIHH")  # local file header, 30 bytes
_DESCRIPTOR = struct.Struct("<IIII")  # data descriptor (signature, CRC-32, sizes), 16 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # central directory entry, 46 bytes
_ZIP64_END = struct.Struct("<IQHHIIQQQQ")  # zip64 end of central directory record, 56 bytes
_ZIP64_LOCATOR = struct.Struct("<IIQI")  # zip64 end of central directory locator, 20 bytes
_END = struct.Struct("<IHHHHIIH")  # end of central directory record, 22 bytes
_SIG_LOCAL, _SIG_DESCRIPTOR, _SIG_CENTRAL = 0x04034B50, 0x08074B50, 0x02014B50
_SIG_ZIP64_END, _SIG_ZIP64_LOCATOR, _SIG_END = 0x06064B50, 0x07064B50, 0x06054B50
_FLAGS = 0x0808  # bit 3: sizes in a data descriptor; bit 11: UTF-8 names
_FLAGS_EMPTY = 0x0800  # an empty record: sizes (0) and CRC-32 (0) in its headers, no descriptor
_ZIP64_MADE_BY, _ZIP64_NEEDED = 0x031E, 45
_PAD_TAG = b"FB"  # the extra field torch pads with, filled with b"Z"
_FORMAT_VERSION = b"3\n"  # the `version` record torch writes for tensors
_ID_DIGITS = 40
# An archive this long or longer needs zip64 sizes or offsets in its records: torch.save's.
_ZIP32_LIMIT = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_TEMPLATES_MAX = 8192  # layouts kept per writer (a few hundred bytes to a few KiB each)

# The stand-ins the layout is checked with: a view with an offset, a 0-d tensor, a new dtype.
_PROBES: tuple[Callable[[], torch.Tensor], ...] = (
    lambda: torch.arange(24, dtype=torch.float32).view(4, 6)[1:, 2:5],
    lambda: torch.tensor(7, dtype=torch.int64),
    lambda: torch.arange(10, dtype=torch.int32).to(torch.uint16)[3:],
    lambda: torch.empty(0, 3, dtype=torch.bfloat16),
)


def _hash_combine(seed: int, value: int) -> int:
    """c10::hash_combine on 64-bit size_t: how torch folds each record's CRC-32 into the id."""
    return seed ^ ((value + 0x9E3779B9 + ((seed << 6) & _MASK64) + (seed >> 2)) & _MASK64)


class _Persistent:
    """An object the pickler writes as the persistent id ``pid`` (torch's storage reference)."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple) -> None:
        self.pid = pid


class _Call:
    """An object the pickler writes as ``func(*args)`` (what ``Tensor.__reduce_ex__`` gives)."""

    __slots__ = ("func", "args")

    def __init__(self, func: Callable, args: tuple) -> None:
        self.func = func
        self.args = args

    def __reduce__(self):
        return self.func, self.args


class _Pickler(pickle.Pickler):
    """Writes `_Persistent` objects as their persistent ids, as torch's pickler does storages."""

    def persistent_id(self, obj: Any) -> Any:
        return obj.pid if type(obj) is _Persistent else None


class Layout(NamedTuple):
    """What an archive's bytes outside the storage depend on (one template per value).

    dtype; size, stride: tuples of ints (elements); storage_offset: elements; nbytes: the
    storage's bytes; requires_grad; metadata: torch's tensor metadata items (conj/neg bits),
    usually ().
    """

    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    nbytes: int
    requires_grad: bool
    metadata: tuple


class _Template(NamedTuple):
    """One layout's archive outside its storage bytes.

    head: bytes before the storage bytes. tail: bytes after them, with zeros at the patched
    places: ``data_crc`` (offsets of the storage record's CRC-32), ``id_at`` (the 40 digits of
    the serialization id), ``id_crc`` (offsets of the id record's CRC-32). seed: the id's CRC
    hash over the records before the storage.
    """

    head: bytes
    tail: bytes
    data_crc: tuple[int, ...]
    id_at: int
    id_crc: tuple[int, ...]
    seed: int


def _storage_type(dtype: torch.dtype) -> tuple[Callable, Any, bool] | None:
    """(rebuild function, pickled storage type, True if the dtype goes in the args) for a dtype
    torch pickles through a storage of ours; None for the others (quantized, unknown)."""
    if dtype in torch.storage._new_dtypes():
        return torch._utils._rebuild_tensor_v3, torch.UntypedStorage, True
    name = torch.storage._dtype_to_storage_type_map().get(dtype)
    if name is None or dtype in (
        torch.qint8,
        torch.qint32,
        torch.quint8,
        torch.quint4x2,
        torch.quint2x4,
    ):
        return None
    return torch._utils._rebuild_tensor_v2, getattr(torch, name), False


def data_pkl(layout: Layout) -> bytes | None:
    """The `data.pkl` record `torch.save` writes for a tensor of ``layout`` (pickle protocol 2),
    or None for a dtype this module does not write."""
    kind = _storage_type(layout.dtype)
    if kind is None:
        return None
    rebuild, storage_type, with_dtype = kind
    numel = layout.nbytes if with_dtype else layout.nbytes // layout.dtype.itemsize
    storage = _Persistent(("storage", storage_type, "0", "cpu", numel))
    # Fresh tuples for size and stride: one object for both would pickle as a memo reference.
    args: tuple = (
        storage,
        layout.storage_offset,
        tuple(list(layout.size)),
        tuple(list(layout.stride)),
        layout.requires_grad,
        OrderedDict(),
    )
    if with_dtype:
        args += (layout.dtype,)
    if layout.metadata:
        args += (dict(layout.metadata),)
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(_Call(rebuild, args))
    return buf.getvalue()


def _flags(size: int) -> int:
    """A record's flags: torch's writer gives an empty record no data descriptor."""
    return _FLAGS if size else _FLAGS_EMPTY


def _local_header(name: bytes, offset: int, size: int, alignment: int) -> bytes:
    """A record's local header at archive ``offset``, padded so its data starts aligned."""
    start = offset + _LOCAL.size + len(name) + 4
    pad = -start % alignment
    fields = (_SIG_LOCAL, 0, _flags(size), 0, 0, 0, 0, 0, 0, len(name), 4 + pad)
    return _LOCAL.pack(*fields) + name + _PAD_TAG + struct.pack("<H", pad) + b"Z" * pad


def _build(layout: Layout, alignment: int, name_hash: int) -> _Template | None:
    """The template of ``layout`` (None: a dtype or size this module leaves to torch.save)."""
    pkl = data_pkl(layout)
    if pkl is None:
        return None
    records: list[tuple[str, bytes | None]] = [
        ("data.pkl", pkl),
        (".format_version", b"1"),
        (".storage_alignment", str(alignment).encode()),
        ("byteorder", sys.byteorder.encode()),
        ("data/0", None),  # the storage: its bytes are not in the template
        ("version", _FORMAT_VERSION),
        (".data/serialization_id", bytes(_ID_DIGITS)),  # filled per item
    ]
    storage_index, id_index = 4, 6
    # The archive without the storage's bytes; offsets past them are shifted by nbytes.
    out = bytearray()
    entries = []  # (name, archive offset of the local header, size, crc)
    seed = 0
    storage_at = id_at = 0
    for i, (name, data) in enumerate(records):
        full = (_PREFIX + name).encode()
        offset = len(out) + (layout.nbytes if i > storage_index else 0)
        size = layout.nbytes if i == storage_index else len(data)
        out += _local_header(full, offset, size, alignment)
        if i == storage_index:
            storage_at, crc = len(out), 0
        else:
            crc = 0 if i == id_index else zlib.crc32(data)
            if i == id_index:
                id_at = len(out)
            elif i < storage_index:
                seed = _hash_combine(seed, crc)
            out += data
        if size:
            out += _DESCRIPTOR.pack(_SIG_DESCRIPTOR, crc, size, size)
        entries.append((full, offset, size, crc))
    cd_offset = len(out) + layout.nbytes
    # Where the CRC-32s filled per item lie: the storage's descriptor follows its bytes (an
    # empty storage has none, and its CRC-32 stays 0); the id's follows the id.
    data_crc = [storage_at + 4] if layout.nbytes else []
    id_crc = [id_at + _ID_DIGITS + 4]
    directory_at = len(out)
    for i, (full, offset, size, crc) in enumerate(entries):
        if i == storage_index and layout.nbytes:
            data_crc.append(len(out) + 16)
        elif i == id_index:
            id_crc.append(len(out) + 16)
        flags = _flags(size)
        fields = (_SIG_CENTRAL, 0, 0, flags, 0, 0, 0, crc, size, size, len(full), 0, 0, 0, 0, 0)
        out += _CENTRAL.pack(*fields, offset) + full
    n, cd_size = len(entries), len(out) - directory_at
    end64 = cd_offset + cd_size
    out += _ZIP64_END.pack(
        _SIG_ZIP64_END, 44, _ZIP64_MADE_BY, _ZIP64_NEEDED, 0, 0, n, n, cd_size, cd_offset
    )
    out += _ZIP64_LOCATOR.pack(_SIG_ZIP64_LOCATOR, 0, end64, 1)
    out += _END.pack(_SIG_END, 0, 0, n, n, cd_size, cd_offset, 0)
    if len(out) + layout.nbytes >= _ZIP32_LIMIT:
        return None  # torch writes zip64 fields here
    return _Template(
        head=bytes(out[:storage_at]),
        tail=bytes(out[storage_at:]),
        data_crc=tuple(at - storage_at for at in data_crc),
        id_at=id_at - storage_at,
        id_crc=tuple(at - storage_at for at in id_crc),
        seed=seed,
    )


def storage_bytes(tensor: torch.Tensor) -> memoryview:
    """The whole storage of a CPU ``tensor`` as a 1-D uint8 memoryview of its memory (no copy;
    it keeps the storage alive)."""
    u8 = torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())
    return memoryview(u8.numpy())


def layout_of(tensor: torch.Tensor) -> Layout | None:
    """The Layout of ``tensor`` if this module writes its archive, else None (see the module
    docstring for what goes through torch.save)."""
    if (
        type(tensor) is not torch.Tensor
        or tensor.__dict__
        or not tensor.is_cpu
        or tensor.layout is not torch.strided
        or tensor.is_quantized
        or tensor.is_nested
        or tensor._backward_hooks
    ):
        return None
    metadata = ()
    if tensor.is_conj() or tensor.is_neg():
        metadata = tuple(torch._utils.get_tensor_metadata(tensor).items())
    return Layout(
        tensor.dtype,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.untyped_storage().nbytes(),
        tensor.requires_grad,
        metadata,
    )


class ArchiveWriter:
    """Writes `torch.save` archives of tensors for one storage alignment (see the module
    docstring); ``write`` falls back to `torch.save` for tensors it does not model.

    Args:
        alignment: torch's storage alignment (bytes; torch's config, default 64).
        name_hash: the first 20 digits of torch's serialization id for our record names.

    Thread-safe: templates are built under a lock, then only read.
    """

    def __init__(self, alignment: int, name_hash: int) -> None:
        self.alignment = alignment
        self._name_hash = name_hash
        self._version_crc = zlib.crc32(_FORMAT_VERSION)
        self._templates: dict[Layout, _Template | None] = {}
        self._lock = threading.Lock()

    def archive(self, tensor: torch.Tensor) -> list | None:
        """The archive of ``tensor`` as buffers to write in order: [head, storage memoryview,
        tail] (the storage's only when it has bytes); None when torch.save must write it."""
        layout = layout_of(tensor)
        if layout is None:
            return None
        template = self._templates.get(layout)
        if template is None:
            template = self._template(layout)
            if template is None:
                return None
        if layout.nbytes:
            storage = storage_bytes(tensor)
            crc = zlib.crc32(storage)
        else:
            storage, crc = None, 0
        # torch folds in the CRC-32 of each record that has bytes.
        digest = template.seed if storage is None else _hash_combine(template.seed, crc)
        digest = _hash_combine(digest, self._version_crc)
        sid = b"%020d%020d" % (self._name_hash, digest)
        sid_crc = zlib.crc32(sid)
        tail = bytearray(template.tail)
        for at in template.data_crc:
            struct.pack_into("<I", tail, at, crc)
        tail[template.id_at : template.id_at + _ID_DIGITS] = sid
        for at in template.id_crc:
            struct.pack_into("<I", tail, at, sid_crc)
        return [template.head, tail] if storage is None else [template.head, storage, tail]

    def write(self, stream, tensor: torch.Tensor) -> None:
        """Writes ``tensor``'s archive to ``stream`` (bytes equal to `torch.save(tensor,
        stream)`'s; torch.save itself for what this module does not model).

        Raises:
            whatever ``stream.write`` or torch.save raises.
        """
        buffers = self.archive(tensor)
        if buffers is None:
            torch.save(tensor, stream)
            return
        for buf in buffers:
            stream.write(buf)

    def _template(self, layout: Layout) -> _Template | None:
        with self._lock:
            if layout in self._templates:
                return self._templates[layout]
            template = _build(layout, self.alignment, self._name_hash)
            if template is not None:
                if len(self._templates) >= _TEMPLATES_MAX:
                    self._templates.clear()
                self._templates[layout] = template
            return template


def _torch_save_bytes(tensor: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(tensor, buf)
    return buf.getvalue()


def _serialization_id(archive: bytes) -> bytes:
    """The 40 digits of an archive's serialization id (torch writes that record last)."""
    local = archive.rindex(b"PK\x03\x04", 0, archive.index(b"PK\x01\x02"))
    name_len, extra_len = _LOCAL.unpack_from(archive, local)[9:11]
    start = local + _LOCAL.size + name_len + extra_len
    return archive[start : start + _ID_DIGITS]


def _probe(alignment: int) -> ArchiveWriter | None:
    """A writer whose archives equal `torch.save`'s for the probe tensors, or None."""
    try:
        expected = [_torch_save_bytes(make()) for make in _PROBES]
        writer = ArchiveWriter(alignment, int(_serialization_id(expected[0])[:20]))
        for make, want in zip(_PROBES, expected, strict=True):
            buffers = writer.archive(make())
            if buffers is None or b"".join(bytes(b) for b in buffers) != want:
                logger.warning(
                    "gcsckpt: this torch's archives differ from the ones gcsckpt writes; "
                    "TORCH_SAVE items go through torch.save"
                )
                return None
        return writer
    except Exception:  # noqa: BLE001 - any surprise: torch.save writes every archive
        logger.warning("gcsckpt: archive layout probe failed; using torch.save", exc_info=True)
        return None


_writers: dict[int, ArchiveWriter | None] = {}
_writers_lock = threading.Lock()


def current_writer() -> ArchiveWriter | None:
    """The ArchiveWriter for torch's current serialization settings, checked against
    `torch.save` once per process and alignment; None where torch.save must write archives
    (CRC-32 turned off, `skip_data`, or a layout that differs from this torch's)."""
    from torch.utils.serialization import config

    if not config.save.compute_crc32 or torch.serialization._serialization_tls.skip_data:
        return None
    alignment = int(config.save.storage_alignment)
    with _writers_lock:
        if alignment not in _writers:
            _writers[alignment] = _probe(alignment)
        return _writers[alignment]


__all__ = [
    "ArchiveWriter",
    "Layout",
    "current_writer",
    "data_pkl",
    "layout_of",
    "storage_bytes",
]
