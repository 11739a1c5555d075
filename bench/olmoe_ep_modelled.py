"""The main job's tables with the local endpoint modelled like remote GCS: every media read waits
30 ms for its first byte and streams at 200 MB/s per request, and every upload answer waits until
30 ms + its body at 200 MB/s after the request began (``--latency_ms=30 --stream_mbps=200``).

``tools/bazel run //bench:olmoe_ep_modelled`` runs the same cases as //bench:olmoe_ep (scaled
OLMoE fsdp and ep, 8 ranks) on a reduced set of arms: loads by gcsckpt (3 rounds) and the best
peer, MSC (2 rounds); the ep save by gcsckpt, MSC and dataflux (1 each) and the localfs
reference (2; it writes to local tmpfs, so the modelled latency does not touch it: the same floor
as in the main job), verified like the main job's (torch's FileSystemReader on a byte-exact
copy; localfs's own folder), with the modelled endpoint's upload ceiling. Left out, and why:
the stock FsspecReader sends one GET per item, ~51,600 per rank per fsdp round and ~8,400 on
ep, each 30 ms away (tens of minutes per round).
``-- --readers=gcsckpt,msc,fsspec --baseline_cases='*ep*'`` adds the stock reader on ep anyway.
"""

from olmoe_ep import OLMOE_EP_DEFAULTS

from ckptbench.runner.main import run

MODELLED_DEFAULTS = {
    **OLMOE_EP_DEFAULTS,
    "latency_ms": 30.0,
    "stream_mbps": 200.0,
    "readers": ["gcsckpt", "msc"],
}

if __name__ == "__main__":
    run(MODELLED_DEFAULTS)
