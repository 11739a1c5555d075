"""Device mesh and the checkpoint layouts: FSDP2/HSDP, TP, PP stage split, EP.

Submodules: ``strategies`` (strategy -> mesh dims, no torch), ``mesh``, ``fsdp``, ``tp``, ``pp``,
``ep``, ``layout`` (applies a case's layout), ``app_state`` (the state dict a rank saves/loads).
"""
