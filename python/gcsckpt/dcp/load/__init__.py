"""The load path behind `GCSStorageReader.read_data`, one module per step, in the order they run.

    plan.sort_items        ReadItems in (object, offset) order (prepare_local_plan)
    generations            one listing -> one generation per data object (prepare_global_plan)
    plan.plan_item_ranges  ReadItems + Metadata -> frozen ItemRanges, one per ReadItem
                           (blob_headers for SAFETENSORS)
    plan.make_windows      ItemRanges -> Windows of bounded buffer memory, 64-byte aligned slots
    pipeline.run_windows   two windows in flight through ranges.CheckpointRanges (the one door
                           to the range reader) -> (ItemRange, bytes) as ranges complete
    decode.Decoder         (ItemRange, bytes) -> tensors / BYTE_IO values for the LoadPlanner
    replicas               with read_once over a process group: ranges several ranks read
                           fetched by one owner (replica_plan.assign) and sent to the others
    load_errors.LoadErrors any failure -> one CheckpointReadError naming rank, object, range

Shared: item_ranges (ItemRange/Window records, ItemRangeKind), regions (chunk geometry), stats
(LoadStats). Nothing here imports `gcsckpt.dcp.reader` or `gcsckpt.dcp`, so imports stay acyclic.
"""
