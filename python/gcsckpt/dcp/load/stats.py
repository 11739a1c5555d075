"""LoadStats: what one `GCSStorageReader.read_data` call did, counted by each load step.

In: increments from `plan` (via the reader), `ranges`, `pipeline` and `decode`. Out: the record
the reader exposes as `load_stats` (and `as_dict` for publishers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class LoadStats:
    """What one `read_data` did (all counts for this rank only).

    read_items: ReadItems in the plan (tensor_items + bytes_items). direct_items: tensor items
    whose bytes went straight into the target tensor (the rest were copied from a window
    buffer). direct_archive_items: TORCH_SAVE items among them. archive_templates: groups
    (dtype, chunk shape, archive length) of TORCH_SAVE items with a template to place them
    (one stand-in `torch.save` each, kept for the process's later loads). archive_rereads:
    direct TORCH_SAVE items whose archive did not match its template, read again through a
    buffer. objects: distinct objects read.
    ranges: byte ranges handed to the range reader. requests: HTTP GETs it sent (after
    coalescing/splitting, retries included). bytes_needed: bytes of the ranges this rank fetched.
    bytes_fetched: bytes received from the endpoint (summed over ranks: the job's storage bytes).
    bytes_verified / bytes_unverified: bytes of every range read (bytes_needed, plus the
    safetensors blob headers read to plan) of objects with / without block checksums (a
    checkpoint saved by stock torch or a peer has none); every verified byte's block matched
    its CRC-32C before it was committed. retries: retried
    requests. windows: memory windows. peer_bytes_in/peer_bytes_out: bytes
    received from / sent to other ranks when shared ranges are read once (`replicas`);
    exchange_s: time in those sends and receives.
    metadata_requests/metadata_bytes/metadata_s: the `.metadata` GET. list_requests: LISTs of
    the prefix this rank sent to pin generations (1 on the coordinator, 0 elsewhere, or 1 per
    rank when ranks plan alone). pinned_objects: objects this rank read at a pinned generation
    (0 where the endpoint reports none). plan_s: building ranges.
    fetch_s: first submit to last completion. wait_s: time blocked waiting for bytes.
    deserialize_s: decoding archives / BYTE_IO (incl. planner.load_bytes). copy_s: narrow, copy
    into targets, commit_tensor. total_s: the whole read_data call. Times in seconds.
    """

    rank: int = 0
    read_items: int = 0
    tensor_items: int = 0
    bytes_items: int = 0
    direct_items: int = 0
    direct_archive_items: int = 0
    archive_templates: int = 0
    archive_rereads: int = 0
    objects: int = 0
    ranges: int = 0
    requests: int = 0
    bytes_needed: int = 0
    bytes_fetched: int = 0
    bytes_verified: int = 0
    bytes_unverified: int = 0
    retries: int = 0
    windows: int = 0
    peer_bytes_in: int = 0
    peer_bytes_out: int = 0
    exchange_s: float = 0.0
    metadata_requests: int = 0
    metadata_bytes: int = 0
    metadata_s: float = 0.0
    list_requests: int = 0
    pinned_objects: int = 0
    plan_s: float = 0.0
    fetch_s: float = 0.0
    wait_s: float = 0.0
    deserialize_s: float = 0.0
    copy_s: float = 0.0
    total_s: float = 0.0

    def count_plan(self, item_plan) -> None:
        """Takes the item and object counts of a `plan.ItemRangePlan`."""
        for name in ("tensor_items", "bytes_items", "direct_items", "direct_archive_items"):
            setattr(self, name, getattr(item_plan, name))
        self.archive_templates, self.objects = item_plan.archive_templates, item_plan.objects

    def count_reader(self, before: dict, after: dict) -> None:
        """Adds what the range reader counted between two of its `stats()` snapshots."""
        self.requests += after["requests"] - before["requests"]
        self.bytes_fetched += after["bytes_received"] - before["bytes_received"]
        self.retries += after["retries"] - before["retries"]

    def as_dict(self) -> dict:
        """Plain dict (for JSON/CSV publishers)."""
        return asdict(self)
