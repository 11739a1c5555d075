"""Reading `.metadata`: its index section when it has one, else the whole pickle.

One ranged GET of the object's last `TAIL_BYTES` gives its generation and, when the object ends
with a `metadata_index` footer, where the index section lies; a section inside those bytes is
decoded from them (checkpoints up to ~64 KiB of index: one request), a longer one costs one more
ranged GET pinned to the same generation (never the pickle before it). The result is the lazy
Metadata of `indexed_metadata`. An object without a footer (stock torch, a peer, an older
gcsckpt) or with a format version this gcsckpt does not know is read whole at that generation
(a second GET, whose bytes google-cloud-storage checks against the object's stored hash) and
unpickled by `metadata_codec`, as before the index existed.

A footer whose section fails its checks raises `MetadataIndexError` (why not the pickle: see
`metadata_index`'s module doc).
"""

from __future__ import annotations

import dataclasses

from torch.distributed.checkpoint.metadata import Metadata

from gcsckpt.dcp.gc_control import HeapFreeze, collector_paused
from gcsckpt.dcp.indexed_metadata import indexed_metadata
from gcsckpt.dcp.metadata_codec import load_metadata
from gcsckpt.dcp.metadata_index import (
    FORMAT_VERSION,
    MetadataIndexError,
    parse_footer,
)
from gcsckpt.dcp.metadata_index_decode import decode_index
from gcsckpt.dcp.paths import CheckpointLocation
from gcsckpt.io.objects import ObjectStore

# Bytes of the first (suffix) GET: the footer and, for small checkpoints, the whole section.
TAIL_BYTES = 64 << 10


@dataclasses.dataclass
class MetadataRead:
    """One read of `.metadata`: the Metadata, the generation every byte came from, and the
    requests and bytes it took; `indexed` tells whether it came from the index."""

    metadata: Metadata
    generation: int | None
    requests: int
    bytes_read: int
    indexed: bool


def read_metadata_object(
    store: ObjectStore,
    location: CheckpointLocation,
    name: str,
    heap: HeapFreeze | None,
    *,
    tail_bytes: int | None = None,
) -> MetadataRead:
    """Reads the checkpoint's metadata object `name` (e.g. `.metadata`) as the module doc says.

    Args:
        heap: with one, each decoding step runs with the garbage collector paused and the
            heap is frozen after it (its first collection would otherwise walk every object
            just made: 20-37 ms for 12k entries; `gc_control`); None: gc left alone.
        tail_bytes: bytes of the first GET (None: `TAIL_BYTES`).

    Raises:
        FileNotFoundError: the object does not exist. MetadataIndexError: its index section is
            corrupt, truncated or inconsistent (names the gs:// URL and generation).
            ValueError/UnsafeMetadataError: its pickle is not a safe DCP Metadata.
    """
    tail_bytes = TAIL_BYTES if tail_bytes is None else tail_bytes
    bucket, object_name, url = location.bucket, location.object_name(name), location.url(name)
    tail = store.read_range(bucket, object_name, -tail_bytes)
    generation, data = tail.generation, tail.data
    where = f"{url} (generation {generation})"
    footer = parse_footer(data, source=where)
    if footer is None or footer.version != FORMAT_VERSION:
        # Read whole even when the tail held it all: google-cloud-storage checks a whole
        # object's CRC-32C/MD5 against its stored hash, never a range's, and nothing else
        # checks a pickle-only `.metadata`.
        whole = store.read(bucket, object_name, generation=generation).data
        metadata = _decoding(lambda: load_metadata(whole, source=url), heap)
        return MetadataRead(metadata, generation, 2, len(data) + len(whole), False)
    total = footer.object_size
    tail_start = total - len(data)
    if tail_start < 0:
        raise MetadataIndexError(
            f"{where}: footer says the object is {total} bytes, but its last {len(data)} "
            "bytes were read (truncated?)"
        )
    start, end = footer.section_offset, footer.section_offset + footer.section_length
    requests, read = 1, len(data)
    if start >= tail_start:
        section = memoryview(data)[start - tail_start : end - tail_start]
    else:
        section = store.read_range(bucket, object_name, start, end, generation=generation).data
        requests, read = 2, read + len(section)
    columns = _decoding(lambda: decode_index(section, footer, source=where), heap)
    return MetadataRead(indexed_metadata(columns), generation, requests, read, True)


def _decoding(fn, heap: HeapFreeze | None):
    """`fn()`, with the collector paused and the heap frozen after it when `heap` is given."""
    if heap is None:
        return fn()
    with collector_paused():
        value = fn()
        heap.freeze()
    return value
