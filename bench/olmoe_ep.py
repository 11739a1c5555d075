"""The main job: OLMoE-1B-7B-0924 (scaled) under fsdp and under ep (dp8ep8), 8 ranks, every arm.

``tools/bazel run //bench:olmoe_ep`` starts the local GCS endpoint, saves both checkpoints once
(reused by later runs), then loads each with gcsckpt's GCSStorageReader (3 rounds) and the best
peer, multi-storage-client's DCP reader (1 round), and the fsdp case with the stock
FsspecReader over gcsfs (1 round); then saves the ep case once with gcsckpt's writer and each
peer writer (msc, dataflux), and once with the ``localfs`` reference (torch's stock
FileSystemWriter into /dev/shm: what dcp.save costs when storage is nearly free; not a peer),
each save verified by a stock load, and measures the endpoint's raw upload ceiling. Every tensor
is verified; the tables give gcsckpt's ratio to stock, to the best peer and (saves) to the
upload ceiling and to localfs; the save table splits each save into its data phase
(``write_data``: "upload-phase" MB/s and its fraction of the ceiling) and the rest (DCP's own
work), and gives each rank's peak RSS during the save against 1.1 x its state bytes + 256 MiB;
the run ends with the wall time of every job.

Why these sizes (the job must stay under 10 minutes on a 2-core machine): the stock reader
takes ~3-4 minutes per round on the fsdp case (8,877 BYTE_IO items per rank, ~413,000 GETs), so
it loads only that case, the one its target is set on (``-- --baseline_cases='*'`` adds ep,
``-- --baseline_rounds=3`` more rounds); saves run on the ep case only (``-- --save_cases='*'``
adds fsdp); every round is a job on fresh rank processes (start-up, state building and
checksums; figures in docs/measurements.md, "Where a main-job run spends its time"), so peers
run 1 round (``-- --peer_rounds=2`` more).
Every flag of //bench:checkpoint_load passes through, e.g.
``-- --bucket=gs://b/p --model_scale=full``,
``-- --readers=gcsckpt,msc,dataflux,fsspec`` or ``-- --writers=gcsckpt,msc,dataflux,fsspec``
(``-- --reference_rounds=N``: localfs saves). localfs runs one round, like every writer: each
save round is a job of ~25-33 s here (start-up, state building, verification) for a
dcp.save of 3.8-6 s.
The same tables with the endpoint modelled like remote GCS: //bench:olmoe_ep_modelled.

Measured on 2026-12-01 (quiet machine, fresh data dir, msc at 2 rounds): 678 s for the run
(11 min 22 s with Bazel), of which 46 s setting up both checkpoints (done once per data dir) and
the stock fsdp round 244 s; 20 jobs of 13-244 s. msc at 1 round drops 57 s of jobs (~570 s on
a reused data dir; from the same run's job times). Before these sizes (stock on both cases,
every writer verified by the stock FsspecReader) the job took ~46 minutes.
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
}

if __name__ == "__main__":
    run(OLMOE_EP_DEFAULTS)
