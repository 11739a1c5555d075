"""The checkpoint benchmark, one sub-package per job; a package of its own, outside the
library's ``gcsckpt`` namespace (the wheel never ships it; it imports gcsckpt, never the reverse).

``roles`` (the arms' names and roles), ``cases`` (what a case is, the catalogue, which cases a
run takes), ``runner`` (the program: flags, config, storage, checkpoint reuse, launching rank
jobs, one CaseResult per case and reader, one SaveResult per save case and writer), ``worker``
(what rank processes do: save the setup checkpoint, timed loads and saves, the stock baseline
reader), ``record`` (result records, host facts, resources, progress, result rows), ``publish``
(files, tables, chart, BigQuery), ``ceiling`` (raw endpoint ceilings), ``range_read`` (the
range-reader micro-benchmark), ``train`` (saves in a training loop, ``//bench:train_ckpt`` and
the main job's training phase), ``workloads`` (model configs and state, parallel layouts) and
``harness`` (the local rank launcher, also the multi-rank tests').
Sub-packages import each other one way (tests/bench/test_package_graph.py).

Kept import-light: submodules are imported where needed (``ckptbench.cases`` needs no torch).
"""
