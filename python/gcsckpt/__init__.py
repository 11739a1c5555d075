"""gcsckpt: load PyTorch distributed checkpoints (DCP) from Google Cloud Storage fast.

Subpackages: ``io`` (the C++ range reader), ``dcp`` (StorageReader/StorageWriter), ``models`` and
``parallel`` (benchmark state dicts and layouts), ``bench`` (the benchmark), ``testing``
(local GCS endpoint).
"""
