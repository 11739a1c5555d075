"""DCP storage for gs:// checkpoints: GCSStorageReader (fast ranged loads) and GCSStorageWriter.

Usage::

    import torch.distributed.checkpoint as dcp
    from gcsckpt.dcp import GCSLoadPlanner, GCSStorageReader, GCSStorageWriter

    dcp.save(state_dict, storage_writer=GCSStorageWriter("gs://bucket/ckpt/step100"))
    reader = GCSStorageReader("gs://bucket/ckpt/step100")
    dcp.load(state_dict, storage_reader=reader, planner=GCSLoadPlanner())  # planner optional
    print(reader.load_stats)

In a training job, `GCSCheckpointer(mode, root="gs://bucket/run", keep_latest=K)`
(gcsckpt.dcp.checkpointer) sets up staging, plan caching, the writer and its priorities for saves
every N steps, and owns the run's steps (`save(state, step=N)`, `steps()`, `latest()`,
`load(state)`, retention, a node-local tier); `gcsckpt.dcp.steps` lists and checks a run's steps.

Module names: every module base name under `gcsckpt` is used once. Three name planning:
`planner` is GCSLoadPlanner (torch's LoadPlanner); `save.plan_cache` is GCSSavePlanner (torch's
SavePlanner with its plan cache); `load.plan` plans a load's item ranges (no torch planner).
"""

from gcsckpt.dcp.checkpoint_errors import (
    CheckpointError,
    CheckpointLoadError,
    CheckpointSaveError,
    NoCheckpointError,
)
from gcsckpt.dcp.checkpointer import GCSCheckpointer
from gcsckpt.dcp.load.load_errors import CheckpointReadError
from gcsckpt.dcp.load.stats import LoadStats
from gcsckpt.dcp.metadata_codec import UnsafeMetadataError
from gcsckpt.dcp.missing import CheckpointNotFoundError
from gcsckpt.dcp.planner import GCSLoadPlanner
from gcsckpt.dcp.reader import GCSStorageReader
from gcsckpt.dcp.save.plan_cache import GCSSavePlanner
from gcsckpt.dcp.save.upload_pipeline import SaveStats
from gcsckpt.dcp.writer import GCSStorageWriter

__all__ = [
    "CheckpointNotFoundError",
    "CheckpointError",
    "CheckpointLoadError",
    "CheckpointReadError",
    "CheckpointSaveError",
    "GCSCheckpointer",
    "GCSLoadPlanner",
    "GCSSavePlanner",
    "GCSStorageReader",
    "GCSStorageWriter",
    "LoadStats",
    "NoCheckpointError",
    "SaveStats",
    "UnsafeMetadataError",
]
