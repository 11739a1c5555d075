"""Request and result records of the range reader."""

from __future__ import annotations

from typing import Any, NamedTuple


class RangeRequest(NamedTuple):
    """One byte range to read into caller memory.

    Attributes:
        bucket: GCS bucket name.
        object: object name (any UTF-8; '/', spaces, '%', '+', '#', '?' are fine).
        offset: first byte, >= 0 (bytes; may exceed 4 GiB).
        length: number of bytes, >= 0; zero-length requests complete without I/O.
        dest: writable C-contiguous CPU buffer of exactly ``length`` bytes: bytearray,
            memoryview, numpy array (any dtype), or a contiguous CPU torch tensor (any dtype,
            bf16 included; its bytes are overwritten).
        generation: the object generation to read (int > 0), or None: the generation of the
            first answer that names one (``x-goog-generation``). Either way every GET of the
            object in one submit asks for that generation and is checked against it (see
            ``RangeReader``). Requests of one object in one submit must not name different
            generations.
        checksums: the object's block checksums (a ``BlockSums``), or None. With them every
            GET of the object covers whole blocks and every block's CRC-32C is checked before
            the request completes (see ``RangeReader``).
    """

    bucket: str
    object: str
    offset: int
    length: int
    dest: Any
    generation: int | None = None
    checksums: Any = None
