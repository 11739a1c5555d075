"""GCSStorageWriter: its upload defaults, and the split of a rank's items into data objects
(`gcsckpt.dcp.save.split`)."""

from __future__ import annotations

import torch

from gcsckpt.dcp import GCSStorageWriter


def test_writer_upload_defaults_come_from_the_one_table():
    from gcsckpt.io import defaults

    writer = GCSStorageWriter("gs://bkt/p")
    assert (writer.object_bytes, writer.staging_bytes, writer.chunk_bytes) == (
        defaults.UPLOAD_OBJECT_BYTES,
        defaults.UPLOAD_STAGING_BYTES,
        defaults.UPLOAD_CHUNK_BYTES,
    )
    assert writer.max_inflight_uploads == defaults.MAX_INFLIGHT_UPLOADS


def _shard_item(fqn: str, shard_rows: int, global_rows: int, cols: int = 1024):
    """A WriteItem of rows [0, shard_rows) of a (global_rows, cols) float32 tensor."""
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
    )
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

    chunk = ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([shard_rows, cols]))
    return WriteItem(
        index=MetadataIndex(fqn, torch.Size([0, 0])),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=chunk,
            properties=TensorProperties(dtype=torch.float32),
            size=torch.Size([global_rows, cols]),
        ),
    )


def test_objects_are_sized_by_the_ranks_own_shard_bytes():
    """A rank holding 1/8 of each tensor (fsdp) writes its shard bytes, not the whole tensors':
    32 items of 1 MiB shards (8 MiB tensors) at 4 MiB per object make 8 objects, not 64."""
    from gcsckpt.dcp.save.split import estimate_bytes, split_items

    items = [_shard_item(f"w{i}", 256, 2048) for i in range(32)]
    assert estimate_bytes(items) == 32 * 256 * 1024 * 4
    groups = split_items(items, single_file_per_rank=True, thread_count=1, object_bytes=4 << 20)
    assert len(groups) == 8
    assert sorted(len(g) for g in groups) == [4] * 8
