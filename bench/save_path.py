"""bazel run //bench:save_path -- [--state_mib=512] [--rounds=3] [--output=save_path.json]

The save path, one process: `dcp.save` of one state dict of float32 tensors through
GCSStorageWriter's data path (torch's serializer in a thread, the C++ uploader, many resumable
uploads in flight), one arm per object size, on a plain LocalGCS, rounds interleaved (the order
alternates), fresh writer and fresh prefix per round. Each round's checkpoint is loaded back
with GCSStorageReader and compared tensor by tensor. Per round: seconds, MB/s, this process's
CPU seconds (user + sys; the endpoint runs in processes of its own), the peak RSS above the RSS
before the save (psutil, sampled every 5 ms), upload requests and retries, and the bytes sent
from tensor memory and the bytes copied. Also times the CRC-32C of a 256 MiB
buffer (C++ SSE4.2 / table, and google-crc32c's C extension for comparison). Prints a table
with the load average; writes JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time

import google_crc32c
import psutil
import torch
import torch.distributed.checkpoint as dcp
from absl import app, flags

from gcsckpt.dcp import GCSStorageReader, GCSStorageWriter
from gcsckpt.io import crc32c
from gcsckpt.io.extension import _gcsio
from gcsckpt.testing import LocalGCS

FLAGS = flags.FLAGS
flags.DEFINE_integer("state_mib", 512, "Tensor bytes of the state dict (MiB).")
flags.DEFINE_integer("tensor_mib", 8, "Bytes per tensor (MiB).")
flags.DEFINE_integer("rounds", 3, "Timed rounds per arm.")
flags.DEFINE_list(
    "arms",
    ["uploader"],
    "Save paths to time: uploader (the table's defaults), uploader:<object MiB> (another "
    "object_bytes).",
)
flags.DEFINE_string("output", "save_path.json", "JSON results path (relative: to the cwd).")

BUCKET = "save-path"


@contextlib.contextmanager
def peak_rss():
    """Yields a dict whose "extra_mib" is, afterwards, the peak RSS above the starting RSS."""
    proc = psutil.Process()
    start = proc.memory_info().rss
    out = {"peak": start, "start_mib": start / 2**20}
    stop = threading.Event()

    def sample():
        while not stop.wait(0.005):
            out["peak"] = max(out["peak"], proc.memory_info().rss)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        out["peak"] = max(out["peak"], proc.memory_info().rss)
        out["extra_mib"] = (out["peak"] - start) / 2**20
        out["peak_mib"] = out["peak"] / 2**20


def make_state(state_mib: int, tensor_mib: int) -> dict:
    n = max(1, state_mib // tensor_mib)
    g = torch.Generator().manual_seed(0)
    numel = (tensor_mib << 20) // 4
    return {f"layer{i}.weight": torch.rand(numel, generator=g) for i in range(n)}


def save_round(gcs, arm: str, name: str, state: dict) -> dict:
    url = f"gs://{BUCKET}/{name}"
    if arm.startswith("uploader:"):
        mib = int(arm.split(":")[1])
        writer = GCSStorageWriter(url, endpoint=gcs.endpoint, object_bytes=mib << 20)
    else:
        writer = GCSStorageWriter(url, endpoint=gcs.endpoint)
    proc = psutil.Process()
    with peak_rss() as rss:
        cpu0 = proc.cpu_times()
        t0 = time.perf_counter()
        dcp.save(state, storage_writer=writer)
        seconds = time.perf_counter() - t0
        cpu1 = proc.cpu_times()
    # This process only: the local endpoint's emulator and nginx run in processes of their own.
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    save_stats, uploads = writer.save_stats, writer.uploads
    loaded = {k: torch.empty_like(v) for k, v in state.items()}
    dcp.load(
        loaded, storage_reader=GCSStorageReader(f"gs://{BUCKET}/{name}", endpoint=gcs.endpoint)
    )
    bad = [k for k in state if not torch.equal(loaded[k], state[k])]
    if bad:
        raise AssertionError(f"{arm} round {name}: {len(bad)} tensors differ, e.g. {bad[0]}")
    del loaded
    state_bytes = sum(v.numel() * v.element_size() for v in state.values())
    return {
        "arm": arm,
        "seconds": seconds,
        "cpu_s": cpu_s,
        "mb_per_s": state_bytes / seconds / 1e6,
        "bytes_referenced": save_stats.bytes_referenced,
        "bytes_copied": save_stats.bytes_copied,
        "extra_rss_mib": rss["extra_mib"],
        "rss_before_mib": rss["start_mib"],
        "peak_rss_mib": rss["peak_mib"],
        "objects": len(uploads),
        "requests": sum(u.requests for u in uploads),
        "retries": sum(u.retries for u in uploads),
        "verified_tensors": len(state),
    }


def crc_speed() -> dict:
    data = torch.randint(0, 256, (256 << 20,), dtype=torch.uint8).numpy()
    out = {"hardware": bool(_gcsio.crc32c_hardware())}
    for label, fn in (
        ("gcsckpt", lambda: crc32c(data)),
        ("google_crc32c", lambda: google_crc32c.value(data)),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[f"{label}_gb_per_s"] = data.nbytes / best / 1e9
    return out


def main(argv: list[str]) -> None:
    del argv
    state = make_state(FLAGS.state_mib, FLAGS.tensor_mib)
    state_bytes = sum(v.numel() * v.element_size() for v in state.values())
    rows = []
    load_before = os.getloadavg()
    with LocalGCS() as gcs:
        gcs.create_bucket(BUCKET)
        save_round(gcs, FLAGS.arms[0], "warmup", state)  # imports, first connections
        for r in range(FLAGS.rounds):
            order = FLAGS.arms if r % 2 == 0 else list(reversed(FLAGS.arms))
            for arm in order:
                row = save_round(gcs, arm, f"{arm.replace(':', '-')}/r{r}", state)
                row["round"] = r
                rows.append(row)
                print(
                    f"round {r} {arm:14s} {row['seconds']:6.2f} s {row['mb_per_s']:7.1f} MB/s "
                    f"CPU {row['cpu_s']:5.2f} s "
                    f"RSS {row['rss_before_mib']:5.0f} -> peak {row['peak_rss_mib']:5.0f} MiB "
                    f"(+{row['extra_rss_mib']:.0f}) objects {row['objects']} "
                    f"requests {row['requests']}",
                    flush=True,
                )
    crc = crc_speed()
    load_after = os.getloadavg()
    print(f"\nstate {state_bytes / 2**20:.0f} MiB in {len(state)} tensors, {FLAGS.rounds} rounds")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    for arm in FLAGS.arms:
        mine = [x for x in rows if x["arm"] == arm]
        secs = [x["seconds"] for x in mine]
        print(
            f"{arm:14s} median {statistics.median(secs):6.2f} s "
            f"({min(secs):.2f}-{max(secs):.2f}), "
            f"{state_bytes / statistics.median(secs) / 1e6:7.1f} MB/s, "
            f"extra RSS max {max(x['extra_rss_mib'] for x in mine):.0f} MiB, "
            f"CPU median {statistics.median(x['cpu_s'] for x in mine):.2f} s"
        )
        print(
            f"{'':14s} bytes sent from tensor memory {mine[0]['bytes_referenced']:,}, "
            f"copied {mine[0]['bytes_copied']:,} per save"
        )
    print(
        f"crc32c over 256 MiB: gcsckpt {crc['gcsckpt_gb_per_s']:.2f} GB/s "
        f"({'sse4.2' if crc['hardware'] else 'table'}), google-crc32c "
        f"{crc['google_crc32c_gb_per_s']:.2f} GB/s"
    )
    output = FLAGS.output
    if not os.path.isabs(output):  # `bazel run` starts in the runfiles tree
        output = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), output)
    with open(output, "w") as f:
        json.dump(
            {
                "state_bytes": state_bytes,
                "rows": rows,
                "crc32c": crc,
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            f,
            indent=2,
        )
    print(f"wrote {output}")


if __name__ == "__main__":
    app.run(main)
