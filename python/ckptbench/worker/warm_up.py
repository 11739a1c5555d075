"""Imported once by the rank launcher's forkserver: builds the tiny models on ``meta`` so the
lazy imports and first-call set-up they trigger (``torch._dynamo``, pulled in by meta-tensor
ops; transformers' auto-model mapping; rotary init) happen in the forkserver, and every rank
process forked from it starts with them done instead of paying them per job (figures:
docs/measurements.md, "Where a main-job run spends its time").
Nothing is kept: the models are dropped (``meta`` tensors hold no storage).
"""

from ckptbench.workloads.models.builder import build_meta_model

for _spec in ("olmoe_1b_7b_0924:tiny", "llama_3_1_8b:tiny"):
    build_meta_model(_spec)
del _spec
