"""gcsckpt: PyTorch distributed checkpoints (DCP) on Google Cloud Storage, loaded fast.

Subpackages: ``gcsckpt.dcp`` (``GCSStorageReader`` / ``GCSStorageWriter`` for
``torch.distributed.checkpoint``, ``GCSCheckpointer`` for a training run's checkpoints),
``gcsckpt.io`` (the C++ range reader and uploader, ``gcsckpt._gcsio``, and the object client) and
``gcsckpt.testing`` (a local GCS endpoint and a fault-injecting proxy for tests; its dependencies
come with the ``testing`` extra). The ``gcsckpt`` command (``python -m gcsckpt``) lists and
prunes a run's checkpoints.
"""

# The one source of the version: the wheel's metadata and file name are read from this line
# (tools/wheel/version.bzl); keep it a plain string literal.
__version__ = "0.1.0"
