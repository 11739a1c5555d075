"""The load path behind `GCSStorageReader.read_data`, one module per step, in the order they run.

    plan.sort_items        ReadItems -> ReadItems in (object, offset) order (prepare_local_plan)
    generations.pin_generations
                           one listing of the prefix -> Pins: one generation per data object
                           for the whole load, or "object changed during load"
                           (prepare_global_plan, on the coordinator)
    plan.plan_fetches      ReadItems + Metadata -> a FetchPlan of frozen Fetches; SAFETENSORS
                           items first have their blob headers read (blob_headers, one round
                           trip for all blobs of the load)
    plan.make_windows      Fetches -> Windows of bounded buffer memory, 64-byte aligned slots
    pipeline.run_windows   Windows -> (Fetch, bytes) pairs as ranges complete, two windows in
                           flight, through ranges.CheckpointRanges (the one door to the range
                           reader)
    decode.Decoder         (Fetch, bytes) -> tensors / BYTE_IO values handed to the LoadPlanner
    errors.LoadErrors      any failure -> one CheckpointReadError naming rank, object, byte range

Shared pieces: fetch (the Fetch/Window records and FetchKind), regions (chunk geometry), stats
(LoadStats, the per-load counters). No module here imports `gcsckpt.dcp.reader` or the package
`gcsckpt.dcp` itself, so the import graph stays acyclic (tests/dcp checks it).
"""
