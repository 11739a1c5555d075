"""A tensor over 2 GiB (and an item at an object offset past 2 GiB) through the local endpoint.

Uploading 2 GiB through the single-threaded emulator takes minutes, so torch's own
FileSystemWriter writes the checkpoint straight into the folder nginx serves media reads from
(`<data>/.cloudstorage/<bucket>/...`); the reader's path (ranged GETs via nginx) is the real one.
"""

from __future__ import annotations

import psutil
import pytest
import torch
import torch.distributed.checkpoint as dcp

from gcsckpt.dcp import GCSStorageReader
from gcsckpt.testing import LocalGCS

PERIOD = 251  # prime, so a shifted byte range cannot match the pattern
ROWS = 8_600_000  # 251 x 8.6e6 = 2,158,600,000 bytes > 2**31
NEEDED = 3 * PERIOD * ROWS + (1 << 30)  # source during save, then target + fetch buffer


def _pattern_ok(tensor: torch.Tensor) -> bool:
    pattern = torch.arange(PERIOD, dtype=torch.uint8)
    rows = tensor.view(-1, PERIOD)
    step = 1 << 20
    return all(
        torch.equal(rows[i : i + step], pattern.expand(min(step, ROWS - i), PERIOD))
        for i in range(0, ROWS, step)
    )


@pytest.mark.skipif(
    psutil.virtual_memory().available < NEEDED,
    reason=f"needs {NEEDED / 2**30:.1f} GiB free; test_roundtrip covers a 272 MiB tensor",
)
def test_tensor_over_2_gib(tmp_path):
    with LocalGCS() as gcs:
        gcs.create_bucket("big")
        folder = f"{gcs.data_dir}/.cloudstorage/big/ckpt"
        source = torch.arange(PERIOD, dtype=torch.uint8).repeat(ROWS)
        after = torch.arange(7, dtype=torch.int64)
        dcp.save({"huge": source, "after": after}, storage_writer=dcp.FileSystemWriter(folder))
        del source
        state = {
            "huge": torch.zeros(PERIOD * ROWS, dtype=torch.uint8),
            "after": torch.zeros(7, dtype=torch.int64),
        }
        reader = GCSStorageReader("gs://big/ckpt", endpoint=gcs.endpoint)
        dcp.load(state, storage_reader=reader)
        assert torch.equal(state["after"], after)
        assert _pattern_ok(state["huge"])
        stats = reader.load_stats
        assert stats.bytes_needed > PERIOD * ROWS
        # Every byte fetched is needed, but for at most one byte per object: the extents
        # check's 1-byte GET when the listing gave no size (dcp/load/extents.py).
        assert stats.bytes_fetched - stats.bytes_needed in (0, stats.objects)
