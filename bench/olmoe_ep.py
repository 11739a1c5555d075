"""The main job: OLMoE-1B-7B-0924 (scaled) under fsdp and under ep (dp8ep8), 8 ranks, every arm.

``tools/bazel run //bench:olmoe_ep`` starts the local GCS endpoint, saves both checkpoints once
(reused by later runs), loads each with gcsckpt's GCSStorageReader and the best peer,
multi-storage-client's DCP reader (3 rounds each), and with the stock FsspecReader over gcsfs
(1 round: it takes minutes per round on a 2-core machine); then saves the ep case once with each
writer (gcsckpt, msc, stock FsspecWriter), each save verified by a stock load. The save phase
runs on the ep case only and once per writer so the job stays near 10 minutes here: verifying a
save of the fsdp case with the stock reader alone takes about 4 minutes. Every tensor is
verified; the tables give gcsckpt's ratio to stock and to the best peer. Every flag of
//bench:checkpoint_load passes through, e.g. ``-- --bucket=gs://b/p --model_scale=full`` or
``-- --baseline_rounds=3``.
"""

from gcsckpt.bench.runner.main import run

OLMOE_EP_DEFAULTS = {
    "cases": ["load-olmoe_1b_7b_0924-fsdp-ws8", "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"],
    "sweep_axes": "model,strategy",
    "model_scale": "scaled",
    "readers": ["gcsckpt", "msc", "fsspec"],
    "rounds": 3,
    "baseline_rounds": 1,
    "writers": ["gcsckpt", "msc", "fsspec"],
    "save_rounds": 1,
    "save_cases": ["load-olmoe_1b_7b_0924-ep-*"],
}

if __name__ == "__main__":
    run(OLMOE_EP_DEFAULTS)
