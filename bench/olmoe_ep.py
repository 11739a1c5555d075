"""The main job: OLMoE-1B-7B-0924 (scaled) under fsdp and under ep (dp8ep8), 8 ranks, both readers.

``tools/bazel run //bench:olmoe_ep`` starts the local GCS endpoint, saves both checkpoints once
(reused by later runs), loads each with gcsckpt's GCSStorageReader (3 rounds) and with the stock
FsspecReader over gcsfs (1 round: it takes minutes per round on a 2-core machine),
verifies every tensor and prints the comparison. Every flag of //bench:checkpoint_load passes
through, e.g. ``-- --bucket=gs://b/p --model_scale=full`` or ``-- --baseline_rounds=3``.
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
