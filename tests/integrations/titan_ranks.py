"""Rank side of the torchtitan test: torchtitan's own optimizer and LR scheduler containers and
`GCSCheckpointManager` built from its Config the way the Trainer builds its checkpointer, on a
small model, gloo ranks, checkpoints in a LocalGCS bucket."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
from torchtitan.components.optimizer.optimizer import ParamGroupConfig

from gcsckpt.integrations.torchtitan import GCSCheckpointManager

BUCKET = "titan"


class TrainState(Stateful):
    """The Trainer's own entry in the checkpoint (`states={"train_state": trainer}`): its step."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": torch.tensor(self.step)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])


class Job:
    """Model, optimizers, LR schedulers, train state and the checkpoint manager of one run."""

    def __init__(self, seed: int, endpoint: str, folder: str, async_mode: str) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        adamw = ParamGroupConfig(
            pattern=".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-2}
        )
        self.optimizers = OptimizersContainer.Config(
            param_groups=[adamw], implementation="for-loop"
        ).build(model_parts=[self.model])
        self.lr_schedulers = LRSchedulersContainer.Config(warmup_steps=2).build(
            optimizers=self.optimizers, training_steps=10
        )
        self.train_state = TrainState()
        config = GCSCheckpointManager.Config(
            enable=True,
            folder=folder,
            interval=1,
            keep_latest_k=2,
            async_mode=async_mode,
            last_save_model_only=False,
            endpoint=endpoint,
        )
        # What torchtitan's Trainer does with `config.checkpoint`.
        self.checkpointer = config.build(
            dataloader=None,
            model_parts=[self.model],
            optimizers=self.optimizers,
            lr_schedulers=self.lr_schedulers,
            states={"train_state": self.train_state},
            sd_adapter=None,
            base_folder="/nonexistent/dump",
        )

    def train_step(self, step: int) -> None:
        generator = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(8, 16, generator=generator)
        self.model(x).pow(2).mean().backward()
        self.optimizers.step()
        self.lr_schedulers.step()
        self.optimizers.zero_grad()
        self.train_state.step = step

    def snapshot(self) -> dict[str, Any]:
        """Copies of everything the checkpoint holds: model and optimizer tensors (by FQN), the
        LR schedulers' state and the step."""
        optim = {
            k: v.clone() if isinstance(v, torch.Tensor) else v
            for k, v in self.optimizers.state_dict().items()
        }
        return {
            "model": {k: v.clone() for k, v in self.model.state_dict().items()},
            "optim": optim,
            "lr": self.lr_schedulers.state_dict(),
            "step": self.train_state.step,
        }


def train(rank: int, endpoint: str, folder: str, async_mode: str, steps: int) -> dict:
    """A first run: nothing to resume, then a save at every step; snapshots by step."""
    job = Job(0, endpoint, folder, async_mode)
    fresh = job.checkpointer.load()
    saved, snapshots = [], {}
    for step in range(1, steps + 1):
        job.train_step(step)
        saved.append(job.checkpointer.save(step, last_step=step == steps))
        snapshots[step] = job.snapshot()
    job.checkpointer.maybe_wait_for_saving()
    job.checkpointer.close()
    return {"fresh_start_loaded": fresh, "saved": saved, "snapshots": snapshots}


def resume(rank: int, endpoint: str, folder: str, async_mode: str, steps: list[int]) -> list:
    """Restarted runs (other initial weights), one per entry of `steps`: torchtitan's
    `load(step)` (-1: the newest); what each restored."""
    reports = []
    for step in steps:
        job = Job(1, endpoint, folder, async_mode)
        before = job.snapshot()
        try:
            loaded = job.checkpointer.load(step=step)
        except FileNotFoundError as exc:
            loaded = f"{type(exc).__name__}: {exc}"
        after = job.snapshot()
        last_load = dict(job.checkpointer.checkpointer.last_load)
        job.checkpointer.close()
        reports.append({"loaded": loaded, "before": before, "after": after, "last_load": last_load})
    return reports
