"""The checkpoint-load benchmark: cases and catalogue, runner, metrics, publishers.

Kept import-light: submodules are imported where needed (``gcsckpt.bench.cases`` needs no torch).
"""
