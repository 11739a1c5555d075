"""Training frameworks' checkpoint managers on gcsckpt, one module per framework.

`gcsckpt.integrations.torchtitan`: `GCSCheckpointManager`, torchtitan's `CheckpointManager` with
gs:// checkpoint folders saved, listed, pruned and loaded through gcsckpt (the wheel's
`torchtitan` extra). Importing this package imports no framework.
"""
