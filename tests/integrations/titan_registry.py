"""A torchtitan config registry (what `--module titan_registry --config gcs_run` loads): a run
whose checkpoint section is gcsckpt's manager, the way a torchtitan user selects it."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchtitan.components.checkpointer import BaseCheckpointManager, CheckpointManager

from gcsckpt.integrations.torchtitan import GCSCheckpointManager


@dataclass(kw_only=True, slots=True)
class RunConfig:
    """The fields of torchtitan's `Trainer.Config` that `ConfigManager` reads, with its
    `checkpoint` field as the Trainer declares it (any manager's Config)."""

    checkpoint: BaseCheckpointManager.Config = field(default_factory=CheckpointManager.Config)
    hf_assets_path: str = "./tests/assets/tokenizer"


def gcs_run() -> RunConfig:
    return RunConfig(
        checkpoint=GCSCheckpointManager.Config(
            enable=True, folder="gs://titan/from-config", interval=10, keep_latest_k=3
        )
    )
