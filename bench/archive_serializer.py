"""bazel run //bench:archive_serializer -- [--small=1600] [--large=8] [--rounds=5] [--dcp_save]

The TORCH_SAVE serializer, one process, one thread: each item's archive written by
`torch.save(tensor, stream)` (torch's `_write_item`) vs `gcsckpt.dcp.save.archive_writer` (the same
bytes, no torch.save call), into the save path's own `SegmentedStream` (storage bytes of 32 KiB
or more referenced, the rest copied), over an ep-like mix: `--small` tensors of a few shapes and
dtypes (64 B - 256 KiB) plus `--large` tensors of `--large_mib` MiB. Rounds interleaved (the
order alternates); per arm the median of rounds: us per item (all items, small items), the
large items' GB/s, and the CPU seconds of the process. Before timing, every archive of one
round is checked equal to torch.save's. With --dcp_save also times a whole `dcp.save` of the
same state through GCSStorageWriter into a LocalGCS, both serializers (median seconds).
"""

from __future__ import annotations

import io
import statistics
import time

import torch
import torch.distributed.checkpoint as dcp
from absl import app, flags

from gcsckpt.dcp import GCSStorageWriter
from gcsckpt.dcp.save import archive_writer
from gcsckpt.dcp.save.segments import HeldTensors, SegmentedStream, StagingBudget

FLAGS = flags.FLAGS
flags.DEFINE_integer("small", 1600, "Small tensor items.")
flags.DEFINE_integer("large", 8, "Large tensor items.")
flags.DEFINE_integer("large_mib", 16, "Bytes per large item (MiB).")
flags.DEFINE_integer("rounds", 5, "Timed rounds per arm.")
flags.DEFINE_bool("dcp_save", False, "Also time whole dcp.save calls into a LocalGCS.")

# (shape, dtype) of the small items, cycled: norms, biases, router weights, expert slices,
# optimizer steps (0-d), an empty tensor.
_SMALL = [
    ((2048,), torch.float32),
    ((2048,), torch.bfloat16),
    ((64, 2048), torch.bfloat16),
    ((), torch.float32),
    ((16,), torch.int64),
    ((128, 512), torch.float32),
    ((0,), torch.float32),
    ((8, 1024), torch.float32),
]


def _state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    state = {}
    for i in range(FLAGS.small):
        shape, dtype = _SMALL[i % len(_SMALL)]
        state[f"small.{i}"] = torch.randn(shape, generator=gen).to(dtype)
    n = (FLAGS.large_mib << 20) // 4
    for i in range(FLAGS.large):
        state[f"large.{i}"] = torch.randn(n, generator=gen)
    return state


def _serialize(tensors: list[torch.Tensor], write) -> None:
    held = HeldTensors()
    for t in tensors:
        held.add(t)
    stream = SegmentedStream(lambda: held, StagingBudget(1 << 40))
    for t in tensors:
        write(t, stream)
    stream.release()
    held.clear()


def _torch_save(tensor, stream) -> None:
    torch.save(tensor, stream)


def _timed(tensors: list[torch.Tensor], write) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    _serialize(tensors, write)
    return time.perf_counter() - wall, time.process_time() - cpu


def _check(tensors: list[torch.Tensor], writer: archive_writer.ArchiveWriter) -> None:
    for t in tensors:
        ours, theirs = io.BytesIO(), io.BytesIO()
        writer.write(ours, t)
        torch.save(t, theirs)
        if ours.getvalue() != theirs.getvalue():
            raise SystemExit(f"archive differs from torch.save for {t.dtype} {tuple(t.shape)}")


def _dcp_save(state: dict, ours: bool, gcs, round_: int) -> float:
    url = f"gs://bench/{'ours' if ours else 'torch'}/{round_}"
    saved = archive_writer.current_writer
    if not ours:  # the path as before: torch's loop, torch.save per item
        archive_writer.current_writer = lambda: None
    try:
        start = time.perf_counter()
        dcp.save(state, storage_writer=GCSStorageWriter(url, endpoint=gcs.endpoint))
        return time.perf_counter() - start
    finally:
        archive_writer.current_writer = saved


def main(argv) -> None:
    del argv
    torch.set_num_threads(1)
    state = _state()
    tensors = list(state.values())
    small = tensors[: FLAGS.small]
    large = tensors[FLAGS.small :]
    writer = archive_writer.current_writer()
    if writer is None:
        raise SystemExit("this torch's archives differ from archive_writer's: nothing to time")
    _check(tensors, writer)
    arms = {"torch.save": _torch_save, "archive_writer": lambda t, s: writer.write(s, t)}
    rows: dict[str, dict[str, list[float]]] = {a: {} for a in arms}
    for r in range(FLAGS.rounds + 1):  # round 0 warms templates and caches, not recorded
        order = list(arms) if r % 2 else list(reversed(arms))
        for arm in order:
            wall_small, cpu_small = _timed(small, arms[arm])
            wall_large, _ = _timed(large, arms[arm]) if large else (0.0, 0.0)
            if r == 0:
                continue
            row = rows[arm]
            row.setdefault("us_small", []).append(wall_small / len(small) * 1e6)
            row.setdefault("cpu_us_small", []).append(cpu_small / len(small) * 1e6)
            total = (wall_small + wall_large) / len(tensors) * 1e6
            row.setdefault("us_item", []).append(total)
            if large:
                gb = sum(t.nbytes for t in large) / 1e9
                row.setdefault("large_gbs", []).append(gb / wall_large)
    print(
        f"items: {len(small)} small ({sum(t.nbytes for t in small) / 2**20:.1f} MiB) +"
        f" {len(large)} large x {FLAGS.large_mib} MiB; median of {FLAGS.rounds} rounds"
    )
    print(f"{'arm':16s} {'us/item':>9s} {'us/small':>9s} {'cpu us/small':>13s} {'large GB/s':>11s}")
    for arm, row in rows.items():
        med = {k: statistics.median(v) for k, v in row.items()}
        print(
            f"{arm:16s} {med['us_item']:9.1f} {med['us_small']:9.1f} {med['cpu_us_small']:13.1f}"
            f" {med.get('large_gbs', 0.0):11.2f}"
        )
    if FLAGS.dcp_save:
        from gcsckpt.testing import LocalGCS

        with LocalGCS() as gcs:
            gcs.create_bucket("bench")
            times: dict[str, list[float]] = {"torch.save": [], "archive_writer": []}
            for r in range(FLAGS.rounds + 1):
                for ours in (r % 2 == 0, r % 2 != 0):
                    seconds = _dcp_save(state, ours, gcs, r)
                    if r:
                        times["archive_writer" if ours else "torch.save"].append(seconds)
            for arm, values in times.items():
                print(f"dcp.save {arm:16s} {statistics.median(values):7.3f} s (median)")


if __name__ == "__main__":
    app.run(main)
