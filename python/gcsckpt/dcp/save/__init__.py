"""The save path behind `GCSStorageWriter`, one module per step, in the order they run.

    plan_cache.GCSSavePlanner   create_local_plan: torch's plan cache, re-planned on a dtype
                                change (the planner a training job passes to every save)
    split                       object names `__{rank}_{save}_{n}.distcp` (prepare_*_plan), then
                                a rank's WriteItems -> objects of ~object_bytes (write_data)
    upload_pipeline             write_data: the serializer thread beside the C++ uploader, one
                                object's spans handed over as the next is written; SaveStats
      serialize.write_objects   torch's per-object loop into each object's stream
      archive_writer            each TORCH_SAVE archive: torch.save's bytes from a template
      segments                  one object's stream: tensor bytes by reference, copies under
                                the staging budget; the held tensors
    commit                      finish: Metadata with the checksum records, `.metadata`
                                committed last (create-if-absent or replaced), clean-up
    background                  an async save's threads at background priority
                                (set_up_storage_writer)

Shared with the load path, in `gcsckpt.dcp`: paths (ids, `.metadata`), checksums (the block
checksum records: where a save puts them and a load finds them), metadata_codec. The writer's
clients come from `gcsckpt.dcp.client_cache`.
Nothing here imports `gcsckpt.dcp.writer` or `gcsckpt.dcp`, so imports stay acyclic.
"""
