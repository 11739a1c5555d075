"""What the benchmark checkpoints: ``models`` (model configs, meta-device builders, seeded state)
and ``parallel`` (device mesh, FSDP2/HSDP, TP, PP and EP layouts, the state a rank saves).

Benchmark workloads, not library code: the wheel does not ship them. ``parallel`` imports
``models``; neither imports ``gcsckpt`` or another ``ckptbench`` sub-package.
"""
