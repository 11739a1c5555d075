"""One checkpoint of a training-benchmark arm: its writer, and the save call in the arm's mode.

An arm is ``<writer>-<mode>``: the writer as the save benchmark builds it
(``ckptbench.worker.arms.make_writer``) and the mode, ``sync`` (``dcp.save``), ``thread``
(``dcp.async_save``; ``async`` for the peers, the same call) or ``process``
(``dcp.async_save(async_checkpointer_type=PROCESS)``). ``none`` is the control (no checkpoint)
and ``localfs`` the floor (torch's FileSystemWriter into tmpfs, sync). gcsckpt's saves go
through the product's ``GCSCheckpointer`` in one place, :func:`gcsckpt_save`; the peers' through
torch's calls as their docs show.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any

import torch.distributed.checkpoint as dcp

from ckptbench.roles import BASELINE, CANDIDATE, LOCALFS, PEERS
from ckptbench.worker import arms

CONTROL = "none"
ARMS = (
    CONTROL,
    LOCALFS,
    f"{CANDIDATE}-sync",
    f"{CANDIDATE}-thread",
    f"{CANDIDATE}-process",
    *(f"{peer}-{mode}" for peer in PEERS for mode in ("sync", "async")),
    f"{BASELINE}-sync",
)
ASYNC_MODES = ("thread", "async", "process")


def arm_parts(arm: str) -> tuple[str | None, str | None]:
    """(writer, mode) of an arm: ``("gcsckpt", "thread")``; ``(None, None)`` for the control,
    ``("localfs", "sync")`` for the floor.

    Raises:
      ValueError: an arm not in ``ARMS``.
    """
    if arm not in ARMS:
        raise ValueError(f"training arm {arm!r} is unknown; known: {', '.join(ARMS)}")
    if arm == CONTROL:
        return None, None
    if arm == LOCALFS:
        return LOCALFS, "sync"
    writer, _, mode = arm.rpartition("-")
    return writer, mode


_CHECKPOINTERS: dict[tuple, Any] = {}  # (mode, endpoint, group) -> the rank's GCSCheckpointer


def gcsckpt_save(state: dict[str, Any], url: str, endpoint: str | None, mode: str, group: Any):
    """gcsckpt's checkpoint of ``state`` at ``url`` in ``mode`` (the one place its saver is
    built): through ``gcsckpt.dcp.GCSCheckpointer(mode)``, the product's recommended set-up
    (staging buffers, plans and clients reused across saves, async work at background
    priority), one per (mode, endpoint, process group) kept for the rank's later saves;
    writers with ``overwrite=True``. :func:`close_savers` ends them.

    Returns:
      None for ``sync`` (saved when it returns), else the save's Future.

    Raises:
      ValueError: an unknown mode; what the save raises.
    """
    from gcsckpt.dcp import GCSCheckpointer

    key = (mode, endpoint, id(group))
    checkpointer = _CHECKPOINTERS.get(key)
    if checkpointer is None:
        checkpointer = GCSCheckpointer(mode, process_group=group, endpoint=endpoint, overwrite=True)
        _CHECKPOINTERS[key] = checkpointer
    return checkpointer.save(state, url)


def close_savers() -> None:
    """Waits for and closes every GCSCheckpointer this rank made (frees staging buffers)."""
    checkpointers = list(_CHECKPOINTERS.values())
    _CHECKPOINTERS.clear()
    for checkpointer in checkpointers:
        checkpointer.close()


def writer_mode_settings(arm: str, emulator: bool, local_root: str | None) -> dict[str, Any]:
    """What identifies the arm's setup in its rows: the writer's settings and the mode."""
    writer, mode = arm_parts(arm)
    if writer is None:
        return {"role": "control: the same loop without checkpoints"}
    call = {"sync": "dcp.save", "process": "dcp.async_save(PROCESS)"}.get(mode, "dcp.async_save")
    if writer == CANDIDATE:
        call = f"GCSCheckpointer({mode!r})"
    settings = arms.writer_settings(writer, emulator, local_root)
    return {**settings, "mode": mode, "call": call}


def start_save(
    arm: str,
    state: dict[str, Any],
    url: str,
    folder: str | None,
    endpoint: str | None,
    group: Any,
    msc: Any = None,
) -> Future | None:
    """Starts one checkpoint of ``state`` with ``arm``: at ``url`` (``gs://bucket/prefix``), or
    in the local ``folder`` for localfs; on process group ``group``.

    Returns:
      None when the save is complete on return (sync), else its Future.

    Raises:
      ValueError: the control arm (it never saves) or an unknown arm; what the save raises.
    """
    writer_name, mode = arm_parts(arm)
    if writer_name is None:
        raise ValueError(f"the {CONTROL} arm never checkpoints")
    if mode == "process" and "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # the checkpoint process's store (rank 0 picks)
    if writer_name == CANDIDATE:
        return gcsckpt_save(state, url, endpoint, mode, group)
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    writer = arms.make_writer(writer_name, bucket, prefix, endpoint, msc, folder)
    if mode == "sync":
        dcp.save(state, storage_writer=writer, process_group=group)
        return None
    return dcp.async_save(state, storage_writer=writer, process_group=group)
