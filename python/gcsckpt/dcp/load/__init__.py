"""The load path behind `GCSStorageReader.read_data`, one module per step, in the order they run.

    plan.sort_items        ReadItems in (object, offset) order (prepare_local_plan)
    generations            one listing -> one generation per data object (prepare_global_plan)
    plan.plan_fetches      ReadItems + Metadata -> frozen Fetches (blob_headers for SAFETENSORS)
    plan.make_windows      Fetches -> Windows of bounded buffer memory, 64-byte aligned slots
    pipeline.run_windows   two windows in flight through ranges.CheckpointRanges (the one door
                           to the range reader) -> (Fetch, bytes) as ranges complete
    decode.Decoder         (Fetch, bytes) -> tensors / BYTE_IO values for the LoadPlanner
    replicas               with read_once over a process group: ranges several ranks read
                           fetched by one owner (replica_plan.assign) and sent to the others
    errors.LoadErrors      any failure -> one CheckpointReadError naming rank, object, range

Shared: fetch (Fetch/Window records, FetchKind), regions (chunk geometry), stats (LoadStats).
Nothing here imports `gcsckpt.dcp.reader` or `gcsckpt.dcp`, so imports stay acyclic.
"""
