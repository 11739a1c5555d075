"""Device mesh and the checkpoint layouts: FSDP2/HSDP, TP, PP stage split, EP.

Every function takes the layout as a ``dims.ParallelDims`` (strategy, world size, mesh sizes,
validated once). Submodules: ``strategies`` (strategy -> mesh dims, no torch), ``dims``
(``ParallelDims``, no torch), ``mesh``, ``fsdp``, ``tp``, ``pp``, ``ep``, ``layout`` (applies a
layout to a model), ``app_state`` (the state dict a rank saves/loads, its config digest).
"""
