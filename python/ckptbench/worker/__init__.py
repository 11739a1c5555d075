"""What a rank process does for the benchmark.

``case_jobs`` (the picklable jobs of one case and rank results, no torch), ``rank`` (join the group,
run a job, gather), ``arms`` (each reader and writer compared, and its settings), ``setup_job``
(save the case's checkpoint and checksums), ``load_job`` (timed, verified loads), ``save_job``
(timed saves, each verified by a stock load), ``save_probe`` (a rank's own RSS and its writer's
phases during a save), ``counting_planner`` (counting load planners), ``baseline`` (the stock
FsspecReader over gcsfs), ``warm_up`` (first-call set-up the launcher's forkserver does once for
every rank).
"""
