"""Faults made on LocalGCS's disk, under the object's generation (no request sees a change)."""

from __future__ import annotations

import os


def object_file(gcs, bucket: str, name: str) -> str:
    """The file holding the live bytes of gs://bucket/name on LocalGCS's disk."""
    base = os.path.basename(name)
    wanted = f"{bucket}/{name}"
    found = [
        os.path.join(root, f)
        for root, _, files in os.walk(gcs.data_dir)
        for f in files
        if f == base and os.path.join(root, f).replace(os.sep, "/").endswith(wanted)
    ]
    assert found, f"no file for gs://{wanted} under {gcs.data_dir}"
    return found[0]


def flip_on_disk(gcs, bucket: str, name: str, offset: int) -> None:
    """Inverts byte `offset` of gs://bucket/name in place: every hard link (the object's
    generation) sees it."""
    with open(object_file(gcs, bucket, name), "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
