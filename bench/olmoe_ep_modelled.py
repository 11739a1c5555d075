"""The main job's load tables with the local endpoint modelled like remote GCS: every media read
waits 30 ms for its first byte and streams at 200 MB/s (``--latency_ms=30 --stream_mbps=200``).

``tools/bazel run //bench:olmoe_ep_modelled`` runs the same cases as //bench:olmoe_ep (scaled
OLMoE fsdp and ep, 8 ranks) on a reduced set of arms: gcsckpt (3 rounds) and the best peer, MSC
(2 rounds). Left out, and why: the stock FsspecReader sends one GET per item, ~51,600 per rank
per fsdp round and ~8,400 on ep, each 30 ms away (tens of minutes per round); the save phase,
because the model delays media reads only (uploads go to the emulator as before, so a save table
here would repeat //bench:olmoe_ep's) and each save's verifying stock load is that slow reader.
``-- --readers=gcsckpt,msc,fsspec --baseline_cases='*ep*'`` adds the stock reader on ep anyway.
"""

from olmoe_ep import OLMOE_EP_DEFAULTS

from gcsckpt.bench.runner.main import run

MODELLED_DEFAULTS = {
    **OLMOE_EP_DEFAULTS,
    "latency_ms": 30.0,
    "stream_mbps": 200.0,
    "readers": ["gcsckpt", "msc"],
    "writers": [],
}

if __name__ == "__main__":
    run(MODELLED_DEFAULTS)
