"""What a rank process does for the benchmark.

``jobs`` (the picklable jobs and rank results, no torch), ``rank`` (join the group, run a job,
gather), ``setup_job`` (save the case's checkpoint and checksums), ``load_job`` (timed, verified
loads), ``planner`` (counting load planner), ``baseline`` (the stock FsspecReader over gcsfs).
"""
