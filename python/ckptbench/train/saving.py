"""One checkpoint of a training-benchmark arm: its writer, and the save call in the arm's mode.

An arm is ``<writer>-<mode>``: the writer as the save benchmark builds it
(``ckptbench.worker.arms.make_writer``) and the mode, ``sync`` (``dcp.save``), ``thread``
(``dcp.async_save``; ``async`` for the peers, the same call) or ``process``
(``dcp.async_save(async_checkpointer_type=PROCESS)``). ``none`` is the control (no checkpoint)
and ``localfs`` the floor (torch's FileSystemWriter into tmpfs, sync). gcsckpt's saves go
through the product's ``GCSCheckpointer`` in one place, :func:`gcsckpt_save`; the peers' through
torch's calls as their docs show. ``gcsckpt+local-thread`` is gcsckpt-thread with the node-local
tier on (``GCSCheckpointer(root=, local_dir=)``, ``save(step=N)``): its checkpoints are the
manager's ``<prefix>/step-N`` and each rank's newest copy stays in the tier's folder.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any

import torch.distributed.checkpoint as dcp

from ckptbench.roles import BASELINE, CANDIDATE, LOCAL_TIER, LOCALFS, PEERS
from ckptbench.worker import arms

CONTROL = "none"
ARMS = (
    CONTROL,
    LOCALFS,
    f"{CANDIDATE}-sync",
    f"{CANDIDATE}-thread",
    f"{CANDIDATE}-process",
    f"{LOCAL_TIER}-thread",
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


def gcsckpt_save(
    state: dict[str, Any],
    url: str,
    endpoint: str | None,
    mode: str,
    group: Any,
    local_dir: str | None = None,
):
    """gcsckpt's checkpoint of ``state`` at ``url`` in ``mode`` (the one place its saver is
    built): through ``gcsckpt.dcp.GCSCheckpointer(mode)``, the product's recommended set-up
    (staging buffers, plans and clients reused across saves, async work at background
    priority), one per (mode, endpoint, process group, local_dir) kept for the rank's later
    saves; writers with ``overwrite=True``. With ``local_dir`` (the node-local tier on), ``url``
    must be ``<root>/step-N``: the checkpointer gets ``root=`` and ``local_dir=`` and saves with
    ``save(state, step=N)``. :func:`close_savers` ends them.

    Returns:
      None for ``sync`` (saved when it returns), else the save's Future.

    Raises:
      ValueError: an unknown mode, a ``local_dir`` save to a url that is not ``<root>/step-N``;
        what the save raises.
    """
    root = step = None
    if local_dir is not None:
        root, _, number = url.rstrip("/").rpartition("/step-")
        if not root or not number.isdigit():
            raise ValueError(f"a local-tier save needs <root>/step-N, got {url!r}")
        step = int(number)
    checkpointer = _checkpointer(mode, endpoint, group, local_dir, root)
    if step is not None:
        return checkpointer.save(state, step=step)
    return checkpointer.save(state, url)


def _checkpointer(mode: str, endpoint: str | None, group: Any, local_dir: str | None, root):
    """The rank's GCSCheckpointer for (mode, endpoint, group, local_dir, root), made once."""
    from gcsckpt.dcp import GCSCheckpointer

    key = (mode, endpoint, id(group), local_dir, root)
    checkpointer = _CHECKPOINTERS.get(key)
    if checkpointer is None:
        if mode == "process" and "MASTER_ADDR" not in os.environ:
            os.environ["MASTER_ADDR"] = "127.0.0.1"  # the checkpoint process's store
        checkpointer = GCSCheckpointer(
            mode,
            root=root,
            local_dir=local_dir,
            process_group=group,
            endpoint=endpoint,
            overwrite=True,
        )
        _CHECKPOINTERS[key] = checkpointer
    return checkpointer


def prepare_saver(arm: str, endpoint: str | None, group: Any, root: str, folder: str) -> None:
    """Makes the arm's GCSCheckpointer before the loop, as a job does at its start, and waits
    for "process" mode's checkpoint process to run (its start overlaps a real job's model
    building and loading; the loop measures the steady state); nothing for the other arms.
    ``root`` is the run's ``gs://bucket/prefix`` and ``folder`` the local tier's ``local_dir``
    (the local-tier arm's), the same the loop's saves pass."""
    writer_name, mode = arm_parts(arm)
    checkpointer = None
    if writer_name == CANDIDATE:
        checkpointer = _checkpointer(mode, endpoint, group, None, None)
    elif writer_name == LOCAL_TIER:
        checkpointer = _checkpointer(mode, endpoint, group, folder, root)
    if checkpointer is not None:
        checkpointer.checkpoint_pid()  # "process": waits for its start; else None at once


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
    if writer == LOCAL_TIER:
        folder = f"{local_root} (tmpfs)" if local_root == arms.LOCAL_TMPFS else "job scratch dir"
        settings = {
            "class": "gcsckpt.dcp.GCSCheckpointer",
            "options": {"local_dir": f"a folder below {folder}"},
            "role": "gcsckpt with the node-local tier on: its cost beside gcsckpt-thread",
        }
        return {**settings, "mode": mode, "call": f"GCSCheckpointer({mode!r}, local_dir=...)"}
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
    in the local ``folder`` for localfs (for the local-tier arm: ``url`` is ``<root>/step-N``
    and ``folder`` the tier's ``local_dir``); on process group ``group``.

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
    if writer_name == LOCAL_TIER:
        return gcsckpt_save(state, url, endpoint, mode, group, local_dir=folder)
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    writer = arms.make_writer(writer_name, bucket, prefix, endpoint, msc, folder)
    if mode == "sync":
        dcp.save(state, storage_writer=writer, process_group=group)
        return None
    return dcp.async_save(state, storage_writer=writer, process_group=group)
