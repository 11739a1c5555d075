"""The benchmark's harness: ``local_ranks`` (rank processes on this machine, the one launcher of
the benchmark's single-machine runner and of the repository's multi-rank tests).

Imports ``gcsckpt.testing`` (free ports) and no other ``ckptbench`` sub-package.
"""
