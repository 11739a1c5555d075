"""The benchmark's harness: ``local_ranks`` (rank processes on this machine, the one launcher of the
benchmark's single-machine runner and of the repository's multi-rank tests), ``job`` (the job
protocol), ``launch`` (the launchers), ``rounds`` (arms interleaved per round) and ``rank_progress``
(progress messages from the ranks).

Imports ``gcsckpt.testing`` (free ports) and no other ``ckptbench`` sub-package.
"""
