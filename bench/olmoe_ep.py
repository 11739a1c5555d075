"""The main job: OLMoE-1B-7B-0924 (scaled) under fsdp and under ep (dp8ep8), 8 ranks, every arm.

``tools/bazel run //bench:olmoe_ep`` starts the local GCS endpoint, saves both checkpoints once
(reused by later runs), loads each with gcsckpt (3 rounds) and the best peer, msc (1 round), and
the fsdp case with the stock FsspecReader (1 round); then saves the ep case once with gcsckpt,
each peer writer (msc, dataflux) and the ``localfs`` reference, every save verified, trains the
small OLMoE under ep with every training arm (//bench:train_ckpt's loop, one round,
``--train_layouts=`` turns it off) and measures the endpoint's upload and download ceilings. The
tables give gcsckpt's ratios to stock, the best peer, the ceilings and (saves) localfs, every
arm's client and endpoint CPU per GB (loads also storage bytes per checkpoint byte), and the run
ends with every job's wall time (docs/measurements.md, "Stock path" and "Where a main-job run
spends its time").
Flags: ``-- --baseline_cases='*'`` / ``--save_cases='*'`` add the other case,
``--baseline_rounds=N``, ``--peer_rounds=N``, ``--reference_rounds=N`` (localfs) more rounds;
every flag of //bench:checkpoint_load passes through (e.g. ``--bucket=gs://b/p``,
``--model_scale=full``, ``--readers=...``, ``--writers=...``). Modelled remote GCS:
//bench:olmoe_ep_modelled. Method: docs/design.md, "Benchmark method".
"""

from ckptbench.runner.main import run

OLMOE_EP_DEFAULTS = {
    "cases": ["load-olmoe_1b_7b_0924-fsdp-ws8", "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"],
    "sweep_axes": "model,strategy",
    "model_scale": "scaled",
    "readers": ["gcsckpt", "msc", "fsspec"],
    "rounds": 3,
    "peer_rounds": 1,
    "baseline_rounds": 1,
    "baseline_cases": ["load-olmoe_1b_7b_0924-fsdp-*"],
    "writers": ["gcsckpt", "msc", "dataflux", "localfs"],
    "save_rounds": 1,
    "reference_rounds": 1,
    "save_cases": ["load-olmoe_1b_7b_0924-ep-*"],
    "train_layouts": ["ep"],
}

if __name__ == "__main__":
    run(OLMOE_EP_DEFAULTS)
