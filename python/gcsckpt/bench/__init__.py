"""The checkpoint benchmark, one sub-package per job.

``cases`` (what a case is, the catalogue, which cases a run takes), ``runner`` (the program: flags,
config, storage, checkpoint reuse, launching rank jobs, one CaseResult per case and reader),
``worker`` (what rank processes do: save the setup checkpoint, timed loads, the stock baseline
reader), ``record`` (result records, host facts, resources, progress, result rows), ``publish``
(files, tables, chart, BigQuery) and ``range_read`` (the range-reader micro-benchmark).

Kept import-light: submodules are imported where needed (``gcsckpt.bench.cases`` needs no torch).
"""
